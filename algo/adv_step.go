package algo

import (
	"fmt"
	"math"
)

// gigpo is group-in-group policy optimisation (Feng et al., arXiv 2505.10978 §4):
//
//	episode level  A^E(τ_i) = (R(τ_i) − mean_j R(τ_j)) / F_norm,  R(τ) = Σ_t r_t
//	step level     A^S(a_t) = (R_t − mean over the step group) / F_norm,  R_t = Σ_{k≥t} γ^{k−t} r_k
//	combined       A = A^E + ω·A^S
//
// Step groups gather the turns of one episode group (same Groups id) whose Anchor keys are equal,
// i.e. actions taken from the same environment state. F_norm is the unbiased std + ε, or 1 with
// NoStd. The episode level follows GRPO's conventions (a group of one: mean 0, std 1; a
// non-failed episode with no loss-masked token has no step and no advantage, but its return
// R(τ) counts in its group's statistics, as GRPO counts its reward). A step
// group of one has nothing to be compared with and gets A^S = 0 (its own mean); the metric
// "adv/singleton_step_frac" says how often that happens.
type gigpo struct {
	gamma, omega float64
	noStd        bool
}

func newGiGPO(c AdvantageConfig) (Estimator, error) {
	if err := c.onlyUses("gigpo"); err != nil {
		return nil, err
	}
	if err := checkGamma("gigpo", c.GiGPO.Gamma); err != nil {
		return nil, err
	}
	if !(c.GiGPO.StepWeight > 0) || math.IsInf(c.GiGPO.StepWeight, 0) {
		return nil, fmt.Errorf("gigpo.step_weight = %v, want a finite ω > 0", c.GiGPO.StepWeight)
	}
	return gigpo{gamma: c.GiGPO.Gamma, omega: c.GiGPO.StepWeight, noStd: c.GiGPO.NoStd}, nil
}

// stepRef locates one step and its discounted return.
type stepRef struct {
	s   step
	ret float64
}

// GroupRelative is true: both levels compare with the episode group.
func (gigpo) GroupRelative() bool { return true }

// CreditsTurns is true: each step's tokens get their own advantage.
func (gigpo) CreditsTurns() bool { return true }

func (e gigpo) Estimate(b *Batch) (Metrics, error) {
	if err := prepare(b, false); err != nil {
		return nil, err
	}
	groups, err := groupsOf(b, "gigpo")
	if err != nil {
		return nil, err
	}
	var steps []step
	zero, single, nSteps, singleSteps, stepGroups := 0, 0, 0, 0, 0
	for _, g := range groups {
		episode := make([]float64, len(g))
		byAnchor := map[string][]int{} // anchor → indexes into refs
		var anchors []string           // first-appearance order, for determinism
		var refs []stepRef
		for k, i := range g {
			if steps, err = turnSteps(steps, b, i, "gigpo"); err != nil {
				return nil, err
			}
			ret := 0.0
			for j := len(steps) - 1; j >= 0; j-- {
				ret = steps[j].reward + e.gamma*ret
				if steps[j].anchor == "" {
					return nil, fmt.Errorf("algo: gigpo: %s step %d has no anchor-state key", b.seqName(i), j)
				}
				if _, ok := byAnchor[steps[j].anchor]; !ok {
					anchors = append(anchors, steps[j].anchor)
				}
				byAnchor[steps[j].anchor] = append(byAnchor[steps[j].anchor], len(refs))
				refs = append(refs, stepRef{s: steps[j], ret: ret})
				episode[k] += steps[j].reward
			}
			if len(steps) == 0 {
				episode[k] = seqReturn(b, i) // no step to credit, but its reward is in the baseline
			}
		}
		ep := groupStats(episode)
		zero, single = zero+b2i(ep.equal), single+b2i(len(g) == 1)
		for k, i := range g {
			fillSeq(b.Advantages, b, i, ep.normalize(episode[k], e.noStd))
		}
		vals := make([]float64, 0, 8)
		for _, a := range anchors {
			members := byAnchor[a]
			stepGroups++
			nSteps += len(members)
			if len(members) == 1 {
				singleSteps++
				continue // A^S = 0
			}
			vals = vals[:0]
			for _, r := range members {
				vals = append(vals, refs[r].ret)
			}
			st := groupStats(vals)
			for j, r := range members {
				as := st.normalize(vals[j], e.noStd)
				s := refs[r].s
				fillStep(b.Advantages, b, s, float64(b.Advantages[s.first])+e.omega*as)
			}
		}
	}
	m := advMetrics(b, nil)
	groupCounts(m, len(groups), zero, single)
	m["adv/step_groups"] = float64(stepGroups)
	if nSteps > 0 {
		m["adv/singleton_step_frac"] = float64(singleSteps) / float64(nSteps)
		m["adv/step_group_size"] = float64(nSteps) / float64(stepGroups)
	}
	return m, nil
}

