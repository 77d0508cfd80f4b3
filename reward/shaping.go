package reward

import (
	"fmt"
	"math"

	"github.com/agentrl/agentrl/traj"
)

// OverlongPenalty is DAPO's soft overlong punishment (arXiv 2503.14476 eq. 13): with L_max the
// generation limit and L_cache the soft band before it,
//
//	R(y) = 0                                 |y| ≤ L_max − L_cache
//	R(y) = ((L_max − L_cache) − |y|)/L_cache  L_max − L_cache < |y| ≤ L_max
//	R(y) = −1                                |y| > L_max
//
// added to the task reward.
type OverlongPenalty struct {
	MaxLen int `yaml:"max_len"` // L_max
	Cache  int `yaml:"cache"`   // L_cache, 0 < Cache ≤ MaxLen
}

// Penalty returns R(y) for a response of n tokens.
func (o OverlongPenalty) Penalty(n int) (float64, error) {
	if o.Cache <= 0 || o.Cache > o.MaxLen || n < 0 {
		return 0, fmt.Errorf("reward: overlong: want 0 < cache ≤ max_len and n ≥ 0, have cache %d max_len %d n %d", o.Cache, o.MaxLen, n)
	}
	soft := o.MaxLen - o.Cache
	switch {
	case n <= soft:
		return 0, nil
	case n <= o.MaxLen:
		return float64(soft-n) / float64(o.Cache), nil
	}
	return -1, nil
}

// ResponseTokens counts the policy's tokens in a trajectory (its loss-masked tokens), the |y| of
// the overlong penalty for multi-turn episodes.
func ResponseTokens(t *traj.Trajectory) int {
	n := 0
	for _, m := range t.LossMask {
		if m {
			n++
		}
	}
	return n
}

// Progressive moves the reward's weight from dense step rewards to the sparse outcome over
// training, a curriculum in the spirit of progressive reward shaping (arXiv 2512.07478): early on
// the per-turn rewards (well-formed tool calls, useful steps) carry the signal, later the outcome
// does. The outcome weight is
//
//	w(step) = From + (1 − From)·ramp(step/Steps),  ramp linear or cosine, clamped to [0, 1]
//
// and a trajectory's rewards become (1 − w)·turn rewards and w·outcome.
type Progressive struct {
	From   float64 `yaml:"from"`   // outcome weight at step 0, in [0, 1]
	Steps  int     `yaml:"steps"`  // training steps over which the weight reaches 1, > 0
	Cosine bool    `yaml:"cosine"` // cosine ramp instead of linear
}

// Validate checks the schedule.
func (p Progressive) Validate() error {
	if !(p.From >= 0 && p.From <= 1) || p.Steps <= 0 {
		return fmt.Errorf("reward: progressive: want 0 ≤ from ≤ 1 and steps > 0, have %v and %d", p.From, p.Steps)
	}
	return nil
}

// OutcomeWeight is w(step).
func (p Progressive) OutcomeWeight(step int) float64 {
	x := math.Max(0, math.Min(1, float64(step)/float64(p.Steps)))
	if p.Cosine {
		x = (1 - math.Cos(math.Pi*x)) / 2
	}
	return p.From + (1-p.From)*x
}

// Apply rescales t's per-turn rewards by 1 − w and its outcome by w at training step step.
func (p Progressive) Apply(t *traj.Trajectory, step int) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if step < 0 {
		return fmt.Errorf("reward: progressive: step %d < 0", step)
	}
	w := p.OutcomeWeight(step)
	for i := range t.Turns {
		t.Turns[i].Reward *= 1 - w
	}
	t.Reward *= w
	return nil
}

// ToolProcess is a per-turn process reward for tool-using agents: each turn earns ValidCall per
// tool call that ran, InvalidCall per call that failed to parse or run (its ToolCall.Error is
// set), and StepCost once (a negative value discourages dithering).
type ToolProcess struct {
	ValidCall   float64 `yaml:"valid_call"`
	InvalidCall float64 `yaml:"invalid_call"`
	StepCost    float64 `yaml:"step_cost"`
}

// Turns returns the process reward of each turn of t.
func (p ToolProcess) Turns(t *traj.Trajectory) []float64 {
	out := make([]float64, len(t.Turns))
	for k, tu := range t.Turns {
		r := p.StepCost
		for _, c := range tu.ToolCalls {
			if c.Error != "" {
				r += p.InvalidCall
			} else {
				r += p.ValidCall
			}
		}
		out[k] = r
	}
	return out
}

// Apply adds the process rewards to t's per-turn rewards.
func (p ToolProcess) Apply(t *traj.Trajectory) {
	for k, r := range p.Turns(t) {
		t.Turns[k].Reward += r
	}
}
