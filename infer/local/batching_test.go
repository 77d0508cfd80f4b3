package local

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/agentrl/agentrl/model"
)

// Determinism of a whole training run rests on this: a sequence's logits must not depend on
// which other sequences share its decode step, nor on whether its tokens were prefilled or
// decoded one by one, bit for bit. Otherwise the scheduling of concurrent episodes would change
// sampled tokens. The engine decodes with packed weights (model.PackDecodeWeights); both forms
// are checked.
func TestDecodeIsBitwiseIndependentOfBatching(t *testing.T) {
	for _, packed := range []bool{false, true} {
		t.Run(map[bool]string{false: "unpacked", true: "packed"}[packed], func(t *testing.T) {
			testDecodeBatching(t, packed)
		})
	}
}

func testDecodeBatching(t *testing.T, packed bool) {
	cfg := model.Config{Vocab: 256, Dim: 128, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 336, MaxSeq: 128,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}
	m, err := model.New(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	if packed {
		m.PackDecodeWeights()
	}
	const n = 19
	rng := rand.New(rand.NewPCG(1, 2))
	prompts := make([][]int32, n)
	for i := range prompts {
		prompts[i] = make([]int32, 5+i)
		for j := range prompts[i] {
			prompts[i][j] = int32(rng.IntN(cfg.Vocab))
		}
	}
	V := cfg.Vocab
	row := make([]float32, V)
	batched := m.NewKVCache(n, 64)
	slots := make([]int, n)
	toks := make([]int32, n)
	for i, p := range prompts {
		if err := m.Prefill(batched, i, p, row); err != nil {
			t.Fatal(err)
		}
		slots[i], toks[i] = i, int32(i*7%V)
	}
	all := make([]float32, n*V)
	if err := m.Step(batched, slots, toks, all); err != nil {
		t.Fatal(err)
	}
	for i, p := range prompts {
		alone := m.NewKVCache(1, 64)
		if err := m.Prefill(alone, 0, p, row); err != nil {
			t.Fatal(err)
		}
		one := make([]float32, V)
		if err := m.Step(alone, []int{0}, toks[i:i+1], one); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(one, all[i*V:(i+1)*V]) {
			t.Fatalf("sequence %d: logits decoded alone differ from logits decoded in a batch of %d", i, n)
		}
		whole := m.NewKVCache(1, 64)
		if err := m.Prefill(whole, 0, append(slices.Clone(p), toks[i]), row); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(one, row) {
			t.Fatalf("sequence %d: logits after prefill differ from logits after a decode step", i)
		}
		// A prompt prefilled in two chunks (a warm slot extended by the next turn) gives the
		// same logits as one prefill.
		chunked := m.NewKVCache(1, 64)
		whole2 := append(slices.Clone(p), toks[i])
		if err := m.Prefill(chunked, 0, whole2[:3], row); err != nil {
			t.Fatal(err)
		}
		if err := m.Prefill(chunked, 0, whole2[3:], row); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(one, row) {
			t.Fatalf("sequence %d: logits after a chunked prefill differ", i)
		}
	}
}