// turnReturn is step-level credit for POMDPs where states rarely repeat, so GiGPO's anchor groups
// would all be singletons. Each turn gets its discounted return R_{i,k} = Σ_{j≥k} γ^{j−k} r_{i,j},
// baselined and scaled by the episode group's statistics of the returns from the first turn:
//
//	A_{i,k} = (R_{i,k} − mean_j R_{j,0}) / (std_j R_{j,0} + ε)
//
// With γ = 1 and only an outcome reward every R_{i,k} equals R_{i,0} and this is exactly GRPO.
// When a group's first-turn returns are all equal, the std is replaced by 1 (the group is flagged
// zero-variance) so that later turns' differences are not divided by ε. A non-failed episode with
// no loss-masked token contributes its undiscounted return to the group's statistics (as GRPO
// counts its reward) and receives no advantage.
type turnReturn struct {
	gamma float64
	noStd bool
}

func newTurnReturn(c AdvantageConfig) (Estimator, error) {
	if err := c.onlyUses("turnre"); err != nil {
		return nil, err
	}
	if err := checkGamma("turnre", c.TurnRe.Gamma); err != nil {
		return nil, err
	}
	return turnReturn{gamma: c.TurnRe.Gamma, noStd: c.TurnRe.NoStd}, nil
}

// GroupRelative is true: the baseline is the group's first-turn returns.
func (turnReturn) GroupRelative() bool { return true }

// CreditsTurns is true: each turn's tokens get the return from that turn on.
func (turnReturn) CreditsTurns() bool { return true }

func (e turnReturn) Estimate(b *Batch) (Metrics, error) {
	if err := prepare(b, false); err != nil {
		return nil, err
	}
	groups, err := groupsOf(b, "turn-return")
	if err != nil {
		return nil, err
	}
	zero, single := 0, 0
	perSeq := make([][]stepRef, 0, 16)
	var steps []step
	for _, g := range groups {
		perSeq = perSeq[:0]
		first := make([]float64, len(g))
		for k, i := range g {
			if steps, err = turnSteps(steps, b, i, "turn-return"); err != nil {
				return nil, err
			}
			refs := make([]stepRef, len(steps))
			ret := 0.0
			for j := len(steps) - 1; j >= 0; j-- {
				ret = steps[j].reward + e.gamma*ret
				refs[j] = stepRef{s: steps[j], ret: ret}
			}
			if len(steps) == 0 {
				ret = seqReturn(b, i) // no step to credit, but its reward is in the baseline
			}
			first[k] = ret
			perSeq = append(perSeq, refs)
		}
		st := groupStats(first)
		zero, single = zero+b2i(st.equal), single+b2i(len(g) == 1)
		scale := st.std + stdEps
		if e.noStd || st.equal {
			scale = 1
		}
		for _, refs := range perSeq {
			for _, r := range refs {
				fillStep(b.Advantages, b, r.s, (r.ret-st.mean)/scale)
			}
		}
	}
	m := advMetrics(b, nil)
	groupCounts(m, len(groups), zero, single)
	return m, nil
}
