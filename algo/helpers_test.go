package algo

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/agentrl/agentrl/traj"
)

// seqSpec describes one hand-written sequence: its mask as a string ("m" masked, "." not).
type seqSpec struct {
	mask   string
	group  uint64
	reward float64
	status traj.Status
	turns  []Turn
}

// build lays specs out as a Batch with zero logprobs.
func build(specs ...seqSpec) *Batch {
	b := &Batch{Offsets: []int{0}}
	for _, s := range specs {
		for _, c := range s.mask {
			b.Mask = append(b.Mask, c == 'm')
			b.Behaviour = append(b.Behaviour, 0)
		}
		b.Offsets = append(b.Offsets, len(b.Mask))
		b.Groups = append(b.Groups, s.group)
		b.Rewards = append(b.Rewards, s.reward)
		b.Status = append(b.Status, s.status)
	}
	hasTurns := false
	for _, s := range specs {
		hasTurns = hasTurns || s.turns != nil
	}
	if hasTurns {
		b.TurnOffsets = []int{0}
		for _, s := range specs {
			b.Turns = append(b.Turns, s.turns...)
			b.TurnOffsets = append(b.TurnOffsets, len(b.Turns))
		}
	}
	return b
}

// randomBatch makes a batch of nSeq multi-turn sequences in groups of 4 with every input filled,
// logprob ratios kept away from the clip boundaries of the losses under test so finite
// differences do not straddle a kink.
func randomBatch(rng *rand.Rand, nSeq, maxLen int) (*Batch, Current) {
	b := &Batch{Offsets: []int{0}, TurnOffsets: []int{0}}
	var cur Current
	for i := 0; i < nSeq; i++ {
		n := 4 + rng.IntN(maxLen-3)
		lo := len(b.Mask)
		// Alternate turns of 1-5 assistant tokens with 1-3 environment tokens.
		pos := 1 + rng.IntN(2) // a prompt
		for k := 0; k < pos; k++ {
			b.Mask = append(b.Mask, false)
		}
		for pos < n {
			start := pos
			end := min(n, start+1+rng.IntN(5))
			for ; pos < end; pos++ {
				b.Mask = append(b.Mask, true)
			}
			b.Turns = append(b.Turns, Turn{Start: start, End: end, Reward: float64(rng.IntN(3)) * 0.1, Anchor: string(rune('a' + rng.IntN(3)))})
			obs := min(n, pos+1+rng.IntN(3))
			for ; pos < obs; pos++ {
				b.Mask = append(b.Mask, false)
			}
		}
		for t := lo; t < len(b.Mask); t++ {
			behav := -0.2 - 2*rng.Float64()
			old := behav + awayFrom(rng, 0.3, []float64{}) // behaviour→old drift
			logp := old + awayFrom(rng, 0.45, []float64{math.Log(0.8), math.Log(1.2), math.Log(1.28), math.Log(0.72)})
			b.Behaviour = append(b.Behaviour, float32(behav))
			b.Old = append(b.Old, float32(old))
			b.Ref = append(b.Ref, float32(logp+awayFrom(rng, 0.5, []float64{0})))
			b.Versions = append(b.Versions, int32(rng.IntN(3)))
			v := rng.Float64()
			b.Values = append(b.Values, float32(v))
			cur.Logprobs = append(cur.Logprobs, float32(logp))
			cur.Entropies = append(cur.Entropies, float32(rng.Float64()*3))
			cur.Values = append(cur.Values, float32(v+awayFrom(rng, 0.4, []float64{0.2, -0.2})))
			b.TokenRewards = append(b.TokenRewards, 0)
		}
		b.Offsets = append(b.Offsets, len(b.Mask))
		b.TurnOffsets = append(b.TurnOffsets, len(b.Turns))
		b.Groups = append(b.Groups, uint64(i/4))
		b.Rewards = append(b.Rewards, float64(rng.IntN(2)))
		st := traj.StatusOK
		if rng.IntN(10) == 0 {
			st = traj.StatusEnvError
		}
		b.Status = append(b.Status, st)
	}
	cur.PolicyVersion = 3
	return b, cur
}

// awayFrom draws a value in [−r, r] at least 0.02 away from each kink.
func awayFrom(rng *rand.Rand, r float64, kinks []float64) float64 {
	for {
		x := (2*rng.Float64() - 1) * r
		ok := true
		for _, k := range kinks {
			ok = ok && math.Abs(x-k) > 0.02
		}
		if ok {
			return x
		}
	}
}

func near(a, b, tol float64) bool {
	return math.Abs(a-b) <= tol*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func mustEstimate(t *testing.T, b *Batch, name string, edit func(*AdvantageConfig)) Metrics {
	t.Helper()
	c, err := DefaultAdvantageConfig(name)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&c)
	}
	e, err := NewEstimator(c)
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Estimate(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
