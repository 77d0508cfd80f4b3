package algo

import (
	"fmt"
	"math"
)

// grpo: A_i = (r_i − mean(r))/(std(r) + ε) within each group, broadcast to every token of the
// sequence (DeepSeekMath, arXiv 2402.03300 §4.1.2); without the std (Dr. GRPO, arXiv 2503.20783).
type grpo struct{ noStd bool }

func newGRPO(c AdvantageConfig) (Estimator, error) {
	if err := c.onlyUses("grpo"); err != nil {
		return nil, err
	}
	return grpo{noStd: c.GRPO.NoStd}, nil
}

// GroupRelative is true: the baseline is the group's mean.
func (grpo) GroupRelative() bool { return true }

func (e grpo) Estimate(b *Batch) (Metrics, error) {
	if err := prepare(b, false); err != nil {
		return nil, err
	}
	groups, err := groupsOf(b, "grpo")
	if err != nil {
		return nil, err
	}
	zero, single := 0, 0
	r := make([]float64, 0, 64)
	for _, g := range groups {
		r = r[:0]
		for _, i := range g {
			r = append(r, seqReturn(b, i))
		}
		st := groupStats(r)
		zero, single = zero+b2i(st.equal), single+b2i(len(g) == 1)
		for k, i := range g {
			fillSeq(b.Advantages, b, i, st.normalize(r[k], e.noStd))
		}
	}
	m := advMetrics(b, nil)
	groupCounts(m, len(groups), zero, single)
	return m, nil
}

// rloo: A_i = r_i − mean_{j≠i} r_j, the leave-one-out baseline (Ahmadian et al., arXiv
// 2402.14740), computed as n/(n−1)·(r_i − mean). A group of one keeps its raw return, as in verl.
type rloo struct{}

func newRLOO(c AdvantageConfig) (Estimator, error) {
	if err := c.onlyUses(""); err != nil {
		return nil, err
	}
	return rloo{}, nil
}

// GroupRelative is true: the baseline is the mean of the group's other episodes.
func (rloo) GroupRelative() bool { return true }

func (rloo) Estimate(b *Batch) (Metrics, error) {
	if err := prepare(b, false); err != nil {
		return nil, err
	}
	groups, err := groupsOf(b, "rloo")
	if err != nil {
		return nil, err
	}
	zero, single := 0, 0
	r := make([]float64, 0, 64)
	for _, g := range groups {
		r = r[:0]
		for _, i := range g {
			r = append(r, seqReturn(b, i))
		}
		st := groupStats(r)
		zero, single = zero+b2i(st.equal), single+b2i(len(g) == 1)
		n := float64(len(g))
		for k, i := range g {
			a := r[k]
			switch {
			case st.equal:
				a = 0
			case len(g) > 1:
				a = n / (n - 1) * (r[k] - st.mean)
			}
			fillSeq(b.Advantages, b, i, a)
		}
	}
	m := advMetrics(b, nil)
	groupCounts(m, len(groups), zero, single)
	return m, nil
}

// reinforceBaseline: A_i = r_i − b with b the mean return of the batch's non-failed sequences
// (Williams 1992, with the batch mean as baseline). It needs no group ids.
type reinforceBaseline struct{}

func newReinforceBaseline(c AdvantageConfig) (Estimator, error) {
	if err := c.onlyUses(""); err != nil {
		return nil, err
	}
	return reinforceBaseline{}, nil
}

func (reinforceBaseline) Estimate(b *Batch) (Metrics, error) {
	if err := prepare(b, false); err != nil {
		return nil, err
	}
	sum, n := 0.0, 0
	for i := 0; i < b.NumSeqs(); i++ {
		if !b.failed(i) {
			sum += seqReturn(b, i)
			n++
		}
	}
	base := 0.0
	if n > 0 {
		base = sum / float64(n)
	}
	for i := 0; i < b.NumSeqs(); i++ {
		if !b.failed(i) {
			fillSeq(b.Advantages, b, i, seqReturn(b, i)-base)
		}
	}
	m := advMetrics(b, nil)
	m["adv/baseline"] = base
	return m, nil
}

