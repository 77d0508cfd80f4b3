package optim

import (
	"errors"
	"fmt"
	"math"

	"github.com/agentrl/agentrl/model/kernels"
)

// Config holds AdamW's hyperparameters; the learning rate comes per step from a Schedule. The
// YAML names are those of a phase's `optim` block.
type Config struct {
	Beta1       float32 `yaml:"beta1"`
	Beta2       float32 `yaml:"beta2"`
	Eps         float32 `yaml:"eps"`
	WeightDecay float32 `yaml:"weight_decay"`
}

// DefaultConfig is the common setting for small transformers (β2 = 0.95 as in GPT-3 and Llama).
func DefaultConfig() Config {
	return Config{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
}

// Validate reports a setting outside the range where AdamW is defined.
func (c Config) Validate() error {
	switch {
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return fmt.Errorf("beta1 must be in [0, 1), got %v", c.Beta1)
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		return fmt.Errorf("beta2 must be in [0, 1), got %v", c.Beta2)
	case !(c.Eps > 0):
		return fmt.Errorf("eps must be positive, got %v", c.Eps)
	case !(c.WeightDecay >= 0) || math.IsInf(float64(c.WeightDecay), 0):
		return fmt.Errorf("weight_decay must be finite and non-negative, got %v", c.WeightDecay)
	}
	return nil
}

// Segment is a contiguous range [Off, Off+Len) of the parameter slice and whether it takes
// weight decay.
type Segment struct {
	Off, Len int
	Decay    bool
}

// AdamW is the optimizer of Loshchilov & Hutter 2019 over one flat parameter slice.
type AdamW struct {
	cfg  Config
	segs []Segment
	m, v []float32 // first and second moments, same length as the parameters
	step int64     // number of updates applied
}

// NewAdamW returns an optimizer for n parameters. segs must tile [0, n) in order; nil means one
// segment with weight decay.
func NewAdamW(cfg Config, n int, segs []Segment) (*AdamW, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("optim: need a positive parameter count, got %d", n)
	}
	if segs == nil {
		segs = []Segment{{Off: 0, Len: n, Decay: true}}
	}
	next := 0
	for i, s := range segs {
		if s.Off != next || s.Len <= 0 {
			return nil, fmt.Errorf("optim: segment %d [%d,+%d) does not continue at %d", i, s.Off, s.Len, next)
		}
		next += s.Len
	}
	if next != n {
		return nil, fmt.Errorf("optim: segments cover %d of %d parameters", next, n)
	}
	return &AdamW{cfg: cfg, segs: append([]Segment(nil), segs...), m: make([]float32, n), v: make([]float32, n)}, nil
}

// Steps is the number of updates applied so far.
func (o *AdamW) Steps() int64 { return o.step }

// Step applies one update with learning rate lr. The slices must have the optimizer's length.
func (o *AdamW) Step(params, grads []float32, lr float32) error {
	if len(params) != len(o.m) || len(grads) != len(o.m) {
		return fmt.Errorf("optim: AdamW built for %d parameters got %d params and %d grads", len(o.m), len(params), len(grads))
	}
	if !(lr >= 0) || math.IsInf(float64(lr), 0) {
		return fmt.Errorf("optim: learning rate must be finite and non-negative, got %v", lr)
	}
	o.step++
	bc1 := float32(1 - math.Pow(float64(o.cfg.Beta1), float64(o.step)))
	bc2 := float32(1 - math.Pow(float64(o.cfg.Beta2), float64(o.step)))
	// The update is elementwise, so neither the chunks nor which goroutine runs them change a
	// result. The chunks cut the whole parameter slice, not each segment: a small model's
	// segments (one per weight, most below a chunk) would otherwise all run on one goroutine.
	n := len(params)
	chunks := min(4*kernels.Workers(), n/minChunk)
	if chunks <= 1 {
		o.update(params, grads, 0, n, lr, bc1, bc2)
		return nil
	}
	kernels.FanOut(chunks, func(c int) { o.update(params, grads, n*c/chunks, n*(c+1)/chunks, lr, bc1, bc2) })
	return nil
}

// minChunk is the fewest parameters a part of Step updates: below it waking a helper costs
// more than the update. 128 Ki parameters are about 0.1 ms on the 2-vCPU Xeon's AVX-512
// kernel, where a helper parked since the last region (the clip's norm is one serial pass)
// took tens of microseconds to come: split four ways, the calc model's 0.13 M parameters
// took longer on two threads than on one.
const minChunk = 1 << 17

// update applies the step to parameters [lo, hi), segment by segment.
func (o *AdamW) update(params, grads []float32, lo, hi int, lr, bc1, bc2 float32) {
	for _, s := range o.segs {
		a, b := max(lo, s.Off), min(hi, s.Off+s.Len)
		if a >= b {
			continue
		}
		wd := float32(0)
		if s.Decay {
			wd = o.cfg.WeightDecay
		}
		kernels.AdamW(params[a:b], grads[a:b], o.m[a:b], o.v[a:b], lr, o.cfg.Beta1, o.cfg.Beta2, o.cfg.Eps, wd, bc1, bc2)
	}
}

// State is what a checkpoint needs to resume AdamW exactly.
type State struct {
	Step int64
	M, V []float32
}

// State returns a copy of the optimizer state.
func (o *AdamW) State() State {
	return State{Step: o.step, M: append([]float32(nil), o.m...), V: append([]float32(nil), o.v...)}
}

// LoadState restores a state taken from an optimizer of the same size.
func (o *AdamW) LoadState(s State) error {
	if len(s.M) != len(o.m) || len(s.V) != len(o.v) {
		return fmt.Errorf("optim: state for %d/%d parameters does not fit %d", len(s.M), len(s.V), len(o.m))
	}
	if s.Step < 0 {
		return errors.New("optim: negative step count in state")
	}
	o.step = s.Step
	copy(o.m, s.M)
	copy(o.v, s.V)
	return nil
}
