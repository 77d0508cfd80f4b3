package local

import (
	"context"
	"math"

	"github.com/agentrl/agentrl/infer"
)

// Step is one sampled token as GenerateStream reports it.
type Step struct {
	Token   int32
	Logprob float32 // under the distribution actually sampled from, as in the Completion
	Version int32   // policy version of the weights that produced it
	// Logits are the raw logits the token was drawn from. They are valid only during the
	// callback (the engine reuses the buffer) and must not be modified.
	Logits []float32
}

// GenerateStream is Generate that also calls onStep with every token as it is sampled, in order,
// before the completion is returned. onStep runs on the engine's decode path, possibly in
// parallel with other requests' callbacks (never with its own): it must be quick and must not
// block (hand the step to a buffered channel with room for MaxTokens steps, say). Cancelling ctx
// ends the request at the next decode step and frees its slot; the completion is then lost
// (ctx's error is returned) but every token sampled was reported to onStep.
func (e *Engine) GenerateStream(ctx context.Context, req infer.Request, onStep func(Step)) (infer.Completion, error) {
	return e.generate(ctx, req, onStep)
}

// TokenLogprob is one candidate token and its logprob.
type TokenLogprob struct {
	Token   int32
	Logprob float32
}

// TopLogprobs returns the n most likely tokens of the distribution that sampling s draws from
// logits (after temperature, top-k and top-p renormalization), most likely first, ties by token
// id; fewer than n when fewer tokens can be drawn. Each logprob is computed exactly as the
// sampler computes the logprob of a drawn token, so a sampled token that appears here has the
// logprob the completion reports. Greedy decoding is a point mass: the one token with logprob 0.
// It costs a sort of the vocabulary; logits must be finite.
func TopLogprobs(logits []float32, s infer.Sampling, n int) []TokenLogprob {
	if n <= 0 || len(logits) == 0 {
		return nil
	}
	if s.Temperature == 0 {
		best := 0
		for i, l := range logits {
			if l > logits[best] {
				best = i
			}
		}
		return []TokenLogprob{{Token: int32(best)}}
	}
	v := len(logits)
	p := make([]float64, v)
	sum := tempered(p, logits, s.Temperature)
	idx := byProbability(make([]int, v), p)
	// The same kept set and normalizer as sampler.sample.
	norm, keep := sum, v
	if filters(s, v) {
		keep, norm = nucleus(p, idx, sum, s)
	}
	out := make([]TokenLogprob, 0, min(n, keep))
	for _, i := range idx[:min(n, keep)] {
		if p[i] == 0 {
			break // underflowed: never drawn
		}
		out = append(out, TokenLogprob{Token: int32(i), Logprob: float32(math.Log(p[i] / norm))})
	}
	return out
}
