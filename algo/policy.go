package algo

import (
	"fmt"
	"math"
)

// PolicyLoss is one policy-gradient objective; Sequence is the one signature of this extension
// point. It sees one sequence at a time because sequence-level objectives (GSPO) couple its tokens.
type PolicyLoss interface {
	// Sequence returns Σ_t Coef·w_t·ℓ_t over the masked tokens of one sequence and adds
	// Coef·w_t·∂ℓ_t/∂logπ_t into grad (aligned with the sequence). w_t is the constant importance
	// correction (Weight[t], 1 when Weight is nil); tokens with w_t = 0 contribute nothing. It adds
	// its counts into st.
	Sequence(s SeqInput, grad []float64, st *PolicyStats) float64
}

// SeqInput is one sequence as a policy loss sees it. All slices have the sequence's length.
type SeqInput struct {
	Mask   []bool
	Logp   []float32 // current logprobs logπ_θ
	Old    []float32 // proximal logprobs logπ_old, the ratio's denominator
	Adv    []float32
	Weight []float64 // importance correction weights (constants); nil means all 1
	Coef   float64   // this sequence's aggregation coefficient (see aggregate)
}

func (s *SeqInput) weight(t int) float64 {
	if s.Weight == nil {
		return 1
	}
	return s.Weight[t]
}

// PolicyStats counts, over contributing tokens, what the clip did and the ratio's drift.
type PolicyStats struct {
	Tokens   float64 // tokens with a non-zero weight
	ClipHigh float64 // ratio above 1+ε_high with A > 0: gradient cut
	ClipLow  float64 // ratio below 1−ε_low with A < 0: gradient cut
	Dual     float64 // dual-clip bound active (A < 0, ratio > c)
	Ratio    float64 // Σ ratio
	ApproxKL float64 // Σ (ratio − 1) − log ratio, the k3 estimate of KL(π_old‖π_θ) (cleanrl's approxKL)
	RatioMax float64
}

func (st *PolicyStats) observe(ratio, logRatio float64) {
	st.Tokens++
	st.Ratio += ratio
	st.ApproxKL += (ratio - 1) - logRatio
	if ratio > st.RatioMax {
		st.RatioMax = ratio
	}
}

// PolicyFactory builds a PolicyLoss from the loss config; a factory rejects settings of other
// losses' sub-configs.
type PolicyFactory func(cfg LossConfig) (PolicyLoss, error)

// PolicyRegistry is the registry of policy losses.
type PolicyRegistry struct{ *Registry[PolicyFactory] }

// PolicyLosses returns a fresh registry holding the built-in policy losses.
func PolicyLosses() *PolicyRegistry {
	r := &PolicyRegistry{newRegistry[PolicyFactory]("policy loss")}
	for _, e := range []struct {
		name string
		f    PolicyFactory
	}{
		{"ppo", newPPO}, {"gspo", newGSPO}, {"sapo", newSAPO}, {"cispo", newCISPO}, {"reinforce", newReinforce},
	} {
		if err := r.Register(e.name, e.f); err != nil {
			panic(err) // the built-in table has a duplicate: a programming error
		}
	}
	return r
}

// New builds the policy loss named by c.Policy.
func (r *PolicyRegistry) New(c LossConfig) (PolicyLoss, error) {
	f, err := r.Lookup(c.Policy)
	if err != nil {
		return nil, err
	}
	p, err := f(c)
	if err != nil {
		return nil, fmt.Errorf("algo: policy loss %q: %w", c.Policy, err)
	}
	return p, nil
}

// logRatioClamp bounds log(π/π_old) before exponentiating, as verl does: ratio = exp(clamp(·, ±20)).
const logRatioClamp = 20

// ratioOf returns ratio = exp(clamp(logπ − logπ_old, −20, 20)), the log ratio, and whether the
// clamp was inactive (only then does the ratio depend on logπ).
func ratioOf(logp, old float32) (ratio, logRatio float64, live bool) {
	lr := float64(logp) - float64(old)
	live = lr > -logRatioClamp && lr < logRatioClamp
	if !live {
		lr = clamp(lr, -logRatioClamp, logRatioClamp)
	}
	return math.Exp(lr), lr, live
}

// clamp bounds x to [lo, hi] with plain comparisons: math.Max/Min's NaN and signed-zero handling
// is not needed on validated inputs and costs several ns per token.
func clamp(x, lo, hi float64) float64 {
	if x < lo {
		return lo
	}
	if x > hi {
		return hi
	}
	return x
}

func liveGrad(live bool, g float64) float64 {
	if live {
		return g
	}
	return 0
}
