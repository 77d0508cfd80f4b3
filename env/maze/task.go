package maze

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// Config tunes task generation and the episode. DefaultConfig is what the registry uses.
type Config struct {
	// MinSize and MaxSize bound the maze side in cells; each side is drawn from the range.
	MinSize, MaxSize int
	// MinDist and MaxDist bound the shortest-path length from start to goal.
	MinDist, MaxDist int
	// Braid is the probability of opening each wall left by the perfect-maze generator.
	Braid float64
	// StepFactor and StepSlack give the step budget: StepFactor·shortest + StepSlack moves.
	StepFactor, StepSlack int
	// StepPenalty is subtracted on every step that does not reach the goal (0 keeps the reward
	// purely 1/0, which is what outcome-based estimators expect).
	StepPenalty float64
}

// DefaultConfig: 5–7 cells a side, goal 4–10 moves away, 15% braid, budget 2·shortest + 4
// (at most 24 moves), no step penalty.
func DefaultConfig() Config {
	return Config{MinSize: 5, MaxSize: 7, MinDist: 4, MaxDist: 10, Braid: 0.15, StepFactor: 2, StepSlack: 4}
}

// Levels are the difficulty levels, by maze size (LevelConfig): level 2 is DefaultConfig.
var Levels = []int{1, 2, 3}

// LevelConfig is the configuration of level l (one of Levels): level 1 is 4–5 cells a side with
// the goal 2–6 moves away, level 2 DefaultConfig (5–7 a side, 4–10 moves), level 3 7–9 a side
// with the goal 8–16 moves away (a budget of up to 36 moves). An unknown level gives a
// configuration that Validate refuses.
func LevelConfig(l int) Config {
	c := DefaultConfig()
	switch l {
	case 1:
		c.MinSize, c.MaxSize, c.MinDist, c.MaxDist = 4, 5, 2, 6
	case 2:
	case 3:
		c.MinSize, c.MaxSize, c.MinDist, c.MaxDist = 7, 9, 8, 16
	default:
		c.MinSize = 0
	}
	return c
}

// Validate reports every unusable setting.
func (c Config) Validate() error {
	var errs []error
	if c.MinSize < 2 || c.MaxSize < c.MinSize || c.MaxSize > 32 {
		errs = append(errs, fmt.Errorf("maze: need 2 <= min_size (%d) <= max_size (%d) <= 32", c.MinSize, c.MaxSize))
	}
	if c.MinDist < 1 || c.MaxDist < c.MinDist {
		errs = append(errs, fmt.Errorf("maze: need 1 <= min_dist (%d) <= max_dist (%d)", c.MinDist, c.MaxDist))
	}
	if c.MinSize >= 2 && c.MinDist >= c.MinSize*c.MinSize {
		errs = append(errs, fmt.Errorf("maze: min_dist %d cannot fit a %d×%d maze", c.MinDist, c.MinSize, c.MinSize))
	}
	if !(c.Braid >= 0 && c.Braid <= 1) {
		errs = append(errs, fmt.Errorf("maze: braid must be in [0, 1], got %v", c.Braid))
	}
	if c.StepFactor < 1 || c.StepSlack < 0 {
		errs = append(errs, fmt.Errorf("maze: need step_factor >= 1 (%d) and step_slack >= 0 (%d)", c.StepFactor, c.StepSlack))
	}
	if c.StepPenalty < 0 || math.IsNaN(c.StepPenalty) || math.IsInf(c.StepPenalty, 0) {
		errs = append(errs, fmt.Errorf("maze: step_penalty must be finite and >= 0, got %v", c.StepPenalty))
	}
	return errors.Join(errs...)
}

// task is one generated maze with its start, goal and step budget.
type task struct {
	g           *grid
	start, goal cell
	shortest    int   // moves on a shortest path from start to goal
	maxSteps    int   // step budget
	toGoal      []int // BFS distance of every cell to the goal
}

// newTask generates the task of seed. cfg must be valid. Generation never fails: a maze whose
// start has no cell in the distance range is replaced by the next one the seed's stream draws,
// and after 64 tries the farthest cell below the range is taken (it cannot happen with
// DefaultConfig, where every 5×5 maze has cells 4–10 moves away from some start).
func newTask(seed int64, cfg Config) *task {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6d617a65)) // "maze"
	var (
		g     *grid
		start cell
		dist  []int
	)
	for try := 0; try < 64; try++ {
		w := cfg.MinSize + rng.IntN(cfg.MaxSize-cfg.MinSize+1)
		h := cfg.MinSize + rng.IntN(cfg.MaxSize-cfg.MinSize+1)
		g = carve(w, h, cfg.Braid, rng)
		start = cell{rng.IntN(w), rng.IntN(h)}
		dist = g.distances(start)
		var cand []int
		for i, d := range dist {
			if d >= cfg.MinDist && d <= cfg.MaxDist {
				cand = append(cand, i)
			}
		}
		if len(cand) > 0 {
			return finishTask(g, start, cand[rng.IntN(len(cand))], dist, cfg)
		}
	}
	far := 0
	for i, d := range dist {
		if d <= cfg.MaxDist && d > dist[far] {
			far = i
		}
	}
	return finishTask(g, start, far, dist, cfg)
}

func finishTask(g *grid, start cell, goalIdx int, dist []int, cfg Config) *task {
	goal := cell{goalIdx % g.W, goalIdx / g.W}
	t := &task{g: g, start: start, goal: goal, shortest: dist[goalIdx], toGoal: g.distances(goal)}
	t.maxSteps = cfg.StepFactor*t.shortest + cfg.StepSlack
	return t
}
