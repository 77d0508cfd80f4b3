package maze

import (
	"context"
	"fmt"
	"math/rand/v2"
)

// Expert walks a shortest path: it regenerates the task from the seed (it knows the whole maze,
// which the agent does not) and tracks its own position by replaying its moves on it. With
// probability noise a move is uniformly random instead, which may bump into a wall or lead away;
// the expert then continues on a shortest path from wherever it stands.
type Expert struct {
	t     *task
	pos   cell
	noise float64
	rng   *rand.Rand
	err   error
}

// NewExpert returns the expert for the task of seed under cfg. A nil rng gets one seeded from
// seed, so the expert is reproducible either way. An invalid cfg yields an expert whose Act
// fails with the validation error.
func NewExpert(cfg Config, seed int64, noise float64, rng *rand.Rand) *Expert {
	if rng == nil {
		rng = rand.New(rand.NewPCG(uint64(seed), 0x657870)) // "exp"
	}
	x := &Expert{noise: noise, rng: rng}
	if err := cfg.Validate(); err != nil {
		x.err = fmt.Errorf("maze expert: %w", err)
		return x
	}
	x.t = newTask(seed, cfg)
	x.pos = x.t.start
	return x
}

// Act returns the next move word. It ignores the observation: the maze and its own moves
// determine where it stands.
func (x *Expert) Act(ctx context.Context, _ string) (string, error) {
	if x.err != nil {
		return "", x.err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("maze expert: %w", err)
	}
	m := x.t.g.bestMove(x.pos, x.t.toGoal)
	if m < 0 || (x.noise > 0 && x.rng.Float64() < x.noise) {
		m = x.rng.IntN(len(moves))
	}
	x.pos, _ = x.t.g.step(x.pos, m)
	return moves[m].name, nil
}
