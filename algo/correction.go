package algo

import (
	"fmt"
	"math"
)

// CorrectionConfig corrects for the gap between the policy that sampled (behaviour: an older
// version in async mode, or the inference engine's numerics) and the proximal policy π_old the
// learner recomputed (Batch.Old). The weight is ρ_b = π_old/π_behaviour per token, or the product
// over the sequence's masked tokens at sequence level, and it multiplies the policy-gradient term
// only. With Batch.Old set and the ratio taken against it, this is decoupled PPO (AReaL, arXiv
// 2505.24298 §5.1): behaviour and proximal policies are separate.
type CorrectionConfig struct {
	// Level is "" (no weight), "token" or "sequence".
	Level string `yaml:"level"`
	// Cap truncates the weight: w = min(ρ_b, C) (truncated IS, Ionides 2008; verl's TIS). 0 = no cap.
	Cap float64 `yaml:"cap"`
	// MaskLow, MaskHigh: a weight outside [lo, hi] becomes 0 — the token (or sequence) gives no
	// policy gradient (IcePop masking; AReaL's behaviour-weight cap is [0, cap]). Both 0 = off.
	MaskLow  float64 `yaml:"mask_low"`
	MaskHigh float64 `yaml:"mask_high"`
	// RejectKL drops whole sequences from every loss term when their mean per-token
	// KL(behaviour ‖ π_old), estimated with k3, exceeds it. 0 = off. Works at any Level.
	RejectKL float64 `yaml:"reject_kl"`
}

var correctionLevels = []string{"", "token", "sequence"}

func (c CorrectionConfig) validate() error {
	if err := oneOf("correction level", c.Level, correctionLevels); err != nil {
		return err
	}
	if c.Level == "" && (c.Cap != 0 || c.MaskLow != 0 || c.MaskHigh != 0) {
		return fmt.Errorf("algo: correction cap/mask do nothing without a level (token or sequence)")
	}
	if !(c.Cap >= 0) || math.IsInf(c.Cap, 0) {
		return fmt.Errorf("algo: correction cap = %v, want finite C > 0 (or 0 for none)", c.Cap)
	}
	if c.MaskLow != 0 || c.MaskHigh != 0 {
		if !(c.MaskLow >= 0 && c.MaskLow < c.MaskHigh) || math.IsInf(c.MaskHigh, 0) {
			return fmt.Errorf("algo: correction mask [%v, %v], want 0 ≤ lo < hi < ∞", c.MaskLow, c.MaskHigh)
		}
	}
	if !(c.RejectKL >= 0) || math.IsInf(c.RejectKL, 0) {
		return fmt.Errorf("algo: correction reject_kl = %v, want finite ≥ 0", c.RejectKL)
	}
	return nil
}

func (c CorrectionConfig) needsOld() bool { return c.Level != "" || c.RejectKL > 0 }

// behaviourLogRatio is log(π_old/π_behaviour) at token t.
func behaviourLogRatio(b *Batch, t int) float64 { return float64(b.Old[t]) - float64(b.Behaviour[t]) }

// reject clears include for sequences whose mean k3 estimate of KL(behaviour ‖ π_old) exceeds the
// threshold, and returns how many it dropped.
func (c CorrectionConfig) reject(b *Batch, include []bool) int {
	if c.RejectKL == 0 {
		return 0
	}
	dropped := 0
	for i := range include {
		if !include[i] {
			continue
		}
		lo, hi := b.Seq(i)
		sum, n := 0.0, 0
		for t := lo; t < hi; t++ {
			if b.Mask[t] {
				sum += k3(behaviourLogRatio(b, t))
				n++
			}
		}
		if n > 0 && sum/float64(n) > c.RejectKL {
			include[i] = false
			dropped++
		}
	}
	return dropped
}

// weigh turns a raw weight into the applied one and counts what it did.
func (c CorrectionConfig) weigh(raw float64, truncated, masked *int) float64 {
	if (c.MaskLow != 0 || c.MaskHigh != 0) && (raw < c.MaskLow || raw > c.MaskHigh) {
		*masked++
		return 0
	}
	if c.Cap > 0 && raw > c.Cap {
		*truncated++
		return c.Cap
	}
	return raw
}

// weights fills w with the applied weight of each token of included sequences and raw with the
// raw weights (one per token at token level, one per sequence at sequence level, and per token
// as a diagnostic when Level is ""), for the metrics.
func (c CorrectionConfig) weights(w []float64, raw []float64, b *Batch, include []bool, m Metrics) []float64 {
	raw = raw[:0]
	truncated, masked, units := 0, 0, 0
	klSum, klN := 0.0, 0
	for i := range include {
		if !include[i] {
			continue
		}
		lo, hi := b.Seq(i)
		seqLog := 0.0
		for t := lo; t < hi; t++ {
			if !b.Mask[t] {
				continue
			}
			d := behaviourLogRatio(b, t)
			seqLog += d
			r := math.Exp(clamp(d, -logRatioClamp, logRatioClamp))
			klSum += k3(d)
			klN++
			if c.Level != "sequence" {
				raw = append(raw, r)
			}
			if c.Level == "token" {
				w[t] = c.weigh(r, &truncated, &masked)
				units++
			}
		}
		if c.Level == "sequence" && hi > lo {
			r := math.Exp(clamp(seqLog, -logRatioClamp, logRatioClamp))
			raw = append(raw, r)
			ws := c.weigh(r, &truncated, &masked)
			units++
			for t := lo; t < hi; t++ {
				w[t] = ws
			}
		}
	}
	if klN > 0 {
		m["is/behav_kl"] = klSum / float64(klN)
	}
	if units > 0 {
		m["is/truncated_frac"] = float64(truncated) / float64(units)
		m["is/masked_frac"] = float64(masked) / float64(units)
	}
	weightMetrics(raw, m)
	return raw
}

// weightMetrics reports mean, max, quantiles and the normalised effective sample size
// ESS = (Σw)² / (n·Σw²) ∈ (0, 1] of raw importance weights (Kong 1992). raw is reordered.
func weightMetrics(raw []float64, m Metrics) {
	if len(raw) == 0 {
		return
	}
	sum, sq, mx := 0.0, 0.0, math.Inf(-1)
	for _, r := range raw {
		sum += r
		sq += r * r
		mx = math.Max(mx, r)
	}
	n := float64(len(raw))
	m["is/weight_mean"], m["is/weight_max"] = sum/n, mx
	m["is/ess"] = ess(sum, sq, len(raw))
	var q [3]float64
	quantiles(q[:], raw, []float64{0.5, 0.9, 0.99})
	m["is/weight_p50"], m["is/weight_p90"], m["is/weight_p99"] = q[0], q[1], q[2]
}
