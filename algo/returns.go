package algo

import (
	"fmt"
	"math"
)

// stdEps is GRPO's ε in A = (r − mean)/(std + ε) (DeepSeekMath arXiv 2402.03300; verl uses 1e-6).
const stdEps = 1e-6

// seqReturn is the scalar return of sequence i that outcome-level estimators compare: the outcome
// reward plus every per-turn reward plus every dense token reward (undiscounted, as GRPO sums
// token-level rewards into one score).
func seqReturn(b *Batch, i int) float64 {
	g := 0.0
	if b.Rewards != nil {
		g = b.Rewards[i]
	}
	for _, tu := range b.SeqTurns(i) {
		g += tu.Reward
	}
	if b.TokenRewards != nil {
		lo, hi := b.Seq(i)
		for t := lo; t < hi; t++ {
			g += float64(b.TokenRewards[t])
		}
	}
	return g
}

// groupStat is the statistics of one group under GRPO's conventions.
type groupStat struct {
	mean, std float64
	// equal reports a group of two or more whose values are all identical: its advantages are
	// exactly zero (not (r−mean)/ε of rounding noise) and the group is flagged as zero-variance.
	equal bool
}

// groupStats computes mean and unbiased std. A group of one has mean 0 and std 1, as verl does, so
// its advantage is its raw return.
func groupStats(xs []float64) groupStat {
	if len(xs) == 1 {
		return groupStat{mean: 0, std: 1}
	}
	equal := true
	sum := 0.0
	for _, x := range xs {
		sum += x
		equal = equal && x == xs[0]
	}
	mean := sum / float64(len(xs))
	ss := 0.0
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return groupStat{mean: mean, std: math.Sqrt(ss / float64(len(xs)-1)), equal: equal}
}

// normalize returns (x − mean)/(std + ε), or x − mean when noStd (Dr. GRPO, arXiv 2503.20783),
// and exactly 0 for an all-equal group.
func (g groupStat) normalize(x float64, noStd bool) float64 {
	if g.equal {
		return 0
	}
	if noStd {
		return x - g.mean
	}
	return (x - g.mean) / (g.std + stdEps)
}

// groupsOf returns, in order of first appearance, the sequences of each group id, leaving out
// infra-failed sequences so they never count as reward 0 in anyone's baseline.
func groupsOf(b *Batch, what string) ([][]int, error) {
	if b.Groups == nil {
		return nil, fmt.Errorf("algo: %s needs group ids (Batch.Groups)", what)
	}
	pos := map[uint64]int{}
	var out [][]int
	for i := 0; i < b.NumSeqs(); i++ {
		if b.failed(i) {
			continue
		}
		k, ok := pos[b.Groups[i]]
		if !ok {
			k = len(out)
			pos[b.Groups[i]] = k
			out = append(out, nil)
		}
		out[k] = append(out[k], i)
	}
	return out, nil
}

// placeRewards writes the per-token reward r_t of sequence i into r (len = sequence length): the
// dense token rewards, each turn's reward on the last loss-masked token at or before the turn's
// end, and the outcome reward on the last loss-masked token of the sequence. A reward with no
// masked token before it goes to the first masked token. Unmasked tokens carry no reward, so
// recursions over masked tokens never skip one.
func placeRewards(r []float64, b *Batch, i int) {
	lo, hi := b.Seq(i)
	clear(r)
	if b.TokenRewards != nil {
		for t := lo; t < hi; t++ {
			r[t-lo] = float64(b.TokenRewards[t])
		}
	}
	first, last := -1, -1
	for t := lo; t < hi; t++ {
		if b.Mask[t] {
			if first < 0 {
				first = t - lo
			}
			last = t - lo
		}
	}
	if first < 0 {
		return
	}
	for _, tu := range b.SeqTurns(i) {
		at := first
		for t := tu.End - 1; t >= 0; t-- {
			if b.Mask[lo+t] {
				at = t
				break
			}
		}
		r[at] += tu.Reward
	}
	if b.Rewards != nil {
		r[last] += b.Rewards[i]
	}
}

// step is one turn that holds at least one loss-masked token, as turn-level estimators see it.
type step struct {
	lo, hi int     // absolute token range of the turn
	first  int     // absolute index of its first masked token (where the turn's value is read)
	reward float64 // turn reward + dense token rewards in it (+ outcome on the last step)
	anchor string
}

// turnSteps lists the steps of sequence i. Turns without masked tokens carry no action to credit:
// their reward joins the previous step (the action that led to them), or the first step when none
// precedes. Masked tokens outside every turn are an error, since no step could own their credit.
func turnSteps(dst []step, b *Batch, i int, what string) ([]step, error) {
	if b.TurnOffsets == nil {
		return nil, fmt.Errorf("algo: %s needs turn boundaries (Batch.TurnOffsets, Batch.Turns)", what)
	}
	lo, hi := b.Seq(i)
	dst = dst[:0]
	pending := 0.0 // rewards of turns before the first step
	inTurn := 0
	for _, tu := range b.SeqTurns(i) {
		s := step{lo: lo + tu.Start, hi: lo + tu.End, first: -1, reward: tu.Reward, anchor: tu.Anchor}
		for t := s.lo; t < s.hi; t++ {
			if b.Mask[t] {
				inTurn++
				if s.first < 0 {
					s.first = t
				}
				if b.TokenRewards != nil {
					s.reward += float64(b.TokenRewards[t])
				}
			}
		}
		switch {
		case s.first >= 0:
			dst = append(dst, s)
		case len(dst) > 0:
			dst[len(dst)-1].reward += s.reward
		default:
			pending += s.reward
		}
	}
	masked := 0
	for t := lo; t < hi; t++ {
		if b.Mask[t] {
			masked++
		}
	}
	if masked != inTurn {
		return nil, fmt.Errorf("algo: %s: %s has %d loss-masked tokens outside every turn", what, b.seqName(i), masked-inTurn)
	}
	if len(dst) > 0 {
		dst[0].reward += pending
		if b.Rewards != nil {
			dst[len(dst)-1].reward += b.Rewards[i]
		}
	}
	return dst, nil
}

// fillSeq sets the advantage of every masked token of sequence i to a and of the others to 0.
func fillSeq(adv []float32, b *Batch, i int, a float64) {
	lo, hi := b.Seq(i)
	for t := lo; t < hi; t++ {
		if b.Mask[t] {
			adv[t] = float32(a)
		} else {
			adv[t] = 0
		}
	}
}

// fillStep sets the advantage of the masked tokens of one step.
func fillStep(adv []float32, b *Batch, s step, a float64) {
	for t := s.lo; t < s.hi; t++ {
		if b.Mask[t] {
			adv[t] = float32(a)
		}
	}
}
