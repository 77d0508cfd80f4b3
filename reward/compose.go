package reward

import (
	"context"
	"fmt"
	"math"
)

// Part is one weighted component of a composed reward.
type Part struct {
	Name   string
	Weight float64
	Scorer Scorer
}

// Weighted is Σ_k Weight_k · score_k, e.g. 1.0·correctness + 0.1·format.
type Weighted struct {
	Parts []Part
}

// NewWeighted checks names (non-empty, unique), weights (finite) and scorers (non-nil).
func NewWeighted(parts ...Part) (Weighted, error) {
	seen := map[string]bool{}
	for i, p := range parts {
		switch {
		case p.Name == "" || seen[p.Name]:
			return Weighted{}, fmt.Errorf("reward: part %d: name %q is empty or repeated", i, p.Name)
		case math.IsNaN(p.Weight) || math.IsInf(p.Weight, 0):
			return Weighted{}, fmt.Errorf("reward: part %q: weight %v", p.Name, p.Weight)
		case p.Scorer == nil:
			return Weighted{}, fmt.Errorf("reward: part %q: no scorer", p.Name)
		}
		seen[p.Name] = true
	}
	return Weighted{Parts: parts}, nil
}

// Score implements Scorer.
func (w Weighted) Score(ctx context.Context, s Sample) (float64, error) {
	total, _, err := w.Breakdown(ctx, s)
	return total, err
}

// Breakdown returns the total and each part's unweighted score (for metrics such as
// "reward/format"). The first failing part's error is returned, naming it.
func (w Weighted) Breakdown(ctx context.Context, s Sample) (float64, map[string]float64, error) {
	parts := make(map[string]float64, len(w.Parts))
	total := 0.0
	for _, p := range w.Parts {
		v, err := p.Scorer.Score(ctx, s)
		if err != nil {
			return 0, nil, fmt.Errorf("reward: part %q: %w", p.Name, err)
		}
		parts[p.Name] = v
		total += p.Weight * v
	}
	return total, parts, nil
}
