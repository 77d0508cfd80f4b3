package algo

import (
	"math"
	"slices"
	"testing"

	"github.com/agentrl/agentrl/traj"
)

// MeasureShift against values worked by hand: two masked tokens with log-ratios ln 2 and 0.
func TestMeasureShiftByHand(t *testing.T) {
	ln2 := float32(math.Ln2)
	b := &Batch{
		Offsets:   []int{0, 3},
		Mask:      []bool{false, true, true},
		Behaviour: []float32{0, -1, -2},
		Old:       []float32{5, -1 + ln2, -2},
		Versions:  []int32{traj.NoVersion, 3, 1},
	}
	s := MeasureShift(b, 4)
	d := float64(b.Old[1] - b.Behaviour[1])
	wantKL := (math.Exp(d) - 1 - d) / 2 // the second token's k3 is 0
	w := math.Exp(d)
	if math.Abs(s.KL-wantKL) > 1e-12 || math.Abs(s.ISMean-(w+1)/2) > 1e-12 || s.ISMax != w {
		t.Fatalf("KL %v IS mean %v max %v, want %v %v %v", s.KL, s.ISMean, s.ISMax, wantKL, (w+1)/2, w)
	}
	if want := (w + 1) * (w + 1) / (2 * (w*w + 1)); math.Abs(s.ESS-want) > 1e-12 {
		t.Fatalf("ESS %v, want %v", s.ESS, want)
	}
	if s.LagMean != 2 || s.LagMax != 3 {
		t.Fatalf("lag mean %v max %v, want 2 and 3", s.LagMean, s.LagMax)
	}
	if got := MeasureShift(&Batch{Offsets: []int{0}}, 0); got != (Shift{}) {
		t.Fatalf("empty batch: %+v", got)
	}
}

func TestSummarizeAdvantagesByHand(t *testing.T) {
	b := &Batch{
		Offsets:    []int{0, 2, 4, 5},
		Mask:       []bool{true, true, false, true, false},
		Advantages: []float32{1, 3, 0, -2, 0},
	}
	s := SummarizeAdvantages(b)
	// Per-sequence means 2 and −2 (the third has no masked token): std √8; |a| mean 6/3.
	if s.Effective != 2 || math.Abs(s.Spread-math.Sqrt(8)) > 1e-12 || s.MeanAbs != 2 {
		t.Fatalf("%+v", s)
	}
}

// The batch carries its token ids through Select, so the learner needs no trajectories beside it.
func TestBatchCarriesTokens(t *testing.T) {
	mk := func(id string, toks []int32) *traj.Trajectory {
		tr := &traj.Trajectory{ID: id, Tokens: toks, Status: traj.StatusOK}
		for range toks {
			tr.Roles = append(tr.Roles, traj.RoleUser)
			tr.LossMask = append(tr.LossMask, false)
			tr.Logprobs = append(tr.Logprobs, 0)
			tr.Versions = append(tr.Versions, traj.NoVersion)
		}
		return tr
	}
	b, err := FromTrajectories([]*traj.Trajectory{mk("a", []int32{1, 2, 3}), mk("b", []int32{4, 5})})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Tokens, []int32{1, 2, 3, 4, 5}) {
		t.Fatalf("tokens %v", b.Tokens)
	}
	m, err := b.Select([]int{1, 0})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Tokens, []int32{4, 5, 1, 2, 3}) {
		t.Fatalf("selected tokens %v", m.Tokens)
	}
	b.Tokens = b.Tokens[:4]
	if err := b.Validate(); err == nil {
		t.Fatal("a batch with too few token ids validated")
	}
}
