package algo

import (
	"math"

	"github.com/agentrl/agentrl/traj"
)

// k3 is the k3 estimate of KL(behaviour ‖ π) from one token sampled from behaviour with
// log-ratio d = log π − log behaviour: (r − 1) − log r with r = e^d (Schulman, "Approximating KL
// divergence", 2020). It is unbiased and never negative. d is clamped to ±20 as every ratio is.
func k3(d float64) float64 {
	d = clamp(d, -logRatioClamp, logRatioClamp)
	return math.Exp(d) - 1 - d
}

// ess is the normalised effective sample size (Σw)² / (n·Σw²) ∈ (0, 1] of n importance weights
// with sum Σw and sum of squares Σw² (Kong 1992).
func ess(sum, sq float64, n int) float64 { return sum * sum / (float64(n) * sq) }

// Shift compares the behaviour policy (what the sampler used) with the learner's recomputation
// of the same tokens (Old), over the masked tokens of a batch, and measures how stale they are:
// the "distribution shift stays bounded" invariant.
type Shift struct {
	KL                   float64 // mean k3 estimate of KL(behaviour ‖ learner) per token
	ISMean, ISMax, ISStd float64 // importance weights learner/behaviour
	ESS                  float64 // normalised effective sample size of those weights
	LagMean, LagMax      float64 // policy versions between each sampled token and version
}

// MeasureShift measures b's shift against policy version (the version being trained). b.Old must
// be filled.
func MeasureShift(b *Batch, version int32) Shift {
	var s Shift
	var w []float64
	for j, m := range b.Mask {
		if !m {
			continue
		}
		d := float64(b.Old[j] - b.Behaviour[j])
		s.KL += k3(d)
		w = append(w, math.Exp(clamp(d, -logRatioClamp, logRatioClamp)))
		if v := b.Versions[j]; v != traj.NoVersion {
			lag := float64(version - v)
			s.LagMean += lag
			s.LagMax = math.Max(s.LagMax, lag)
		}
	}
	if n := float64(len(w)); n > 0 {
		s.KL /= n
		s.LagMean /= n
		var sum, sq float64
		for _, x := range w {
			sum += x
			sq += x * x
			s.ISMax = math.Max(s.ISMax, x)
		}
		s.ISMean = sum / n
		s.ISStd = sampleStd(w)
		s.ESS = ess(sum, sq, len(w))
	}
	return s
}

// AdvantageSummary describes the advantages an estimator left on the masked tokens of a batch:
// the "learning signal does not degenerate" invariant.
type AdvantageSummary struct {
	Effective int     // sequences with a non-zero advantage somewhere
	Spread    float64 // sample std of the per-sequence mean advantages
	MeanAbs   float64 // mean |advantage| per masked token
}

// SummarizeAdvantages summarizes b.Advantages.
func SummarizeAdvantages(b *Batch) AdvantageSummary {
	var s AdvantageSummary
	var per []float64
	nt := 0
	for i := 0; i < b.NumSeqs(); i++ {
		lo, hi := b.Seq(i)
		var sum float64
		n := 0
		nonzero := false
		for j := lo; j < hi; j++ {
			if b.Mask[j] {
				a := float64(b.Advantages[j])
				sum += a
				n++
				nonzero = nonzero || a != 0
				s.MeanAbs += math.Abs(a)
			}
		}
		nt += n
		if nonzero {
			s.Effective++
		}
		if n > 0 {
			per = append(per, sum/float64(n))
		}
	}
	if nt > 0 {
		s.MeanAbs /= float64(nt)
	}
	s.Spread = sampleStd(per)
	return s
}

// sampleStd is the sample standard deviation (n − 1 in the denominator); 0 for fewer than two.
func sampleStd(x []float64) float64 {
	if len(x) < 2 {
		return 0
	}
	var mean float64
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	var ss float64
	for _, v := range x {
		ss += (v - mean) * (v - mean)
	}
	return math.Sqrt(ss / float64(len(x)-1))
}
