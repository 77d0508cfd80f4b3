package maze

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/envtest"
)

func TestSuite(t *testing.T) {
	envtest.Run(t, Spec())
}

// TestGeneration checks the invariants of many generated tasks: sizes in range, every cell
// reachable (so the maze is solvable whatever the start), walls symmetric and closed at the
// border, goal distance in range, budget as documented.
func TestGeneration(t *testing.T) {
	cfgs := []struct {
		name string
		cfg  Config
	}{
		{"default", DefaultConfig()},
		{"perfect", Config{MinSize: 5, MaxSize: 7, MinDist: 4, MaxDist: 10, StepFactor: 2, StepSlack: 4}},
		{"open", Config{MinSize: 3, MaxSize: 4, MinDist: 1, MaxDist: 3, Braid: 1, StepFactor: 1, StepSlack: 0}},
		{"large", Config{MinSize: 12, MaxSize: 12, MinDist: 20, MaxDist: 40, Braid: 0.05, StepFactor: 3, StepSlack: 1}},
	}
	n := 400
	if testing.Short() {
		n = 100
	}
	for _, c := range cfgs {
		t.Run(c.name, func(t *testing.T) {
			for seed := int64(0); seed < int64(n); seed++ {
				if msg := checkTask(newTask(seed, c.cfg), c.cfg); msg != "" {
					t.Fatalf("seed %d: %s", seed, msg)
				}
			}
		})
	}
}

func checkTask(tk *task, cfg Config) string {
	g := tk.g
	if g.W < cfg.MinSize || g.W > cfg.MaxSize || g.H < cfg.MinSize || g.H > cfg.MaxSize {
		return fmt.Sprintf("size %dx%d outside [%d, %d]", g.W, g.H, cfg.MinSize, cfg.MaxSize)
	}
	for y := 0; y < g.H; y++ {
		for x := 0; x < g.W; x++ {
			c := cell{x, y}
			for i, m := range moves {
				nb := cell{x + m.dx, y + m.dy}
				if !g.in(nb) {
					if g.isOpen(c, m.bit) {
						return fmt.Sprintf("cell %v open %s through the border", c, m.name)
					}
					continue
				}
				if g.isOpen(c, m.bit) != g.isOpen(nb, m.back) {
					return fmt.Sprintf("wall between %v and %v is one-sided (move %d)", c, nb, i)
				}
			}
		}
	}
	for i, d := range g.distances(tk.start) {
		if d < 0 {
			return fmt.Sprintf("cell %d unreachable from the start", i)
		}
	}
	if tk.shortest < cfg.MinDist || tk.shortest > cfg.MaxDist {
		return fmt.Sprintf("shortest path %d outside [%d, %d]", tk.shortest, cfg.MinDist, cfg.MaxDist)
	}
	if tk.toGoal[g.idx(tk.start)] != tk.shortest {
		return fmt.Sprintf("distance from goal %d != shortest %d", tk.toGoal[g.idx(tk.start)], tk.shortest)
	}
	if want := cfg.StepFactor*tk.shortest + cfg.StepSlack; tk.maxSteps != want {
		return fmt.Sprintf("budget %d, want %d", tk.maxSteps, want)
	}
	return ""
}

func TestGenerationDeterministicAndVaried(t *testing.T) {
	cfg := DefaultConfig()
	distinct := map[string]bool{}
	for seed := int64(0); seed < 50; seed++ {
		a, b := newTask(seed, cfg), newTask(seed, cfg)
		ka, kb := taskKey(a), taskKey(b)
		if ka != kb {
			t.Fatalf("seed %d generates two different tasks", seed)
		}
		distinct[ka] = true
	}
	if len(distinct) < 50 {
		t.Errorf("50 seeds gave %d distinct tasks", len(distinct))
	}
}

func taskKey(t *task) string {
	return fmt.Sprint(t.g.W, t.g.H, t.g.open, t.start, t.goal)
}

func TestParseMove(t *testing.T) {
	cases := []struct {
		action string
		want   int
	}{
		{"up", 0},
		{"DOWN", 1},
		{" Left.\n", 2},
		{"right", 3},
		{"left is a wall, so: up", 0},
		{"go up then down", 1},
		{"upright", -1},
		{"uppercase", -1},
		{"", -1},
		{"north", -1},
		{"\xffright\x00", 3},
		{"ünup", -1}, // the bytes of 'ü' separate words, leaving "nup", which is not a move
		{"über up", 0},
		{strings.Repeat("x", 1<<16) + " left", 2},
	}
	for _, c := range cases {
		if got := parseMove(c.action); got != c.want {
			t.Errorf("parseMove(%.40q) = %d, want %d", c.action, got, c.want)
		}
	}
}

