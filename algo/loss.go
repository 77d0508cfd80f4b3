package algo

import (
	"fmt"
	"math"
)

// Current is what the model computed for a minibatch under the weights being trained, aligned with
// the minibatch's tokens. Only the masked tokens' entries are read.
type Current struct {
	Logprobs  []float32 // logπ_θ of every token; required
	Entropies []float32 // per-token entropy of π_θ; required when EntropyCoef > 0, optional otherwise (metric only)
	Values    []float32 // V_θ per token; required when Critic.Coef > 0
	// PolicyVersion is the version of the weights being trained; with Batch.Versions it gives the
	// per-token version lag metrics.
	PolicyVersion int32
}

// Output receives the result of Loss.Compute. Its slices are reused across calls when their
// capacity suffices, so one Output per learner goroutine avoids per-minibatch allocation.
type Output struct {
	Loss       float64
	DLogprobs  []float32 // d(loss)/d(logπ_θ) per token
	DEntropies []float32 // d(loss)/d(entropy) per token; nil when no entropies were given
	DValues    []float32 // d(loss)/d(V_θ) per token; nil without a critic term
	Metrics    Metrics

	grad, w, raw, coef []float64
	include            []bool
}

// Loss computes the scalar training loss of a minibatch and its gradients. It holds only its
// config, so one Loss may be shared by goroutines that each use their own Output.
type Loss struct {
	cfg     LossConfig
	policy  PolicyLoss
	kl      KLEstimator
	distill *distillTerm // nil: no distillation term (WithDistill)
}

// NewLoss builds a loss with a built-in policy loss.
func NewLoss(c LossConfig) (*Loss, error) { return NewLossFrom(PolicyLosses(), c) }

// NewLossFrom builds a loss whose policy loss comes from reg (for user-registered losses).
func NewLossFrom(reg *PolicyRegistry, c LossConfig) (*Loss, error) {
	if err := c.validateTerms(); err != nil {
		return nil, err
	}
	p, err := reg.New(c)
	if err != nil {
		return nil, err
	}
	l := &Loss{cfg: c, policy: p}
	if c.KL.Coef > 0 {
		l.kl, _ = ParseKL(c.KL.Estimator)
	}
	return l, nil
}

// Config returns the loss's config.
func (l *Loss) Config() LossConfig { return l.cfg }

// Compute fills out with the loss of minibatch mb (advantages already estimated) given the model's
// outputs cur. Infra-failed sequences, and sequences rejected by the correction, contribute to no
// term and no denominator. A minibatch with no masked token gives loss 0 and zero gradients.
func (l *Loss) Compute(out *Output, mb *Batch, cur Current) error {
	if err := l.check(mb, cur); err != nil {
		return err
	}
	n, s := mb.NumTokens(), mb.NumSeqs()
	out.Loss = 0
	out.Metrics = Metrics{}
	out.grad, out.coef = resize(out.grad, n), resize(out.coef, s)
	out.include = resize(out.include, s)
	out.DLogprobs = resize(out.DLogprobs, n)
	out.DEntropies = sizedOrNil(out.DEntropies, cur.Entropies != nil, n)
	out.DValues = sizedOrNil(out.DValues, l.cfg.Critic.Coef > 0, n)

	failed := 0
	for i := range out.include {
		out.include[i] = !mb.failed(i)
		failed += b2i(!out.include[i])
	}
	old := mb.Old
	if old == nil {
		old = mb.Behaviour
	}
	m := out.Metrics
	m["loss/failed_seqs"] = float64(failed)
	if mb.Old != nil {
		m["is/rejected_seqs"] = float64(l.cfg.Correction.reject(mb, out.include))
		if l.cfg.Correction.Level != "" {
			out.w = resize(out.w, n)
		}
		out.raw = l.cfg.Correction.weights(out.w, out.raw[:0], mb, out.include, m)
	}
	tokens, seqs := aggregate(out.coef, mb, out.include, l.cfg.Agg, l.cfg.AggNorm, l.cfg.AggSamples)
	m["loss/tokens"], m["loss/seqs"] = float64(tokens), float64(seqs)

	var st PolicyStats
	pg := 0.0
	for i := 0; i < s; i++ {
		if out.coef[i] == 0 {
			continue
		}
		lo, hi := mb.Seq(i)
		in := SeqInput{Mask: mb.Mask[lo:hi], Logp: cur.Logprobs[lo:hi], Old: old[lo:hi], Adv: mb.Advantages[lo:hi], Coef: out.coef[i]}
		if l.cfg.Correction.Level != "" {
			in.Weight = out.w[lo:hi]
		}
		pg += l.policy.Sequence(in, out.grad[lo:hi], &st)
	}
	m["loss/pg"] = pg
	policyMetrics(&st, m)
	out.Loss = pg
	out.Loss += l.klTerm(out, mb, cur, m)
	out.Loss += l.distillTerm(out, mb, cur, m) // distill.go
	out.Loss += l.entropyTerm(out, mb, cur, m)
	out.Loss += l.criticTerm(out, mb, cur, m)
	for t, g := range out.grad {
		out.DLogprobs[t] = float32(g)
	}
	versionMetrics(mb, out.include, cur.PolicyVersion, m)
	m["loss/total"] = out.Loss
	return nil
}