// rpp is REINFORCE++ (Hu, arXiv 2501.03262): the discounted return-to-go of every masked token,
// G_t = Σ_{s≥t} γ^{s−t} r_s (environment tokens skipped), whitened over all masked tokens of the
// batch: A = (G − mean)/sqrt(var + 1e-8) with the unbiased variance (verl's masked_whiten). The
// "-baseline" variant first subtracts the group mean of the sequence returns and broadcasts that
// to the tokens (REINFORCE++-baseline, same paper §3).
type rpp struct {
	gamma    float64
	baseline bool
}

func newRPP(baseline bool) EstimatorFactory {
	return func(c AdvantageConfig) (Estimator, error) {
		if err := c.onlyUses("rpp"); err != nil {
			return nil, err
		}
		if baseline && c.RPP.Gamma != 1 {
			return nil, fmt.Errorf("rpp.gamma = %v: reinforce++-baseline broadcasts sequence returns and takes no discount (leave it 1)", c.RPP.Gamma)
		}
		if err := checkGamma("rpp", c.RPP.Gamma); err != nil {
			return nil, err
		}
		return rpp{gamma: c.RPP.Gamma, baseline: baseline}, nil
	}
}

// GroupRelative is true for the "-baseline" variant, whose baseline is the group's mean.
func (e rpp) GroupRelative() bool { return e.baseline }

func (e rpp) Estimate(b *Batch) (Metrics, error) {
	if err := prepare(b, false); err != nil {
		return nil, err
	}
	m := Metrics{}
	if e.baseline {
		groups, err := groupsOf(b, "reinforce++-baseline")
		if err != nil {
			return nil, err
		}
		zero, single := 0, 0
		r := make([]float64, 0, 64)
		for _, g := range groups {
			r = r[:0]
			for _, i := range g {
				r = append(r, seqReturn(b, i))
			}
			st := groupStats(r)
			zero, single = zero+b2i(st.equal), single+b2i(len(g) == 1)
			for k, i := range g {
				fillSeq(b.Advantages, b, i, r[k]-st.mean)
			}
		}
		groupCounts(m, len(groups), zero, single)
	} else {
		var r []float64
		for i := 0; i < b.NumSeqs(); i++ {
			if b.failed(i) {
				continue
			}
			lo, hi := b.Seq(i)
			r = resize(r, hi-lo)
			placeRewards(r, b, i)
			g := 0.0
			for t := hi - 1; t >= lo; t-- {
				if b.Mask[t] {
					g = r[t-lo] + e.gamma*g
					b.Advantages[t] = float32(g)
				}
			}
		}
	}
	whiten(b)
	return advMetrics(b, m), nil
}

// whiten normalises the advantages of masked tokens of non-failed sequences to mean 0 and unit
// unbiased variance. Identical values (or a single token) whiten to exactly 0.
func whiten(b *Batch) {
	var n, sum float64
	first, equal := math.NaN(), true
	each := func(f func(t int)) {
		for i := 0; i < b.NumSeqs(); i++ {
			if b.failed(i) {
				continue
			}
			lo, hi := b.Seq(i)
			for t := lo; t < hi; t++ {
				if b.Mask[t] {
					f(t)
				}
			}
		}
	}
	each(func(t int) {
		a := float64(b.Advantages[t])
		if n == 0 {
			first = a
		}
		equal = equal && a == first
		n++
		sum += a
	})
	if n < 2 || equal {
		each(func(t int) { b.Advantages[t] = 0 })
		return
	}
	mean := sum / n
	ss := 0.0
	each(func(t int) { d := float64(b.Advantages[t]) - mean; ss += d * d })
	inv := 1 / math.Sqrt(ss/(n-1)+1e-8)
	each(func(t int) { b.Advantages[t] = float32((float64(b.Advantages[t]) - mean) * inv) })
}

func b2i(x bool) int {
	if x {
		return 1
	}
	return 0
}
