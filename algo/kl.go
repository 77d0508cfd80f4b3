package algo

import (
	"fmt"
	"math"
)

// KLEstimator is one per-token estimator of KL(π_θ ‖ π_ref) from a sample of π_θ (Schulman,
// "Approximating KL divergence", 2020), named as verl names them:
//
//	k1   logπ − logπ_ref                       (unbiased, high variance, can be negative)
//	abs  |logπ − logπ_ref|
//	k2   ½(logπ − logπ_ref)²                   (its gradient is the unbiased KL gradient)
//	k3   min(e^δ − δ − 1, 10), δ = clamp(logπ_ref − logπ, ±20)   (unbiased, non-negative, low variance)
//
// k3's value is clamped at 10 with zero gradient beyond, as verl's kl_penalty does ("low_var_kl"):
// e^δ grows without bound when the reference finds a token far likelier than the policy, and one
// such token would otherwise dominate the loss (logπ = −1, logπ_ref = 2: 16.09 unclamped).
// A "+" suffix (k1+, abs+, k2+, k3+) is the straight-through form: the value of the named
// estimator with the gradient of k2, i.e. k2 − sg(k2) + sg(k) (verl's kl_penalty "+" variants).
type KLEstimator struct {
	name     string
	base     int
	straight bool
}

const (
	klK1 = iota
	klAbs
	klK2
	klK3
)

// k3Max bounds the k3 estimate (verl: torch.clamp(kld, min=-10, max=10); k3 is never negative).
const k3Max = 10

var klNames = []string{"k1", "abs", "k2", "k3", "k1+", "abs+", "k2+", "k3+"}

// ParseKL returns the estimator called name; unknown names are an error listing the valid ones.
func ParseKL(name string) (KLEstimator, error) {
	if err := oneOf("KL estimator", name, klNames); err != nil {
		return KLEstimator{}, err
	}
	k := KLEstimator{name: name}
	base := name
	if n := len(name); name[n-1] == '+' {
		k.straight, base = true, name[:n-1]
	}
	switch base {
	case "k1":
		k.base = klK1
	case "abs":
		k.base = klAbs
	case "k2":
		k.base = klK2
	case "k3":
		k.base = klK3
	}
	return k, nil
}

// String is the estimator's name.
func (k KLEstimator) String() string { return k.name }

// Eval returns the estimate at one token and its derivative with respect to logπ.
func (k KLEstimator) Eval(logp, ref float64) (value, grad float64) {
	diff := logp - ref
	switch k.base {
	case klK1:
		value, grad = diff, 1
	case klAbs:
		value, grad = math.Abs(diff), sign(diff)
	case klK2:
		value, grad = 0.5*diff*diff, diff
	case klK3:
		delta := -diff
		live := delta > -logRatioClamp && delta < logRatioClamp
		delta = clamp(delta, -logRatioClamp, logRatioClamp)
		e := math.Exp(delta)
		value, grad = e-delta-1, liveGrad(live, 1-e)
		if value > k3Max {
			value, grad = k3Max, 0
		}
	}
	if k.straight {
		grad = diff
	}
	return value, grad
}

func sign(x float64) float64 {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}