func sizedOrNil(x []float32, want bool, n int) []float32 {
	if !want {
		return nil
	}
	return resize(x, n)
}

// check validates the minibatch and the model outputs against the config.
func (l *Loss) check(mb *Batch, cur Current) error {
	if err := mb.Validate(); err != nil {
		return err
	}
	if mb.Advantages == nil {
		return fmt.Errorf("algo: loss: minibatch has no advantages (run an Estimator on the batch before selecting minibatches)")
	}
	n := mb.NumTokens()
	for _, c := range []struct {
		name     string
		x        []float32
		required bool
	}{
		{"current logprobs", cur.Logprobs, true},
		{"current entropies", cur.Entropies, l.cfg.EntropyCoef > 0},
		{"current values", cur.Values, l.cfg.Critic.Coef > 0},
	} {
		if c.x == nil && c.required {
			return fmt.Errorf("algo: loss: %s are required by this config", c.name)
		}
		if c.x != nil && len(c.x) != n {
			return fmt.Errorf("algo: loss: %s have %d entries, minibatch has %d tokens", c.name, len(c.x), n)
		}
		for i := 0; i < mb.NumSeqs(); i++ {
			lo, hi := mb.Seq(i)
			if t, ok := firstNonFinite(c.x, lo, hi); !ok {
				return fmt.Errorf("algo: loss: %s token %d: %s is %v", mb.seqName(i), t-lo, c.name, c.x[t])
			}
		}
	}
	if l.cfg.Correction.needsOld() && mb.Old == nil {
		return fmt.Errorf("algo: loss: the correction needs old logprobs recomputed by the learner (Batch.Old)")
	}
	if l.cfg.KL.Coef > 0 && mb.Ref == nil {
		return fmt.Errorf("algo: loss: the KL term needs reference logprobs (Batch.Ref)")
	}
	if l.distill != nil && mb.Teacher == nil {
		return fmt.Errorf("algo: loss: the distillation term needs teacher logprobs (Batch.Teacher)")
	}
	if l.cfg.Critic.Coef > 0 {
		if mb.Returns == nil {
			return fmt.Errorf("algo: loss: the critic term needs value targets (Batch.Returns from a critic estimator: gae, gae-turn)")
		}
		if l.cfg.Critic.Clip > 0 && mb.Values == nil {
			return fmt.Errorf("algo: loss: value clipping needs rollout values (Batch.Values)")
		}
	}
	return nil
}

// klTerm adds β·Σ coef·KL(π_θ‖π_ref) and its gradient.
func (l *Loss) klTerm(out *Output, mb *Batch, cur Current, m Metrics) float64 {
	beta := l.cfg.KL.Coef
	var sum, mean, n float64
	if mb.Ref == nil {
		return 0
	}
	est := l.kl
	if beta == 0 {
		est = KLEstimator{name: "k3", base: klK3} // reported as a metric only
	}
	for i := 0; i < mb.NumSeqs(); i++ {
		c := out.coef[i]
		if c == 0 {
			continue
		}
		lo, hi := mb.Seq(i)
		for t := lo; t < hi; t++ {
			if !mb.Mask[t] {
				continue
			}
			v, g := est.Eval(float64(cur.Logprobs[t]), float64(mb.Ref[t]))
			sum += c * v
			mean += v
			n++
			out.grad[t] += beta * c * g
		}
	}
	if n > 0 {
		m["kl/ref_kl_mean"] = mean / n
	}
	if beta == 0 {
		return 0
	}
	m["loss/kl"] = sum
	return beta * sum
}

