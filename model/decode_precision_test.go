package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/agentrl/agentrl/model/kernels"
)

// decodeAll prefills slot 1 of a fresh cache with seq[:p], steps through the rest one token at a
// time beside a second sequence in slot 0 when others is set, and returns the logits after
// every position from p on.
func decodeAll(t *testing.T, m *Model, seq, other []int32, p int) [][]float32 {
	return decodeAllKV(t, m, F32, seq, other, p)
}

// decodeAllKV is decodeAll with a KV cache of precision kv.
func decodeAllKV(t *testing.T, m *Model, kv Precision, seq, other []int32, p int) [][]float32 {
	t.Helper()
	V := m.Cfg.Vocab
	c, err := m.NewKVCacheAs(2, len(seq), kv)
	if err != nil {
		t.Fatal(err)
	}
	row := make([]float32, 2*V)
	if err := m.Prefill(c, 1, seq[:p], row[:V]); err != nil {
		t.Fatal(err)
	}
	out := [][]float32{slices.Clone(row[:V])}
	if other != nil {
		if err := m.Prefill(c, 0, other[:1], row[:V]); err != nil {
			t.Fatal(err)
		}
	}
	for pos := p; pos < len(seq); pos++ {
		if other != nil && pos < len(other) {
			if err := m.Step(c, []int{0, 1}, []int32{other[pos], seq[pos]}, row); err != nil {
				t.Fatal(err)
			}
			out = append(out, slices.Clone(row[V:]))
			continue
		}
		if err := m.Step(c, []int{1}, seq[pos:pos+1], row[:V]); err != nil {
			t.Fatal(err)
		}
		out = append(out, slices.Clone(row[:V]))
	}
	return out
}

// TestDecodeBF16: decoding with bfloat16 weights is decoding with the weights rounded to
// bfloat16, bit for bit (the products are one float32 chain per element either way, below one k
// slice of the float32 kernels); it keeps the decode guarantees (prefill equals step-by-step
// decoding; a slot's logits do not depend on the slots beside it); its logits are close to the
// float32 ones without being them; and packing in F32 again restores the float32 logits.
func TestDecodeBF16(t *testing.T) {
	cfg := tinyConfig(false) // untied: rounding the head must not round the embedding lookup
	cfg.MaxSeq = 80
	m := newTestModel(t, cfg, 11)
	rng := rand.New(rand.NewPCG(12, 12))
	seq, other := randTokens(rng, 70, cfg.Vocab), randTokens(rng, 40, cfg.Vocab)

	want := decodeAll(t, m, seq, nil, 1)
	if err := m.PackDecodeWeightsAs(BF16); err != nil {
		t.Fatal(err)
	}
	if got := m.PackedPrecision(); got != BF16 {
		t.Fatalf("PackedPrecision() = %q after packing bf16", got)
	}
	got := decodeAll(t, m, seq, nil, 1)

	// The reference: the float32 decode path over weights rounded to bfloat16 (the embedding and
	// the norms unrounded, as the bfloat16 copy leaves them).
	rounded := m.Clone()
	for l := range rounded.Params.Layers {
		p := &rounded.Params.Layers[l]
		for _, w := range [][]float32{p.QKV, p.O, p.GateUp, p.Down} {
			kernels.RoundBF16(w)
		}
	}
	kernels.RoundBF16(rounded.Params.LMHead)
	rounded.PackDecodeWeights()
	ref := decodeAll(t, rounded, seq, nil, 1)

	maxDiff, same := 0.0, true
	for i := range got {
		if !slices.Equal(got[i], ref[i]) {
			t.Fatalf("position %d: bf16 logits differ from the float32 logits of the rounded weights", i)
		}
		for j := range got[i] {
			maxDiff = max(maxDiff, math.Abs(float64(got[i][j]-want[i][j])))
			same = same && got[i][j] == want[i][j]
		}
	}
	if same {
		t.Fatal("bf16 logits equal the float32 ones: the weights were not rounded")
	}
	if maxDiff > 0.05 {
		t.Fatalf("bf16 logits differ from the float32 ones by up to %g", maxDiff)
	}

	for _, p := range []int{5, 33, 70} {
		if g := decodeAll(t, m, seq, nil, p); !slices.Equal(g[len(g)-1], got[len(got)-1]) {
			t.Fatalf("bf16: a prefill of %d tokens then decoding gives other logits than decoding from 1", p)
		}
	}
	if g := decodeAll(t, m, seq, other, 1); !slices.EqualFunc(g, got, slices.Equal) {
		t.Fatal("bf16: a slot's logits change when another slot shares its steps")
	}

	m.PackDecodeWeights()
	if got := m.PackedPrecision(); got != F32 {
		t.Fatalf("PackedPrecision() = %q after packing f32", got)
	}
	if g := decodeAll(t, m, seq, nil, 1); !slices.EqualFunc(g, want, slices.Equal) {
		t.Fatal("packing f32 after bf16 does not restore the float32 logits")
	}
	if err := m.PackDecodeWeightsAs("fp8"); err == nil {
		t.Fatal("an unknown precision was accepted")
	}
}

// TestDecodeBF16KVCache: a bfloat16 KV cache, with float32 or bfloat16 weights, keeps the decode
// guarantees (prefill equals step-by-step decoding, through several attention blocks; a slot's
// logits do not depend on the slots beside it) and gives logits close to the float32 cache's
// without being them.
func TestDecodeBF16KVCache(t *testing.T) {
	cfg := tinyConfig(true)
	cfg.MaxSeq = 160
	m := newTestModel(t, cfg, 13)
	rng := rand.New(rand.NewPCG(14, 14))
	seq, other := randTokens(rng, 150, cfg.Vocab), randTokens(rng, 90, cfg.Vocab)
	want := decodeAll(t, m, seq, nil, 1)
	for _, w := range []Precision{F32, BF16} {
		if err := m.PackDecodeWeightsAs(w); err != nil {
			t.Fatal(err)
		}
		got := decodeAllKV(t, m, BF16, seq, nil, 1)
		maxDiff := 0.0
		for i := range got {
			for j := range got[i] {
				maxDiff = max(maxDiff, math.Abs(float64(got[i][j]-want[i][j])))
			}
		}
		if maxDiff == 0 || maxDiff > 0.05 {
			t.Fatalf("weights %s, bf16 KV cache: logits differ from the float32 ones by up to %g, want a small non-zero gap", w, maxDiff)
		}
		for _, p := range []int{5, 70, 149} {
			if g := decodeAllKV(t, m, BF16, seq, nil, p); !slices.Equal(g[len(g)-1], got[len(got)-1]) {
				t.Fatalf("weights %s, bf16 KV cache: a prefill of %d tokens then decoding gives other logits than decoding from 1", w, p)
			}
		}
		if g := decodeAllKV(t, m, BF16, seq, other, 1); !slices.EqualFunc(g, got, slices.Equal) {
			t.Fatalf("weights %s, bf16 KV cache: a slot's logits change when another slot shares its steps", w)
		}
	}
	if c, err := m.NewKVCacheAs(1, 8, BF16); err != nil || c.Precision() != BF16 {
		t.Fatalf("NewKVCacheAs(bf16): precision %v, %v", c.Precision(), err)
	}
	if _, err := m.NewKVCacheAs(1, 8, "fp8"); err == nil {
		t.Fatal("an unknown KV cache precision was accepted")
	}
}
