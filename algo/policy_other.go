package algo

import (
	"fmt"
	"math"
)

// GSPOConfig: group sequence policy optimisation (Zheng et al., arXiv 2507.18071). The paper clips
// the sequence ratio very tightly (ε_low 3e-4, ε_high 4e-4).
type GSPOConfig struct {
	ClipLow  float64 `yaml:"clip_low"`
	ClipHigh float64 `yaml:"clip_high"`
}

type gspo struct{ GSPOConfig }

// gspoLogRatioMax is verl's upper clamp of GSPO's log sequence ratio.
const gspoLogRatioMax = 10

func newGSPO(c LossConfig) (PolicyLoss, error) {
	if err := c.onlyUses("gspo"); err != nil {
		return nil, err
	}
	if err := checkClip("gspo", c.GSPO.ClipLow, c.GSPO.ClipHigh); err != nil {
		return nil, err
	}
	return gspo{c.GSPO}, nil
}

// Sequence: the length-normalised sequence ratio (arXiv 2507.18071 eq. 7)
//
//	log s_i = Σ_t m_t·(logπ_θ − logπ_old) / |y_i|,  |y_i| = Σ_t m_t
//
// in its token-level straight-through form GSPO-token (eq. 13): s_{i,t} = sg[s_i]·π_θ(y_t)/sg[π_θ(y_t)],
// whose value is s_i and whose gradient with respect to logπ_t is s_i. The token loss is PPO's
// clipped surrogate on s_{i,t}. The gradient is the straight-through one by design; it equals the
// derivative of the reported loss when the advantage is constant within the sequence.
//
// log s_i is clamped above at 10 with no lower bound, as verl's compute_policy_loss_gspo does
// (torch.clamp(·, max=10)), with zero gradient where the clamp holds: the per-token ratio's ±20
// clamp would let one sequence's e^20 swamp a batch, and a tiny s_i needs no bound.
func (p gspo) Sequence(s SeqInput, grad []float64, st *PolicyStats) float64 {
	sum, n := 0.0, 0
	for t, m := range s.Mask {
		if m {
			sum += float64(s.Logp[t]) - float64(s.Old[t])
			n++
		}
	}
	if n == 0 {
		return 0
	}
	logS := sum / float64(n)
	live := logS <= gspoLogRatioMax
	logS = math.Min(logS, gspoLogRatioMax)
	seqRatio := math.Exp(logS)
	loss := 0.0
	for t, m := range s.Mask {
		w := s.Coef * s.weight(t)
		if !m || w == 0 {
			continue
		}
		a := float64(s.Adv[t])
		st.observe(seqRatio, logS)
		pgLoss1 := -a * seqRatio
		pgLoss2 := -a * clamp(seqRatio, 1-p.ClipLow, 1+p.ClipHigh)
		l, d := pgLoss1, liveGrad(live, -a*seqRatio)
		if pgLoss2 > pgLoss1 {
			l, d = pgLoss2, 0
			if a > 0 {
				st.ClipHigh++
			} else {
				st.ClipLow++
			}
		}
		loss += w * l
		grad[t] += w * d
	}
	return loss
}

// SAPOConfig: soft adaptive policy optimisation (Qwen, arXiv 2511.20347): a smooth sigmoid gate
// replaces the hard clip, with a separate temperature for negative advantages.
type SAPOConfig struct {
	TauPos float64 `yaml:"tau_pos"` // τ for A > 0 (paper: 1.0)
	TauNeg float64 `yaml:"tau_neg"` // τ for A ≤ 0 (paper: 1.05)
}

type sapo struct{ SAPOConfig }

func newSAPO(c LossConfig) (PolicyLoss, error) {
	if err := c.onlyUses("sapo"); err != nil {
		return nil, err
	}
	for _, v := range []float64{c.SAPO.TauPos, c.SAPO.TauNeg} {
		if !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("sapo temperatures tau_pos = %v, tau_neg = %v, want finite τ > 0", c.SAPO.TauPos, c.SAPO.TauNeg)
		}
	}
	return sapo{c.SAPO}, nil
}

