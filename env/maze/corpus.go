package maze

import (
	"context"
	"math/rand/v2"

	"github.com/agentrl/agentrl/env"
)

// Corpus returns n samples of the text maze episodes hold, for training a tokenizer: the system
// prompt, then the observations and moves of episodes on train seeds 0, 1, 2, ... played by the
// expert at noise 0.3 (so bumps appear). It is the same on every call.
func Corpus(n int) []string { return corpusOf(DefaultConfig(), n) }

// corpusOf is Corpus of the mazes of cfg.
func corpusOf(cfg Config, n int) []string {
	if n <= 0 {
		return nil
	}
	out := []string{System}
	e := &mazeEnv{cfg: cfg}
	ctx := context.Background()
	for seed := int64(0); len(out) < n; seed++ {
		x := NewExpert(cfg, seed, 0.3, rand.New(rand.NewPCG(uint64(seed), 7)))
		ep, err := env.Play(ctx, e, x, seed, 64)
		if err != nil { // neither side fails on a background context; stop rather than loop
			return nil
		}
		out = append(out, ep.Start.Text)
		for _, st := range ep.Steps {
			out = append(out, st.Action, st.Transition.Observation)
		}
	}
	return out[:n]
}
