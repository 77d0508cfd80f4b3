package local

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/model"
)

// Scorer is an infer.Scorer over the built-in model in-process: one full forward pass per
// request, in float32 (the logprobs are the model's own, as its learner computes them). It holds
// its weights (Set replaces them) and is safe for concurrent use; requests run one at a time.
type Scorer struct {
	mu      sync.Mutex
	m       *model.Model
	version int32
	lp, ent []float32
}

// NewScorer scores with m, which the scorer keeps: the caller must not change it afterwards.
func NewScorer(m *model.Model, version int32) (*Scorer, error) {
	if m == nil {
		return nil, errors.New("infer: NewScorer needs a model")
	}
	return &Scorer{m: m, version: version}, nil
}

// Set replaces the weights with m (kept, as NewScorer keeps them), as version.
func (s *Scorer) Set(m *model.Model, version int32) error {
	if m == nil {
		return errors.New("infer: Scorer.Set needs a model")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.Cfg != s.m.Cfg {
		return errors.New("infer: Scorer.Set needs a model of the scorer's config")
	}
	s.m, s.version = m, version
	return nil
}

// Version is the policy version of the weights scored with.
func (s *Scorer) Version() int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// MaxLen is the longest sequence the scorer takes (the model's max_seq).
func (s *Scorer) MaxLen() int { return s.m.Cfg.MaxSeq }

// Score implements infer.Scorer.
func (s *Scorer) Score(ctx context.Context, req infer.ScoreRequest) ([]float32, error) {
	lps, _, err := s.ScoreVersion(ctx, req)
	return lps, err
}

// ScoreVersion is Score that also returns the policy version of the weights that scored.
func (s *Scorer) ScoreVersion(ctx context.Context, req infer.ScoreRequest) ([]float32, int32, error) {
	if err := req.Validate(); err != nil {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil { // given up while waiting its turn
		return nil, 0, err
	}
	lps, err := s.score(req)
	return lps, s.version, err
}

func (s *Scorer) score(req infer.ScoreRequest) ([]float32, error) {
	n := len(req.Tokens)
	if n > s.m.Cfg.MaxSeq {
		return nil, fmt.Errorf("infer: score request of %d tokens exceeds the model's max_seq %d", n, s.m.Cfg.MaxSeq)
	}
	for i, id := range req.Tokens {
		if int(id) >= s.m.Cfg.Vocab {
			return nil, fmt.Errorf("infer: score request: token %d has id %d, outside the vocabulary of %d", i, id, s.m.Cfg.Vocab)
		}
	}
	b := model.Batch{Rows: 1, T: n, Tokens: req.Tokens, Targets: make([]int32, n), Pos: make([]int32, n), Seg: make([]int32, n)}
	for t := range n {
		b.Pos[t] = int32(t)
		b.Targets[t] = -1
		if t+1 < n && t+1 >= req.Start {
			b.Targets[t] = req.Tokens[t+1]
		}
	}
	s.lp, s.ent = grow(s.lp, n), grow(s.ent, n)
	if err := s.m.Forward(&b, s.lp, s.ent); err != nil {
		return nil, fmt.Errorf("infer: score: %w", err)
	}
	out := make([]float32, n-req.Start)
	copy(out, s.lp[req.Start-1:n-1])
	if err := infer.CheckScores(req, out); err != nil {
		return nil, fmt.Errorf("%w (policy version %d)", err, s.version)
	}
	return out, nil
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}