// entropyTerm subtracts c_e·Σ coef·H (the entropy bonus, arXiv 1707.06347 eq. 9) and always
// reports the mean entropy of masked tokens when entropies are given.
func (l *Loss) entropyTerm(out *Output, mb *Batch, cur Current, m Metrics) float64 {
	if cur.Entropies == nil {
		return 0
	}
	ce := l.cfg.EntropyCoef
	var sum, mean, n float64
	for i := 0; i < mb.NumSeqs(); i++ {
		c := out.coef[i]
		if c == 0 {
			continue
		}
		lo, hi := mb.Seq(i)
		for t := lo; t < hi; t++ {
			if mb.Mask[t] {
				h := float64(cur.Entropies[t])
				sum += c * h
				mean += h
				n++
				out.DEntropies[t] = float32(-ce * c)
			}
		}
	}
	if n > 0 {
		m["loss/entropy_mean"] = mean / n
	}
	m["loss/entropy"] = sum
	return -ce * sum
}

// criticTerm adds c_v·Σ coef·½·max((V−R)², (V_clip−R)²) with V_clip = V_old + clip(V − V_old, ±ε).
func (l *Loss) criticTerm(out *Output, mb *Batch, cur Current, m Metrics) float64 {
	cv, eps := l.cfg.Critic.Coef, l.cfg.Critic.Clip
	if cv == 0 {
		return 0
	}
	var sum, clipped, n float64
	for i := 0; i < mb.NumSeqs(); i++ {
		c := out.coef[i]
		if c == 0 {
			continue
		}
		lo, hi := mb.Seq(i)
		for t := lo; t < hi; t++ {
			if !mb.Mask[t] {
				continue
			}
			v, ret := float64(cur.Values[t]), float64(mb.Returns[t])
			vfLoss1 := (v - ret) * (v - ret)
			loss, d := vfLoss1, v-ret
			if eps > 0 {
				vOld := float64(mb.Values[t])
				vClip := vOld + clamp(v-vOld, -eps, eps)
				if vfLoss2 := (vClip - ret) * (vClip - ret); vfLoss2 > vfLoss1 {
					loss, d = vfLoss2, 0 // the clipped branch is constant in V outside ±ε
					clipped++
				}
			}
			sum += c * 0.5 * loss
			n++
			out.DValues[t] = float32(cv * c * d)
		}
	}
	m["critic/value_loss"] = sum
	if n > 0 {
		m["critic/vf_clipfrac"] = clipped / n
	}
	return cv * sum
}

// policyMetrics turns the policy loss counts into fractions (cleanrl's clipFrac, approxKL).
func policyMetrics(st *PolicyStats, m Metrics) {
	if st.Tokens == 0 {
		return
	}
	m["loss/pg_clipfrac"] = (st.ClipHigh + st.ClipLow) / st.Tokens
	m["loss/pg_clipfrac_high"] = st.ClipHigh / st.Tokens
	m["loss/pg_clipfrac_low"] = st.ClipLow / st.Tokens
	m["loss/pg_clipfrac_dual"] = st.Dual / st.Tokens
	m["loss/approx_kl"] = st.ApproxKL / st.Tokens
	m["loss/ratio_mean"] = st.Ratio / st.Tokens
	m["loss/ratio_max"] = st.RatioMax
}

// versionMetrics reports how many versions behind the trained weights the sampled tokens are.
func versionMetrics(mb *Batch, include []bool, version int32, m Metrics) {
	if mb.Versions == nil {
		return
	}
	var sum, n float64
	mx := math.Inf(-1)
	for i, ok := range include {
		if !ok {
			continue
		}
		lo, hi := mb.Seq(i)
		for t := lo; t < hi; t++ {
			if mb.Mask[t] && mb.Versions[t] >= 0 {
				lag := float64(version - mb.Versions[t])
				sum += lag
				n++
				mx = math.Max(mx, lag)
			}
		}
	}
	if n > 0 {
		m["is/version_lag_mean"], m["is/version_lag_max"] = sum/n, mx
	}
}
