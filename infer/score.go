package infer

import (
	"context"
	"errors"
	"fmt"
	"math"
)

// ScoreRequest asks for the logprob of every token of Tokens from Start on, each under the
// tokens before it (a teacher's judgement of sampled tokens). Start ≥ 1: the first token has no
// context to be scored under.
type ScoreRequest struct {
	Tokens []int32 `json:"tokens"`
	Start  int     `json:"start"`
}

// Scorer returns the logprobs a ScoreRequest asks for: len(Tokens) − Start of them, in order.
type Scorer interface {
	Score(ctx context.Context, req ScoreRequest) ([]float32, error)
}

// ErrBadScores marks logprobs that must not be trained on: the wrong number of them, or values
// that are not logprobs (NaN, ±Inf, above 0).
var ErrBadScores = errors.New("infer: bad teacher logprobs")

// Validate refuses a request a scorer cannot answer.
func (r ScoreRequest) Validate() error {
	if r.Start < 1 || r.Start >= len(r.Tokens) {
		return fmt.Errorf("infer: score request: start %d must be in [1, %d) for %d tokens", r.Start, len(r.Tokens), len(r.Tokens))
	}
	for i, id := range r.Tokens {
		if id < 0 {
			return fmt.Errorf("infer: score request: token %d has id %d", i, id)
		}
	}
	return nil
}

// CheckScores refuses an answer to r that is not one finite logprob per scored token (a logprob
// above 1e-4 is not one: rounding aside, a probability is at most 1). The error wraps
// ErrBadScores.
func CheckScores(r ScoreRequest, lps []float32) error {
	if want := len(r.Tokens) - r.Start; len(lps) != want {
		return fmt.Errorf("%w: %d logprobs for %d scored tokens", ErrBadScores, len(lps), want)
	}
	for i, lp := range lps {
		if math.IsInf(float64(lp), 0) || !(lp <= 1e-4) {
			return fmt.Errorf("%w: token %d (position %d) has logprob %v", ErrBadScores, i, r.Start+i, lp)
		}
	}
	return nil
}
