package optim

import (
	"fmt"
	"math"
)

// Schedule is linear warmup from 0 to PeakLR over WarmupSteps, then cosine decay to MinLR at
// TotalSteps (Loshchilov & Hutter 2017, without restarts); after TotalSteps it stays at MinLR.
type Schedule struct {
	PeakLR, MinLR           float32
	WarmupSteps, TotalSteps int
}

// Validate reports an inconsistent schedule.
func (s Schedule) Validate() error {
	switch {
	case !(s.PeakLR > 0) || math.IsInf(float64(s.PeakLR), 0):
		return fmt.Errorf("optim: PeakLR must be positive and finite, got %v", s.PeakLR)
	case !(s.MinLR >= 0) || s.MinLR > s.PeakLR:
		return fmt.Errorf("optim: MinLR must be in [0, PeakLR], got %v", s.MinLR)
	case s.WarmupSteps < 0 || s.TotalSteps <= 0 || s.WarmupSteps > s.TotalSteps:
		return fmt.Errorf("optim: need 0 ≤ WarmupSteps (%d) ≤ TotalSteps (%d), TotalSteps > 0", s.WarmupSteps, s.TotalSteps)
	}
	return nil
}

// LR is the learning rate for update number step, counted from 0. Warmup reaches PeakLR at
// step WarmupSteps-1 rather than starting at 0, so the first update already moves the weights.
func (s Schedule) LR(step int) float32 {
	if step < s.WarmupSteps {
		return s.PeakLR * float32(step+1) / float32(s.WarmupSteps)
	}
	if step >= s.TotalSteps {
		return s.MinLR
	}
	span := s.TotalSteps - s.WarmupSteps
	progress := float64(step-s.WarmupSteps) / float64(span)
	cos := 0.5 * (1 + math.Cos(math.Pi*progress))
	return s.MinLR + float32(cos*float64(s.PeakLR-s.MinLR))
}
