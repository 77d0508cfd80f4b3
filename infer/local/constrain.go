package local

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/agentrl/agentrl/infer"
)

// Constraint restricts which tokens a generation may sample: constrained decoding, by a grammar
// or a schema over the completion's text. Before each draw the engine asks Allow for the tokens
// that may come next and sets every other logit to −∞; the token is then drawn from that masked
// distribution (after temperature, top-k and top-p, as any other), so the logprob the completion
// records is the logprob under the distribution actually sampled from. Advance takes the token
// drawn. Both are called on the engine's decode path, one call at a time per generation: they
// must be quick.
type Constraint interface {
	// Allow sets allowed[i] for every token i that may come next. allowed has the vocabulary's
	// length and is all false on entry. Allowing no token is an error.
	Allow(allowed []bool) error
	// Advance takes the token drawn.
	Advance(tok int32) error
}

// ErrNoToken is returned (wrapped) when a constraint allows no token.
var ErrNoToken = errors.New("the constraint allows no token")

// GenerateConstrained is GenerateStream whose tokens follow con (nil: none). The Step's Logits
// are the masked logits (−∞ outside the allowed tokens), so TopLogprobs of a step describes the
// distribution sampled from. A generation without a constraint runs the same code as Generate.
func (e *Engine) GenerateConstrained(ctx context.Context, req infer.Request, con Constraint, onStep func(Step)) (infer.Completion, error) {
	return e.generateJob(ctx, req, onStep, con)
}

// constrain returns row masked by j's constraint and the sampling to draw with: top-k is capped
// at the number of tokens allowed, so that a draw cut short by rounding can never fall on a
// token outside the mask (which has probability zero and so changes nothing else).
func (j *job) constrain(row []float32) ([]float32, infer.Sampling, error) {
	s := j.req.Sampling
	n := len(row)
	if cap(j.allowed) < n {
		j.allowed = make([]bool, n)
		j.masked = make([]float32, n)
	}
	allowed, masked := j.allowed[:n], j.masked[:n]
	clear(allowed)
	if err := j.con.Allow(allowed); err != nil {
		return nil, s, fmt.Errorf("infer: constraint: %w", err)
	}
	count := 0
	inf := float32(math.Inf(-1))
	for i, ok := range allowed {
		if ok {
			masked[i] = row[i]
			count++
		} else {
			masked[i] = inf
		}
	}
	if count == 0 {
		return nil, s, fmt.Errorf("infer: constraint: %w after %d tokens", ErrNoToken, len(j.out.Tokens))
	}
	if filters(s, n) && (s.TopK == 0 || s.TopK > count) {
		s.TopK = count
	}
	return masked, s, nil
}
