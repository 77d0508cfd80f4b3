package algo

import (
	"fmt"
	"math"
)

// gae is PPO's generalized advantage estimation with a learned value (Schulman et al., arXiv
// 1506.02438, eq. 16): δ_t = r_t + γ·V_{t+1} − V_t, A_t = δ_t + γλ·A_{t+1}, return R_t = A_t + V_t.
//
// Token level (name "gae"): t runs over the loss-masked tokens; environment and tool tokens carry
// no value and no reward and are skipped, so the recursion runs from the last token of one turn
// straight to the first token of the next (as verl's multi-turn GAE does). The value after the last
// masked token is 0: episodes, truncated ones included, are treated as terminal.
//
// Turn level (name "gae-turn"): t runs over turns; V_k is the value at the turn's first masked
// token (the state the action was taken in), r_k the turn's reward plus its dense token rewards
// plus the outcome on the last turn. Every masked token of turn k gets A_k and the value target
// R_k = A_k + V_k.
//
// The value targets R use the raw advantages; the advantages the loss sees are then whitened over
// all masked tokens of the batch's non-failed sequences (mean 0, unbiased variance 1, ε = 1e-8),
// as verl does, unless NoWhiten.
type gae struct {
	gamma, lambda float64
	turn          bool
	noWhiten      bool
}

func newGAE(turn bool) EstimatorFactory {
	return func(c AdvantageConfig) (Estimator, error) {
		if err := c.onlyUses("gae"); err != nil {
			return nil, err
		}
		if err := checkGamma("gae", c.GAE.Gamma); err != nil {
			return nil, err
		}
		if !(c.GAE.Lambda >= 0 && c.GAE.Lambda <= 1) {
			return nil, fmt.Errorf("gae.lambda = %v, want 0 ≤ lambda ≤ 1", c.GAE.Lambda)
		}
		return gae{gamma: c.GAE.Gamma, lambda: c.GAE.Lambda, turn: turn, noWhiten: c.GAE.NoWhiten}, nil
	}
}

// NeedsValues is true: GAE bootstraps from V(s_t).
func (gae) NeedsValues() bool { return true }

// CreditsTurns is true for gae-turn, whose steps are the assistant turns.
func (e gae) CreditsTurns() bool { return e.turn }

func (e gae) Estimate(b *Batch) (Metrics, error) {
	if err := prepare(b, true); err != nil {
		return nil, err
	}
	if b.Values == nil {
		return nil, fmt.Errorf("algo: gae needs rollout values (Batch.Values)")
	}
	var r []float64
	var steps []step
	for i := 0; i < b.NumSeqs(); i++ {
		if b.failed(i) {
			continue
		}
		if e.turn {
			var err error
			if steps, err = turnSteps(steps, b, i, "gae-turn"); err != nil {
				return nil, err
			}
			e.turnSeq(b, steps)
			continue
		}
		lo, hi := b.Seq(i)
		r = resize(r, hi-lo)
		placeRewards(r, b, i)
		nextV, lastGAE := 0.0, 0.0
		for t := hi - 1; t >= lo; t-- {
			if !b.Mask[t] {
				continue
			}
			v := float64(b.Values[t])
			delta := r[t-lo] + e.gamma*nextV - v
			lastGAE = delta + e.gamma*e.lambda*lastGAE
			b.Advantages[t] = float32(lastGAE)
			b.Returns[t] = float32(lastGAE + v)
			nextV = v
		}
	}
	if !e.noWhiten {
		whiten(b)
	}
	return e.metrics(b), nil
}

func (e gae) turnSeq(b *Batch, steps []step) {
	nextV, lastGAE := 0.0, 0.0
	for k := len(steps) - 1; k >= 0; k-- {
		s := steps[k]
		v := float64(b.Values[s.first])
		delta := s.reward + e.gamma*nextV - v
		lastGAE = delta + e.gamma*e.lambda*lastGAE
		fillStep(b.Advantages, b, s, lastGAE)
		for t := s.lo; t < s.hi; t++ {
			if b.Mask[t] {
				b.Returns[t] = float32(lastGAE + v)
			}
		}
		nextV = v
	}
}

// metrics adds the critic's view: mean return and the value function's explained variance.
func (e gae) metrics(b *Batch) Metrics {
	m := advMetrics(b, nil)
	var n, sr, srr, sd, sdd float64
	for i := 0; i < b.NumSeqs(); i++ {
		if b.failed(i) {
			continue
		}
		lo, hi := b.Seq(i)
		for t := lo; t < hi; t++ {
			if b.Mask[t] {
				ret, d := float64(b.Returns[t]), float64(b.Returns[t]-b.Values[t])
				n, sr, srr, sd, sdd = n+1, sr+ret, srr+ret*ret, sd+d, sdd+d*d
			}
		}
	}
	if n > 0 {
		m["adv/return_mean"] = sr / n
		if vr := srr/n - (sr/n)*(sr/n); vr > 0 {
			m["adv/value_explained_var"] = 1 - math.Max(sdd/n-(sd/n)*(sd/n), 0)/vr
		}
	}
	return m
}
