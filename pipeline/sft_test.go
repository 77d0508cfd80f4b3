package pipeline

import (
	"testing"

	"github.com/agentrl/agentrl/traj"
)

func TestCurriculumLen(t *testing.T) {
	cases := []struct{ ctx, step, steps, want int }{
		{384, 0, 0, 384},    // no curriculum
		{384, 0, 100, 96},   // a quarter of the context first
		{384, 50, 100, 240}, // a quarter plus half of the rest
		{384, 100, 100, 384},
		{384, 500, 100, 384},
	}
	for _, c := range cases {
		if got := curriculumLen(c.ctx, c.step, c.steps); got != c.want {
			t.Errorf("curriculumLen(%d, %d, %d) = %d, want %d", c.ctx, c.step, c.steps, got, c.want)
		}
	}
}

func TestTurnPrefix(t *testing.T) {
	// prompt 0-4, turn 0 = 4-6 + obs to 9, turn 1 = 9-11 + obs to 14, turn 2 = 14-16.
	n := 16
	tr := &traj.Trajectory{Tokens: make([]int32, n), Roles: make([]traj.Role, n), LossMask: make([]bool, n),
		Logprobs: make([]float32, n), Versions: make([]int32, n),
		Turns: []traj.Turn{{Start: 4, End: 6, ObsEnd: 9}, {Start: 9, End: 11, ObsEnd: 14}, {Start: 14, End: 16, ObsEnd: 16}}}
	for i := range n {
		tr.Tokens[i] = int32(i)
	}
	cases := []struct{ limit, wantLen, wantTurns int }{
		{100, 16, 3}, // fits: t itself
		{16, 16, 3},
		{15, 11, 2}, // cut after turn 1's completion
		{11, 11, 2},
		{10, 6, 1},
		{2, 6, 1}, // never before the first completion
	}
	for _, c := range cases {
		p := turnPrefix(tr, c.limit)
		if p.Len() != c.wantLen || len(p.Turns) != c.wantTurns || len(p.LossMask) != c.wantLen || len(p.Roles) != c.wantLen ||
			len(p.Logprobs) != c.wantLen || len(p.Versions) != c.wantLen {
			t.Errorf("limit %d: %d tokens, %d turns; want %d, %d", c.limit, p.Len(), len(p.Turns), c.wantLen, c.wantTurns)
			continue
		}
		if last := p.Turns[len(p.Turns)-1]; last.ObsEnd > p.Len() {
			t.Errorf("limit %d: last turn's observation ends at %d, past the prefix's %d tokens", c.limit, last.ObsEnd, p.Len())
		}
	}
	if tr.Len() != n || len(tr.Turns) != 3 || tr.Turns[1].ObsEnd != 14 {
		t.Fatal("turnPrefix changed the demonstration it cut")
	}
}

// A demonstration the template split into samples keeps only the samples that start before the
// cut, so every sample of the prefix lies within it.
func TestTurnPrefixSamples(t *testing.T) {
	n := 16
	tr := &traj.Trajectory{Tokens: make([]int32, n), Roles: make([]traj.Role, n), LossMask: make([]bool, n),
		Logprobs: make([]float32, n), Versions: make([]int32, n), Samples: []int{9},
		Turns: []traj.Turn{{Start: 4, End: 6, ObsEnd: 9}, {Start: 12, End: 14, ObsEnd: 16}}}
	if p := turnPrefix(tr, 10); p.Len() != 6 || p.Samples != nil || p.NumSamples() != 1 {
		t.Fatalf("cut at 6: %d tokens, samples %v", p.Len(), p.Samples)
	}
	if p := turnPrefix(tr, 15); p.Len() != 14 || len(p.Samples) != 1 || p.Samples[0] != 9 {
		t.Fatalf("cut at 14: %d tokens, samples %v", p.Len(), p.Samples)
	}
	if len(tr.Samples) != 1 {
		t.Fatal("turnPrefix changed the demonstration it cut")
	}
}
