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

// TestDecodeSplitEqualsSerial: a decode step split among goroutines (one region of phases,
// products cut into parts, batch 1 included) gives the bits of the same step on one, with
// packed weights large enough that every product is cut and SwiGLU of one row is cut into
// columns; in float32 and with bfloat16 weights and KV cache (kernels.SgemmBF16Part).
func TestDecodeSplitEqualsSerial(t *testing.T) {
	defer func(on bool) { stepTuneOn = on }(stepTuneOn)
	stepTuneOn = false // split every batch-1 step
	cfg := Config{Vocab: 512, Dim: 128, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 688, MaxSeq: 64,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}
	for _, prec := range []Precision{F32, BF16} {
		serial := newTestModel(t, cfg, 9)
		split := serial.Clone()
		serial.SetWorkers(1)
		split.SetWorkers(3)
		for _, m := range []*Model{serial, split} {
			if err := m.PackDecodeWeightsAs(prec); err != nil {
				t.Fatal(err)
			}
		}
		rng := rand.New(rand.NewPCG(2, 9))
		const slots = 8
		c1, err1 := serial.NewKVCacheAs(slots, 64, prec)
		c2, err2 := split.NewKVCacheAs(slots, 64, prec)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		V := cfg.Vocab
		l1, l2 := make([]float32, slots*V), make([]float32, slots*V)
		same := func(what string, n int) {
			t.Helper()
			if !slices.Equal(l1[:n*V], l2[:n*V]) {
				t.Fatalf("%s, %s: split logits differ from serial ones", prec, what)
			}
		}
		for s := range slots {
			p := randTokens(rng, 3+5*s, V)
			if err := serial.Prefill(c1, s, p, l1[:V]); err != nil {
				t.Fatal(err)
			}
			if err := split.Prefill(c2, s, p, l2[:V]); err != nil {
				t.Fatal(err)
			}
			same("prefill", 1)
		}
		for step := range 6 {
			ids := []int{5, 0, 3, 1, 2, 7, 6, 4}[:1+step%2*7] // batch 1, then 8
			toks := randTokens(rng, len(ids), V)
			if err := serial.Step(c1, ids, toks, l1[:len(ids)*V]); err != nil {
				t.Fatal(err)
			}
			if err := split.Step(c2, ids, toks, l2[:len(ids)*V]); err != nil {
				t.Fatal(err)
			}
			same("step", len(ids))
		}
	}
}

// TestDecodeStepAllocates: a batch-1 step on one goroutine over packed weights allocates
// nothing; its scratch and its list of phases live in the workspace from one step to the next.
func TestDecodeStepAllocates(t *testing.T) {
	defer func(on bool) { stepTuneOn = on }(stepTuneOn)
	stepTuneOn = false
	cfg := Config{Vocab: 512, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 192, MaxSeq: 256,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}
	m := newTestModel(t, cfg, 3)
	m.SetWorkers(1)
	m.PackDecodeWeights()
	c := m.NewKVCache(1, 256)
	logits := make([]float32, cfg.Vocab)
	if err := m.Prefill(c, 0, []int32{1, 2, 3}, logits); err != nil {
		t.Fatal(err)
	}
	tok := []int32{4}
	allocs := testing.AllocsPerRun(100, func() {
		if err := m.Step(c, []int{0}, tok, logits); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("a batch-1 step allocates %v times, want none", allocs)
	}
}

// Each model's packed weights have their own step tuners, one per precision, kept across
// repacking (a weight update): a tuner shared by models of different sizes compared one model's
// split steps with another's unsplit ones.
func TestStepTunersPerModel(t *testing.T) {
	cfg := Config{Vocab: 64, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, Hidden: 48, MaxSeq: 16,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}
	a, b := newTestModel(t, cfg, 1), newTestModel(t, cfg, 2)
	a.PackDecodeWeights()
	b.PackDecodeWeights()
	first := a.dec.packed.tune
	if first == b.dec.packed.tune {
		t.Fatal("two models share a step tuner")
	}
	if err := a.PackDecodeWeightsAs(BF16); err != nil {
		t.Fatal(err)
	}
	if a.dec.packed.tune == first {
		t.Fatal("float32 and bfloat16 steps share a tuner")
	}
	a.PackDecodeWeights()
	if a.dec.packed.tune != first {
		t.Fatal("repacking the weights replaced the model's tuner")
	}
}
