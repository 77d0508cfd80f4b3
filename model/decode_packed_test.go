package model

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestDecodeLongContextBitwise: past several attention blocks and key chunks (600 tokens), a
// prefill of the whole sequence, a prefill cut in two, and token-by-token decoding give the same
// logits bit for bit, with and without packed weights, and the packed weights follow a repack.
func TestDecodeLongContextBitwise(t *testing.T) {
	cfg := Config{Vocab: 64, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 48, MaxSeq: 640,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}
	m := newTestModel(t, cfg, 5)
	rng := rand.New(rand.NewPCG(6, 6))
	const T = 600
	seq := randTokens(rng, T, cfg.Vocab)
	V := cfg.Vocab
	// logitsAfter returns the logits after each position in at, decoding seq from a prefill of
	// its first p tokens (cut in two at cut when cut > 0) and then one token per Step.
	logitsAfter := func(m *Model, p, cut int, at []int) [][]float32 {
		c := m.NewKVCache(2, T)
		row := make([]float32, V)
		if cut > 0 {
			if err := m.Prefill(c, 1, seq[:cut], row); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.Prefill(c, 1, seq[cut:p], row); err != nil {
			t.Fatal(err)
		}
		var out [][]float32
		if slices.Contains(at, p) {
			out = append(out, slices.Clone(row))
		}
		for pos := p; pos < T; pos++ {
			if err := m.Step(c, []int{1}, seq[pos:pos+1], row); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(at, pos+1) {
				out = append(out, slices.Clone(row))
			}
		}
		return out
	}
	at := []int{T}
	for _, packed := range []bool{false, true} {
		if packed {
			m.PackDecodeWeights()
		}
		want := logitsAfter(m, T, 0, at)
		for _, tc := range [][2]int{{3, 0}, {400, 130}, {T, 300}} {
			got := logitsAfter(m, tc[0], tc[1], at)
			if !slices.Equal(got[0], want[0]) {
				t.Fatalf("packed=%v: logits after prefill %d (cut at %d) and decoding differ from one prefill", packed, tc[0], tc[1])
			}
		}
	}
	unpacked := m.Clone()
	if !slices.Equal(logitsAfter(unpacked, 500, 0, at)[0], logitsAfter(m, 500, 0, at)[0]) {
		t.Fatal("packed and unpacked weights give different logits")
	}
	// New weights take effect after a repack.
	for i := range m.Params.Data {
		m.Params.Data[i] *= 1.5
	}
	unpacked.CopyWeightsFrom(m)
	m.PackDecodeWeights()
	if !slices.Equal(logitsAfter(unpacked, 590, 0, at)[0], logitsAfter(m, 590, 0, at)[0]) {
		t.Fatal("after changing the weights and repacking, packed logits differ from unpacked ones")
	}
}
