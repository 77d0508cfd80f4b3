package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// headConfig is a small model whose heads have hd dimensions: the presets' 16 and
// DefaultConfig's 32 take the fused attention kernels on amd64 (tinyConfig's 4 the Sgemm path).
func headConfig(hd int) Config {
	return Config{Vocab: 13, Dim: 2 * hd, Layers: 2, Heads: 2, KVHeads: 1, Hidden: 24, MaxSeq: 128,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}
}

// headSeqs are sequences whose lengths cross the fused kernels' tiles (12 query rows), blocks
// (48) and key panels (32), packed two or three to a row of 64.
func headSeqs(rng *rand.Rand, vocab int) [][]int32 {
	var seqs [][]int32
	for _, n := range []int{3, 50, 11, 13, 37, 64, 1, 49} {
		seqs = append(seqs, randTokens(rng, n, vocab))
	}
	return seqs
}

// TestHeadsGradient is TestModelGradient for heads of 16 and 32 dimensions over packed sequences
// of up to 64 tokens.
func TestHeadsGradient(t *testing.T) {
	for _, hd := range []int{16, 32} {
		t.Run(fmt.Sprintf("hd=%d", hd), func(t *testing.T) {
			m := newTestModel(t, headConfig(hd), 1)
			rng := rand.New(rand.NewPCG(2, uint64(hd)))
			// Weights large enough to exercise every nonlinearity, small enough that central
			// differences stay accurate (at 1.2/√dim the embedding's derivative changed sign
			// between steps of 4e-3 and 8e-3).
			std := 0.8 / math.Sqrt(float64(m.Cfg.Dim))
			for _, tn := range m.Params.Tensors() {
				for i := range tn.Data {
					if len(tn.Shape) == 2 {
						tn.Data[i] = float32(rng.NormFloat64() * std)
					} else {
						tn.Data[i] = 1 + float32(rng.NormFloat64()*0.2)
					}
				}
			}
			b := packedBatch(t, 64, headSeqs(rng, m.Cfg.Vocab)...)
			a, c, loss := policyLoss(t, m, b, rng)
			loss()
			m.ZeroGrad()
			if err := m.Backward(b, a, c); err != nil {
				t.Fatal(err)
			}
			checkDirectionalDerivatives(t, rng, m.Params.Tensors(), m.Grads.Tensors(), loss, false, "")
		})
	}
}

// TestHeadsPackedMatchesAlone is TestPackedMatchesAlone for heads of 16 and 32 dimensions: a
// sequence's logprobs and entropies do not depend on what shares its row.
func TestHeadsPackedMatchesAlone(t *testing.T) {
	for _, hd := range []int{16, 32} {
		m := newTestModel(t, headConfig(hd), 5)
		seqs := headSeqs(rand.New(rand.NewPCG(6, 6)), m.Cfg.Vocab)
		packed := packedBatch(t, 64, seqs...)
		lp, ent := forward(t, m, packed)
		for _, s := range seqs {
			alp, aent := forward(t, m, packedBatch(t, len(s), s))
			for j := range s {
				i := findToken(packed, s, j)
				if math.Abs(float64(alp[j]-lp[i])) > 1e-5 || math.Abs(float64(aent[j]-ent[i])) > 1e-5 {
					t.Fatalf("hd=%d, sequence of %d, position %d: alone (%v, %v), packed (%v, %v)", hd, len(s), j, alp[j], aent[j], lp[i], ent[i])
				}
			}
		}
	}
}

// TestHeadsParallelEqualsSerial: training with heads of 16 and 32 dimensions gives the same
// weights bit for bit on one worker and on three.
func TestHeadsParallelEqualsSerial(t *testing.T) {
	for _, hd := range []int{16, 32} {
		a, _ := trainRun(t, headConfig(hd), 11, 4, 3)
		b, _ := trainRun(t, headConfig(hd), 11, 4, 1)
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("hd=%d: 3 workers vs 1: different weights at %d: %v vs %v", hd, i, a[i], b[i])
			}
		}
	}
}

// TestHeadsDecodeMatchesForward is TestDecodeMatchesForward for heads of 16 and 32 dimensions:
// the learner's forward (the fused attention kernels) and decoding (kernels.AttentionCached)
// give the same logits to within 1e-4, a prompt prefilled and the rest stepped one at a time.
func TestHeadsDecodeMatchesForward(t *testing.T) {
	for _, hd := range []int{16, 32} {
		m := newTestModel(t, headConfig(hd), 3)
		V := m.Cfg.Vocab
		seq := randTokens(rand.New(rand.NewPCG(4, uint64(hd))), 100, V)
		want := fullLogits(t, m, seq)
		c := m.NewKVCache(1, len(seq))
		logits := make([]float32, V)
		const prompt = 37
		if err := m.Prefill(c, 0, seq[:prompt], logits); err != nil {
			t.Fatal(err)
		}
		closeLogits(t, fmt.Sprintf("hd=%d prefill", hd), logits, want[(prompt-1)*V:prompt*V])
		for p := prompt; p < len(seq); p++ {
			if err := m.Step(c, []int{0}, seq[p:p+1], logits); err != nil {
				t.Fatal(err)
			}
			closeLogits(t, fmt.Sprintf("hd=%d step %d", hd, p), logits, want[p*V:(p+1)*V])
		}
	}
}
