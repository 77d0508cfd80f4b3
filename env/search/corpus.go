package search

import (
	"context"
	"math/rand/v2"

	"github.com/agentrl/agentrl/env"
)

// Corpus returns n samples of the text search episodes hold, for training a tokenizer: the system
// prompt with the tool description, then the question, actions and observations of episodes on
// train seeds 0, 1, 2, ... played by the expert at noise 0.2 (so wrong answers appear). It is the
// same on every call; nil when the knowledge base cannot be built.
func Corpus(n int) []string { return corpusAt(0, n) }

// corpusAt is Corpus of the questions of level (0: the default mix).
func corpusAt(level, n int) []string {
	if n <= 0 {
		return nil
	}
	cfg := DefaultConfig()
	cfg.Level = level
	e, err := New(cfg)
	if err != nil {
		return nil
	}
	ctx := context.Background()
	var out []string
	for seed := int64(0); len(out) < n; seed++ {
		ep, err := env.Play(ctx, e, NewExpertAt(level, seed, 0.2, rand.New(rand.NewPCG(uint64(seed), 7))), seed, 16)
		if err != nil {
			return nil
		}
		if seed == 0 {
			out = append(out, ep.Start.System)
		}
		out = append(out, ep.Start.Text)
		for _, st := range ep.Steps {
			out = append(out, st.Action, st.Transition.Observation)
		}
	}
	return out[:n]
}
