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

// ScheduleConfig is a phase's learning rate as configured: linear warmup to LR over Warmup steps,
// then cosine decay to LR·MinLRRatio at the phase's last step (MinLRRatio 1: constant).
type ScheduleConfig struct {
	LR         float64 `yaml:"lr"`
	MinLRRatio float64 `yaml:"min_lr_ratio"`
	Warmup     int     `yaml:"warmup"`
}

// Validate reports a setting that cannot describe a schedule, by its YAML name.
func (c ScheduleConfig) Validate() error {
	switch {
	case !(c.LR > 0) || math.IsInf(c.LR, 0) || float32(c.LR) == 0 || math.IsInf(float64(float32(c.LR)), 0):
		return fmt.Errorf("lr must be a positive finite number (in float32), got %v", c.LR)
	case !(c.MinLRRatio >= 0 && c.MinLRRatio <= 1):
		return fmt.Errorf("min_lr_ratio must be in [0, 1], got %v", c.MinLRRatio)
	case c.Warmup < 0:
		return fmt.Errorf("warmup must be >= 0, got %d", c.Warmup)
	}
	return nil
}

// Schedule is the schedule of a phase of steps steps. Warmup longer than the phase is an error.
func (c ScheduleConfig) Schedule(steps int) (Schedule, error) {
	if err := c.Validate(); err != nil {
		return Schedule{}, err
	}
	if c.Warmup > steps {
		return Schedule{}, fmt.Errorf("warmup (%d) must not exceed the phase's steps (%d)", c.Warmup, steps)
	}
	s := Schedule{PeakLR: float32(c.LR), MinLR: float32(c.LR * c.MinLRRatio), WarmupSteps: c.Warmup, TotalSteps: steps}
	return s, s.Validate()
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
