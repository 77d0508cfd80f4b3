package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// fullLogits returns the logits after every position of seq from the training forward pass
// (every position gets a target so the head computes all rows).
func fullLogits(t *testing.T, m *Model, seq []int32) []float32 {
	t.Helper()
	b := packedBatch(t, len(seq), seq)
	for i := range b.Targets {
		b.Targets[i] = 0
	}
	forward(t, m, b)
	return append([]float32(nil), m.train.logits[:len(seq)*m.Cfg.Vocab]...)
}

func closeLogits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-4 {
			t.Fatalf("%s: logit %d = %v, full forward gives %v", what, i, got[i], want[i])
		}
	}
}

func TestDecodeMatchesForward(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		seqLen  int
		prompts []int // prefill lengths, one per slot
	}{
		{"tiny", tinyConfig(true), 12, []int{1, 5, 12}},
		{"untied-long", func() Config { c := tinyConfig(false); c.MaxSeq = 160; return c }(), 150, []int{70, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestModel(t, tc.cfg, 3)
			rng := rand.New(rand.NewPCG(4, uint64(tc.seqLen)))
			V := tc.cfg.Vocab
			seqs := make([][]int32, len(tc.prompts))
			want := make([][]float32, len(tc.prompts))
			for s := range seqs {
				seqs[s] = randTokens(rng, tc.seqLen, V)
				want[s] = fullLogits(t, m, seqs[s])
			}
			c := m.NewKVCache(len(seqs)+1, tc.seqLen)
			logit := make([]float32, V)
			for s, p := range tc.prompts {
				if err := m.Prefill(c, s+1, seqs[s][:p], logit); err != nil { // slot 0 stays unused
					t.Fatal(err)
				}
				closeLogits(t, "prefill", logit, want[s][(p-1)*V:p*V])
			}
			// Then step every unfinished slot together, one token each, until all are done.
			all := make([]float32, len(seqs)*V)
			for {
				var slots []int
				var toks []int32
				var which []int
				for s := range seqs {
					if l := c.Len(s + 1); l < tc.seqLen {
						slots, toks, which = append(slots, s+1), append(toks, seqs[s][l]), append(which, s)
					}
				}
				if len(slots) == 0 {
					break
				}
				if err := m.Step(c, slots, toks, all[:len(slots)*V]); err != nil {
					t.Fatal(err)
				}
				for i, s := range which {
					p := c.Len(s+1) - 1
					closeLogits(t, "step", all[i*V:(i+1)*V], want[s][p*V:(p+1)*V])
				}
			}
			// Reset reuses a slot from scratch.
			c.Reset(1)
			if err := m.Prefill(c, 1, seqs[0][:3], logit); err != nil {
				t.Fatal(err)
			}
			closeLogits(t, "after reset", logit, want[0][2*V:3*V])
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	m := newTestModel(t, tinyConfig(true), 1)
	other := newTestModel(t, tinyConfig(false), 1)
	V := m.Cfg.Vocab
	c := m.NewKVCache(2, 4)
	logits := make([]float32, 2*V)
	if err := m.Prefill(c, 0, []int32{1, 2, 3}, logits[:V]); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"slot twice", m.Step(c, []int{1, 1}, []int32{1, 2}, logits)},
		{"slot range", m.Step(c, []int{2}, []int32{1}, logits[:V])},
		{"token range", m.Step(c, []int{1}, []int32{int32(V)}, logits[:V])},
		{"logits size", m.Step(c, []int{1}, []int32{1}, logits)},
		{"lengths", m.Step(c, []int{0, 1}, []int32{1}, logits)},
		{"overflow", m.Prefill(c, 0, []int32{1, 2}, logits[:V])},
		{"empty prefill", m.Prefill(c, 1, nil, logits[:V])},
		{"other config", other.Step(c, []int{1}, []int32{1}, logits[:V])},
		{"bad cache", m.Step(m.NewKVCache(0, 4), []int{0}, []int32{1}, logits[:V])},
		{"nil cache", m.Step(nil, []int{0}, []int32{1}, logits[:V])},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if c.Len(0) != 3 || c.Len(1) != 0 {
		t.Fatalf("failed calls changed the cache: lens %d %d", c.Len(0), c.Len(1))
	}
}