// Sequence: ℓ = −A·f(ratio) with the soft gate f(ρ) = σ(τ(ρ−1))·4/τ. At ρ = 1, f' = 1, so on-policy
// tokens get exactly the policy gradient; far from 1 the gradient fades smoothly instead of being
// cut. ∂ℓ/∂logπ = −A·4σ(1−σ)·ρ.
func (p sapo) Sequence(s SeqInput, grad []float64, st *PolicyStats) float64 {
	loss := 0.0
	for t, m := range s.Mask {
		w := s.Coef * s.weight(t)
		if !m || w == 0 {
			continue
		}
		a := float64(s.Adv[t])
		tau := p.TauNeg
		if a > 0 {
			tau = p.TauPos
		}
		ratio, logRatio, live := ratioOf(s.Logp[t], s.Old[t])
		st.observe(ratio, logRatio)
		sig := 1 / (1 + math.Exp(-tau*(ratio-1)))
		loss += w * (-a * sig * 4 / tau)
		grad[t] += w * liveGrad(live, -a*4*sig*(1-sig)*ratio)
	}
	return loss
}

// CISPOConfig: clipped IS-weight policy optimisation (MiniMax-M1, arXiv 2506.13585 §3.1). The paper
// sets no lower bound: ClipLow = 1 makes the floor 0.
type CISPOConfig struct {
	ClipLow  float64 `yaml:"clip_low"`  // floor 1−ε_low, in [0, 1]
	ClipHigh float64 `yaml:"clip_high"` // ceiling 1+ε_high, > 0
}

type cispo struct{ CISPOConfig }

func newCISPO(c LossConfig) (PolicyLoss, error) {
	if err := c.onlyUses("cispo"); err != nil {
		return nil, err
	}
	if !(c.CISPO.ClipLow >= 0 && c.CISPO.ClipLow <= 1) {
		return nil, fmt.Errorf("cispo.clip_low = %v, want 0 ≤ ε_low ≤ 1", c.CISPO.ClipLow)
	}
	if !(c.CISPO.ClipHigh > 0) || math.IsInf(c.CISPO.ClipHigh, 0) {
		return nil, fmt.Errorf("cispo.clip_high = %v, want finite ε_high > 0", c.CISPO.ClipHigh)
	}
	return cispo{c.CISPO}, nil
}

// Sequence: ℓ = −sg(r̂)·A·logπ_θ with r̂ = clip(ratio, 1−ε_low, 1+ε_high). Unlike PPO, clipped
// tokens keep a gradient (−r̂·A): only the IS weight is bounded.
func (p cispo) Sequence(s SeqInput, grad []float64, st *PolicyStats) float64 {
	loss := 0.0
	for t, m := range s.Mask {
		w := s.Coef * s.weight(t)
		if !m || w == 0 {
			continue
		}
		a := float64(s.Adv[t])
		ratio, logRatio, _ := ratioOf(s.Logp[t], s.Old[t])
		st.observe(ratio, logRatio)
		rHat := clamp(ratio, 1-p.ClipLow, 1+p.ClipHigh)
		if ratio > 1+p.ClipHigh {
			st.ClipHigh++
		} else if ratio < 1-p.ClipLow {
			st.ClipLow++
		}
		loss += w * (-rHat * a * float64(s.Logp[t]))
		grad[t] += w * (-rHat * a)
	}
	return loss
}

// reinforce is plain importance-weighted REINFORCE: ℓ = −ratio·A, whose gradient −ratio·A·∇logπ is
// the unbiased off-policy policy gradient (no clipping).
type reinforce struct{}

func newReinforce(c LossConfig) (PolicyLoss, error) {
	if err := c.onlyUses(""); err != nil {
		return nil, err
	}
	return reinforce{}, nil
}

func (reinforce) Sequence(s SeqInput, grad []float64, st *PolicyStats) float64 {
	loss := 0.0
	for t, m := range s.Mask {
		w := s.Coef * s.weight(t)
		if !m || w == 0 {
			continue
		}
		a := float64(s.Adv[t])
		ratio, logRatio, live := ratioOf(s.Logp[t], s.Old[t])
		st.observe(ratio, logRatio)
		loss += w * (-a * ratio)
		grad[t] += w * liveGrad(live, -a*ratio)
	}
	return loss
}
