package infer

import (
	"fmt"
	"math"
)

// Validate reports sampling settings that cannot be honoured.
func (s Sampling) Validate() error {
	switch {
	case math.IsNaN(float64(s.Temperature)) || s.Temperature < 0 || math.IsInf(float64(s.Temperature), 0):
		return fmt.Errorf("infer: temperature must be a finite number >= 0, got %v", s.Temperature)
	case s.TopK < 0:
		return fmt.Errorf("infer: top_k must be >= 0, got %d", s.TopK)
	case math.IsNaN(float64(s.TopP)) || s.TopP < 0 || s.TopP > 1:
		return fmt.Errorf("infer: top_p must be in [0, 1], got %v", s.TopP)
	}
	return nil
}

// Exact reports whether sampling draws from the model's full softmax at temperature 1, which is
// the distribution a learner recomputes. Anything else (temperature, top-k, top-p, greedy) makes
// the behaviour distribution differ from the learner's, and a training run must say so.
func (s Sampling) Exact() bool {
	return s.Temperature == 1 && s.TopK == 0 && (s.TopP == 0 || s.TopP == 1)
}