// ApplyKLPenalty turns the KL to the reference into a dense reward (Ouyang et al., arXiv
// 2203.02155 eq. 2): on every masked token of non-failed sequences, TokenRewards −= coef·KL, with
// the KL estimated from the policy that sampled (Old when the learner recomputed it, else
// Behaviour). Call it before Estimate; pass a fixed coef or AdaptiveKL.Coef. It returns the mean
// per-token KL, the number AdaptiveKL.Update wants.
func ApplyKLPenalty(b *Batch, est KLEstimator, coef float64) (Metrics, error) {
	if est.name == "" {
		return nil, fmt.Errorf("algo: KL penalty: no estimator (use ParseKL)")
	}
	if !(coef >= 0) || math.IsInf(coef, 0) {
		return nil, fmt.Errorf("algo: KL penalty: coefficient %v, want finite ≥ 0", coef)
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	if b.Ref == nil {
		return nil, fmt.Errorf("algo: KL penalty needs reference logprobs (Batch.Ref)")
	}
	logp := b.Old
	if logp == nil {
		logp = b.Behaviour
	}
	if b.TokenRewards == nil {
		b.TokenRewards = make([]float32, b.NumTokens())
	}
	sum, n := 0.0, 0
	for i := 0; i < b.NumSeqs(); i++ {
		if b.failed(i) {
			continue
		}
		lo, hi := b.Seq(i)
		for t := lo; t < hi; t++ {
			if b.Mask[t] {
				kl, _ := est.Eval(float64(logp[t]), float64(b.Ref[t]))
				b.TokenRewards[t] -= float32(coef * kl)
				sum += kl
				n++
			}
		}
	}
	m := Metrics{"kl/reward_coef": coef}
	if n > 0 {
		m["kl/reward_kl_mean"] = sum / float64(n)
	}
	return m, nil
}

// AdaptiveKL is the adaptive KL coefficient of Ziegler et al. (arXiv 1909.08593 §2.2): it moves
// the coefficient so that the observed KL tracks Target.
type AdaptiveKL struct {
	Coef    float64 // current β; start it at the initial value
	Target  float64 // KL target per token, > 0
	Horizon float64 // steps over which the error is corrected, > 0
}

// Update applies β ← β·(1 + clip(KL/target − 1, −0.2, 0.2)·nSteps/horizon) after nSteps steps
// (or samples, as the horizon's unit) that observed mean KL kl.
func (a *AdaptiveKL) Update(kl float64, nSteps int) error {
	if !(a.Target > 0) || !(a.Horizon > 0) || !(a.Coef >= 0) {
		return fmt.Errorf("algo: adaptive KL: want coef ≥ 0, target > 0, horizon > 0, have %v, %v, %v", a.Coef, a.Target, a.Horizon)
	}
	if !finite(kl) || nSteps < 0 {
		return fmt.Errorf("algo: adaptive KL: observed KL %v over %d steps", kl, nSteps)
	}
	e := clamp(kl/a.Target-1, -0.2, 0.2)
	a.Coef *= 1 + e*float64(nSteps)/a.Horizon
	return nil
}

// KLPenaltyConfig is the KL to the reference as a per-token reward penalty (ApplyKLPenalty), with
// a fixed coefficient or, when Adaptive is set, the adaptive controller of Ziegler et al.
// (AdaptiveKL; verl's AdaptiveKLController) starting from Coef.
type KLPenaltyConfig struct {
	Estimator string            `yaml:"estimator"` // see KLEstimator; verl's default is "k1"
	Coef      float64           `yaml:"coef"`      // β > 0: fixed, or the adaptive controller's start
	Adaptive  *AdaptiveKLConfig `yaml:"adaptive,omitempty"`
}

// AdaptiveKLConfig is the target and horizon of AdaptiveKL.
type AdaptiveKLConfig struct {
	Target  float64 `yaml:"target"`  // per-token KL the coefficient steers toward, > 0
	Horizon float64 `yaml:"horizon"` // episodes over which the error is corrected, > 0 (Ziegler et al.: 10000)
}

// Validate checks the estimator and the coefficients; errors name the key at fault.
func (c KLPenaltyConfig) Validate() error {
	if _, err := ParseKL(c.Estimator); err != nil {
		return fmt.Errorf("estimator: %w", err)
	}
	if !(c.Coef > 0) || math.IsInf(c.Coef, 0) {
		return fmt.Errorf("coef = %v, want a finite β > 0 (a zero coefficient penalises nothing)", c.Coef)
	}
	if a := c.Adaptive; a != nil {
		if !(a.Target > 0) || math.IsInf(a.Target, 0) {
			return fmt.Errorf("adaptive.target = %v, want a finite KL per token > 0", a.Target)
		}
		if !(a.Horizon > 0) || math.IsInf(a.Horizon, 0) {
			return fmt.Errorf("adaptive.horizon = %v, want a finite number of episodes > 0", a.Horizon)
		}
	}
	return nil
}
