package algo

import "fmt"

// PPOConfig: PPO's clipped surrogate (Schulman et al., arXiv 1707.06347 eq. 7) with asymmetric
// ranges (clip-higher, DAPO arXiv 2503.14476 §3.1) and dual-clip (Ye et al., arXiv 1912.09729).
type PPOConfig struct {
	ClipLow  float64 `yaml:"clip_low"`  // ε_low: ratio floor 1−ε_low, in (0, 1)
	ClipHigh float64 `yaml:"clip_high"` // ε_high: ratio ceiling 1+ε_high, > 0
	DualClip float64 `yaml:"dual_clip"` // c > 1 bounds the loss of A < 0 tokens by −A·c; 0 = off
}

type ppo struct{ PPOConfig }

func newPPO(c LossConfig) (PolicyLoss, error) {
	if err := c.onlyUses("ppo"); err != nil {
		return nil, err
	}
	p := c.PPO
	if err := checkClip("ppo", p.ClipLow, p.ClipHigh); err != nil {
		return nil, err
	}
	if p.DualClip != 0 && !(p.DualClip > 1) {
		return nil, fmt.Errorf("ppo.dual_clip = %v, want c > 1 (or 0 for off)", p.DualClip)
	}
	return ppo{p}, nil
}

func checkClip(what string, lo, hi float64) error {
	if !(lo > 0 && lo < 1) {
		return fmt.Errorf("%s.clip_low = %v, want 0 < ε_low < 1", what, lo)
	}
	if !(hi > 0) || hi > 1e6 {
		return fmt.Errorf("%s.clip_high = %v, want ε_high > 0", what, hi)
	}
	return nil
}

// Sequence: per token, with ratio = π_θ/π_old,
//
//	pgLoss1 = −A·ratio
//	pgLoss2 = −A·clip(ratio, 1−ε_low, 1+ε_high)
//	ℓ = max(pgLoss1, pgLoss2), and for A < 0 with dual-clip: min(ℓ, −A·c)
//
// The gradient flows only through the unclipped branch.
func (p ppo) Sequence(s SeqInput, grad []float64, st *PolicyStats) float64 {
	loss := 0.0
	for t, m := range s.Mask {
		w := s.Coef * s.weight(t)
		if !m || w == 0 {
			continue
		}
		a := float64(s.Adv[t])
		ratio, logRatio, live := ratioOf(s.Logp[t], s.Old[t])
		st.observe(ratio, logRatio)
		pgLoss1 := -a * ratio
		pgLoss2 := -a * clamp(ratio, 1-p.ClipLow, 1+p.ClipHigh)
		l, d := pgLoss1, liveGrad(live, -a*ratio)
		if pgLoss2 > pgLoss1 {
			l, d = pgLoss2, 0
			if a > 0 {
				st.ClipHigh++
			} else {
				st.ClipLow++
			}
		}
		if p.DualClip > 0 && a < 0 {
			if pgLoss3 := -a * p.DualClip; l > pgLoss3 {
				l, d = pgLoss3, 0
				st.Dual++
			}
		}
		loss += w * l
		grad[t] += w * d
	}
	return loss
}
