package learn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/optim"
)

// Builtin is the in-process backend over the built-in model: it packs each call's sequences into
// rows of RowLen positions (first-fit decreasing, never splitting one), runs the model and steps
// AdamW over its flat parameters. A ForwardBackward on the very batch of the preceding Forward,
// with no OptimStep in between, reuses that Forward's activations instead of recomputing them
// (the batch is recognised by value, so a server that decodes each call afresh gets it too).
type Builtin struct {
	Model *model.Model
	Opt   *optim.AdamW
	// Ref is the frozen reference policy that ForwardOptions.Reference scores with; nil when the
	// phase has none.
	Ref *model.Model
	// RowLen is the packed row length; every sequence must fit in one row.
	RowLen int
	// Save, when set, writes the weights and optimizer state for SaveState (the checkpoint
	// package's folder format; learn does not write files itself). Load reads them back.
	Save func(dir string, m *model.Model, opt *optim.AdamW) error
	Load func(dir string, m *model.Model, opt *optim.AdamW) error

	lp, ent, val    []float32 // per position, from the last forward
	dlp, dent, dval []float32
	last            *Seqs   // the batch of the last forward of Model (not Ref)
	lastPacked      *Packed // its packing, whose activations Model still holds
	lastValues      bool    // whether that forward computed values
}