// TestEpisode drives one fixed maze by hand: bumps, invalid moves, Info keys, the goal.
func TestEpisode(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const seed = 11
	tk := newTask(seed, cfg)
	obs, err := e.Reset(ctx, seed)
	if err != nil {
		t.Fatal(err)
	}
	if obs.System != System || obs.Text != view(tk, tk.start) {
		t.Fatalf("reset observation %q", obs.Text)
	}
	// A move into a wall: find one at the start.
	wall := -1
	for i, m := range moves {
		if !tk.g.isOpen(tk.start, m.bit) {
			wall = i
			break
		}
	}
	if wall >= 0 {
		tr, err := e.Step(ctx, moves[wall].name)
		if err != nil || tr.Done || !strings.HasPrefix(tr.Observation, "bump\n") {
			t.Fatalf("bump step: %+v, %v", tr, err)
		}
		if tr.Info[InfoState] != fmt.Sprintf("%d,%d", tk.start.X, tk.start.Y) || tr.Info[InfoMove] != moves[wall].name {
			t.Errorf("bump info %v", tr.Info)
		}
	}
	tr, err := e.Step(ctx, "hmm")
	if err != nil || tr.Done || !strings.HasPrefix(tr.Observation, "invalid move\n") || tr.Info[InfoMove] != "none" {
		t.Fatalf("invalid step: %+v, %v", tr, err)
	}
	if tr.Info[InfoView] != view(tk, tk.start) {
		t.Errorf("view %q", tr.Info[InfoView])
	}
	// Follow the shortest path; the last step reaches the goal.
	pos := tk.start
	for i := 0; i < tk.shortest; i++ {
		m := tk.g.bestMove(pos, tk.toGoal)
		pos, _ = tk.g.step(pos, m)
		tr, err = e.Step(ctx, "I go "+moves[m].name)
		if err != nil {
			t.Fatal(err)
		}
		if i < tk.shortest-1 && (tr.Done || tr.Reward != 0) {
			t.Fatalf("step %d ended early: %+v", i, tr)
		}
	}
	if !tr.Done || tr.Reward != 1 || tr.Info[env.InfoSuccess] != "true" || tr.Observation != "goal reached" {
		t.Fatalf("final transition %+v", tr)
	}
	if _, err := e.Step(ctx, "up"); err == nil {
		t.Error("step after done succeeded")
	}
}

func TestBudgetAndPenalty(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.StepPenalty = 0.01
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tk := newTask(5, cfg)
	if _, err := e.Reset(ctx, 5); err != nil {
		t.Fatal(err)
	}
	var tr env.Transition
	for i := 0; i < tk.maxSteps; i++ {
		if tr, err = e.Step(ctx, "nothing"); err != nil {
			t.Fatal(err)
		}
		if tr.Reward != -0.01 {
			t.Fatalf("step %d reward %v, want -0.01", i, tr.Reward)
		}
		if tr.Done != (i == tk.maxSteps-1) {
			t.Fatalf("step %d of %d: done %v", i, tk.maxSteps, tr.Done)
		}
	}
	if tr.Info[env.InfoTruncated] != TruncatedMaxSteps || tr.Info[env.InfoSuccess] != "false" {
		t.Errorf("final info %v", tr.Info)
	}
}

func TestConfigValidate(t *testing.T) {
	mod := func(f func(*Config)) Config { c := DefaultConfig(); f(&c); return c }
	cases := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"default", DefaultConfig(), true},
		{"zero", Config{}, false},
		{"size order", mod(func(c *Config) { c.MinSize, c.MaxSize = 7, 5 }), false},
		{"too large", mod(func(c *Config) { c.MaxSize = 40 }), false},
		{"dist order", mod(func(c *Config) { c.MinDist, c.MaxDist = 5, 4 }), false},
		{"dist cannot fit", mod(func(c *Config) { c.MinSize, c.MinDist, c.MaxDist = 2, 4, 9 }), false},
		{"braid", mod(func(c *Config) { c.Braid = 1.5 }), false},
		{"penalty", mod(func(c *Config) { c.StepPenalty = -1 }), false},
		{"factor", mod(func(c *Config) { c.StepFactor = 0 }), false},
	}
	for _, c := range cases {
		_, err := New(c.cfg)
		if (err == nil) != c.ok {
			t.Errorf("%s: New error %v, want ok=%v", c.name, err, c.ok)
		}
	}
	x := NewExpert(Config{}, 1, 0, nil)
	if _, err := x.Act(context.Background(), ""); err == nil {
		t.Error("expert with an invalid config acted")
	}
}

// TestExpertNoise: the clean expert always takes the shortest path; noise costs moves.
func TestExpertNoise(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	e, _ := New(cfg)
	extra := 0
	for seed := int64(0); seed < 40; seed++ {
		tk := newTask(seed, cfg)
		ep, err := env.Play(ctx, e, NewExpert(cfg, seed, 0, nil), seed, 100)
		if err != nil || !ep.Success || len(ep.Steps) != tk.shortest {
			t.Fatalf("seed %d: clean expert took %d steps (shortest %d), success %v, err %v", seed, len(ep.Steps), tk.shortest, ep.Success, err)
		}
		ep, err = env.Play(ctx, e, NewExpert(cfg, seed, 0.5, rand.New(rand.NewPCG(1, uint64(seed)))), seed, 100)
		if err != nil {
			t.Fatal(err)
		}
		extra += len(ep.Steps) - tk.shortest
	}
	if extra <= 0 {
		t.Errorf("noisy expert took no extra moves over 40 mazes")
	}
}

// TestLevels checks each level's mazes keep to its sizes and distances, level 2 being the
// default's mazes.
func TestLevels(t *testing.T) {
	for _, l := range Levels {
		cfg := LevelConfig(l)
		if err := cfg.Validate(); err != nil {
			t.Fatalf("level %d: %v", l, err)
		}
		for seed := int64(0); seed < 200; seed++ {
			tk := newTask(seed, cfg)
			if tk.g.W < cfg.MinSize || tk.g.W > cfg.MaxSize || tk.g.H < cfg.MinSize || tk.g.H > cfg.MaxSize ||
				tk.shortest < cfg.MinDist || tk.shortest > cfg.MaxDist {
				t.Fatalf("level %d seed %d: %d×%d maze, goal %d moves away", l, seed, tk.g.W, tk.g.H, tk.shortest)
			}
		}
	}
	if LevelConfig(2) != DefaultConfig() {
		t.Errorf("level 2 is %+v, want the default", LevelConfig(2))
	}
	if err := LevelConfig(4).Validate(); err == nil {
		t.Errorf("level 4 is valid")
	}
}
