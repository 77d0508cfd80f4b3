package config

import (
	"fmt"

	"github.com/agentrl/agentrl/model"
)

// rollout.precision (model.DecodePrecision) is the number formats the in-process engine samples
// RL episodes in:
//
//	rollout:
//	  precision:
//	    weights: bf16   # f32 (the default) or bf16
//	    kv_cache: bf16  # f32 (the default) or bf16
//
// Absent, or f32 throughout, sampling computes exactly what the learner recomputes, and the
// behaviour logprobs equal the learner's. weights: bf16 decodes with a copy of the projection
// weights and the LM head rounded to bfloat16; kv_cache: bf16 stores the keys and values rounded
// to bfloat16 (activations, norms, softmax and every sum stay float32). Either halves the bytes
// a decode step streams for that part, but the episodes are then sampled by a slightly different
// policy than the learner's float32 one: the run says so when it starts, every RL phase must
// correct for it with an importance correction against the behaviour logprobs
// (rl.loss.correction), and every step measures the gap (shift/behaviour_kl and the importance
// weights' shift/is_mean, is_std, is_max, is_ess). The learner, the reference policy, supervised
// phases and held-out evaluation stay float32.

// SamplingPrecision is the precision the in-process engine samples RL episodes in.
func (c *Config) SamplingPrecision() model.DecodePrecision {
	if p := c.Rollout.Precision; p != nil {
		if n, err := p.Normalize(); err == nil {
			return n
		}
	}
	return model.DecodePrecision{Weights: model.F32, KVCache: model.F32}
}

// validatePrecision checks rollout.precision against the run: a precision other than f32
// applies to the in-process engine's RL sampling only, and its mismatch must be corrected in
// every RL phase.
func (c *Config) validatePrecision() []error {
	p := c.Rollout.Precision
	if p == nil {
		return nil
	}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	for _, f := range []struct {
		key string
		p   model.Precision
	}{{"weights", p.Weights}, {"kv_cache", p.KVCache}} {
		if _, err := model.ParsePrecision(string(f.p)); err != nil {
			bad("rollout.precision.%s %q must be %q (the default) or %q", f.key, f.p, model.F32, model.BF16)
		}
	}
	if len(errs) > 0 || p.Exact() {
		return errs
	}
	what := fmt.Sprintf("rollout.precision (%s) samples RL episodes in bfloat16", c.SamplingPrecision())
	if c.Rollout.Generator != nil {
		bad("%s in the in-process engine; with rollout.generator the inference servers sample and decide their own precision", what)
	}
	rl := 0
	for i, ph := range c.Phases {
		if !ph.IsRL() || ph.RL == nil {
			continue
		}
		rl++
		if a := ph.RL.Async; a != nil && a.Workers != nil {
			bad("%s in the in-process engine; phases[%d] (%s) samples on rollout workers (rl.async.workers), whose engines decode in f32", what, i, ph.Name)
		}
		if ph.RL.Loss.Correction.Level == "" {
			bad("%s, another policy than the learner's float32 one: phases[%d] (%s) must correct for it with an importance correction against the behaviour logprobs (rl.loss.correction.level: token or sequence, e.g. with cap: 2)", what, i, ph.Name)
		}
	}
	if rl == 0 {
		bad("%s, and does nothing without an rl phase (supervised phases and evaluation decode in f32)", what)
	}
	return errs
}

// DescribePrecision is the line a run prints when it starts sampling in a precision other than
// the learner's ("" when it does not).
func (c *Config) DescribePrecision() string {
	p := c.SamplingPrecision()
	if p.Exact() {
		return ""
	}
	d := fmt.Sprintf("rollout: RL episodes are sampled in bfloat16 (%s; the learner trains float32): the behaviour logprobs come from another policy than the one the learner recomputes;", p)
	for _, ph := range c.Phases {
		if ph.IsRL() && ph.RL != nil {
			cc := ph.RL.Loss.Correction
			d += fmt.Sprintf(" phase %s corrects with importance weights at %s level (cap %g, mask [%g, %g], reject_kl %g);", ph.Name, cc.Level, cc.Cap, cc.MaskLow, cc.MaskHigh, cc.RejectKL)
		}
	}
	return d + " shift/behaviour_kl and shift/is_* measure the gap every step; evaluation decodes in f32"
}