// forward packs s and runs m forward into b.lp, b.ent (and b.val with values).
func (b *Builtin) forward(m *model.Model, s *Seqs, values bool) (*Packed, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	n := s.NumSeqs()
	seqs := make([][]int32, n)
	want := make([][]bool, n)
	for i := range n {
		lo, hi := s.Offsets[i], s.Offsets[i+1]
		seqs[i], want[i] = s.Tokens[lo:hi], s.Mask[lo:hi]
	}
	p, err := Pack(seqs, want, b.RowLen)
	if err != nil {
		return nil, err
	}
	np := p.Batch.Rows * p.Batch.T
	b.lp, b.ent = grow(b.lp, np), grow(b.ent, np)
	if values {
		b.val = grow(b.val, np)
		err = m.ForwardValues(&p.Batch, b.lp, b.ent, b.val)
	} else {
		err = m.Forward(&p.Batch, b.lp, b.ent)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Forward implements Backend.
func (b *Builtin) Forward(_ context.Context, s *Seqs, o ForwardOptions, out *Outputs) error {
	m := b.Model
	if o.Reference {
		if b.Ref == nil {
			return errors.New("learn: reference logprobs asked of a learner without a reference policy")
		}
		m = b.Ref
	}
	if o.Values && !m.HasValueHead() {
		return errors.New("learn: values asked of a model without a value head")
	}
	if err := checkOutputs(s, o, out); err != nil {
		return err
	}
	p, err := b.forward(m, s, o.Values)
	if err != nil {
		return err
	}
	if o.Reference {
		b.last = nil
	} else {
		b.last, b.lastPacked, b.lastValues = s, p, o.Values
	}
	for i := range s.NumSeqs() {
		lo, hi := s.Offsets[i], s.Offsets[i+1]
		gather(p, i, out.Logprobs[lo:hi], b.lp)
		if o.Entropies {
			gather(p, i, out.Entropies[lo:hi], b.ent)
		}
		if o.Values {
			gather(p, i, out.Values[lo:hi], b.val)
		}
	}
	return nil
}

// checkOutputs checks that out has room for what o asks.
func checkOutputs(s *Seqs, o ForwardOptions, out *Outputs) error {
	n := len(s.Tokens)
	for _, x := range []struct {
		name string
		v    []float32
		want bool
	}{{"logprobs", out.Logprobs, true}, {"entropies", out.Entropies, o.Entropies}, {"values", out.Values, o.Values}} {
		if x.want && len(x.v) != n {
			return fmt.Errorf("learn: Forward needs room for %d %s, got %d", n, x.name, len(x.v))
		}
	}
	return nil
}

// ForwardBackward implements Backend.
func (b *Builtin) ForwardBackward(_ context.Context, s *Seqs, c Coefficients) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := c.check(s); err != nil {
		return err
	}
	values := c.DValues != nil
	if values && !b.Model.HasValueHead() {
		return errors.New("learn: a value gradient for a model without a value head")
	}
	p := b.lastPacked
	if !b.sameAsLast(s) || (values && !b.lastValues) {
		var err error
		if p, err = b.forward(b.Model, s, values); err != nil {
			return err
		}
	}
	b.last, b.lastPacked = nil, nil // Backward consumes the activations
	np := p.Batch.Rows * p.Batch.T
	b.dlp, b.dent = grow(b.dlp, np), grow(b.dent, np)
	clear(b.dlp)
	clear(b.dent)
	if values {
		b.dval = grow(b.dval, np)
		clear(b.dval)
	}
	for i := range s.NumSeqs() {
		lo, hi := s.Offsets[i], s.Offsets[i+1]
		p.Scatter(b.dlp, i, c.DLogprobs[lo:hi])
		if c.DEntropies != nil {
			p.Scatter(b.dent, i, c.DEntropies[lo:hi])
		}
		if values {
			p.Scatter(b.dval, i, c.DValues[lo:hi])
		}
	}
	if values {
		return b.Model.BackwardValues(&p.Batch, b.dlp, b.dent, b.dval)
	}
	return b.Model.Backward(&p.Batch, b.dlp, b.dent)
}

// sameAsLast reports whether s is the batch of the last forward of Model (the same value,
// as a server decodes it afresh for each call, or the same pointer).
func (b *Builtin) sameAsLast(s *Seqs) bool {
	l := b.last
	if l == nil || l == s {
		return l != nil
	}
	return slices.Equal(l.Tokens, s.Tokens) && slices.Equal(l.Offsets, s.Offsets) && slices.Equal(l.Mask, s.Mask)
}

// OptimStep implements Backend: clip, AdamW at o.LR, clear the gradient.
func (b *Builtin) OptimStep(_ context.Context, o OptimStep) (Update, error) {
	b.last, b.lastPacked = nil, nil
	params, g, _ := b.Model.Trainable() // the adapters alone when the model has them
	var norm float32
	if o.GradClip > 0 {
		norm = optim.ClipGradNorm(g, o.GradClip)
	} else {
		norm = optim.GradNorm(g)
	}
	if math.IsNaN(float64(norm)) || math.IsInf(float64(norm), 0) {
		b.Model.ZeroGrad()
		return Update{GradNorm: float64(norm)}, ErrNonFinite
	}
	lr := o.LR
	if err := b.Opt.Step(params, g, lr); err != nil {
		return Update{}, err
	}
	b.Model.ZeroGrad()
	if err := checkWeights(b.Model); err != nil {
		return Update{GradNorm: float64(norm), LR: float64(lr)}, fmt.Errorf("%w at learning rate %g (gradient norm %g): %v; lower the learning rate or resume from an earlier checkpoint", ErrBrokenWeights, lr, norm, err)
	}
	return Update{GradNorm: float64(norm), LR: float64(lr)}, nil
}

// OptimizerSteps is the number of AdamW updates applied so far.
func (b *Builtin) OptimizerSteps() int64 { return b.Opt.Steps() }

// SaveForSampler implements Backend: the in-process engine reads the model itself, so the
// artifact names no folder.
func (b *Builtin) SaveForSampler(_ context.Context, version int32) (Artifact, error) {
	return Artifact{Version: version}, nil
}

// SaveState implements Backend through b.Save.
func (b *Builtin) SaveState(_ context.Context, dir string) error {
	if b.Save == nil {
		return errors.New("learn: the built-in learner was given no way to save its state (Builtin.Save)")
	}
	return b.Save(dir, b.Model, b.Opt)
}

// LoadState implements Backend through b.Load.
func (b *Builtin) LoadState(_ context.Context, dir string) error {
	if b.Load == nil {
		return errors.New("learn: the built-in learner was given no way to load its state (Builtin.Load)")
	}
	b.last, b.lastPacked = nil, nil
	return b.Load(dir, b.Model, b.Opt)
}
