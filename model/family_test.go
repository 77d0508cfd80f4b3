package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// familyConfigs are tiny models of every option the model families add, each alone and
// together: Qwen3's per-head q/k norms with a head width that is not Dim/Heads, Qwen2's q/k/v
// biases with a window from layer 1, Llama's attention_bias and mlp_bias with Llama 3's RoPE
// scaling, and Mistral's sliding window shorter than the sequences.
func familyConfigs() map[string]Config {
	base := tinyConfig(false)
	base.MaxSeq = 40
	qwen3 := base
	qwen3.Family, qwen3.QKNorm, qwen3.HeadDimension, qwen3.TieEmbeddings = FamilyQwen3, true, 6, true
	qwen2 := base
	qwen2.Family, qwen2.QKVBias, qwen2.SlidingWindow, qwen2.WindowFrom = FamilyQwen2, true, 3, 1
	llama := base
	llama.Family, llama.QKVBias, llama.OBias, llama.MLPBias = FamilyLlama, true, true, true
	llama.RopeScaling = RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 16}
	llama.RopeTheta = 500000
	mistral := base
	mistral.Family, mistral.SlidingWindow, mistral.KVHeads = FamilyMistral, 4, 1
	return map[string]Config{"qwen3": qwen3, "qwen2": qwen2, "llama3": llama, "mistral": mistral}
}

// randomizeWeights draws every weight at a scale that exercises the nonlinearities: matrices
// N(0, 0.3²), norm gains 1 + N(0, 0.2²), biases N(0, 0.3²).
func randomizeWeights(m *Model, rng *rand.Rand) {
	for _, tn := range m.Params.Tensors() {
		for i := range tn.Data {
			switch {
			case tn.Bias() || len(tn.Shape) == 2:
				tn.Data[i] = float32(rng.NormFloat64() * 0.3)
			default:
				tn.Data[i] = 1 + float32(rng.NormFloat64()*0.2)
			}
		}
	}
}

func TestFamilyConfigsValidate(t *testing.T) {
	for name, c := range familyConfigs() {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := map[string]func(*Config){
		"qwen2 without biases": func(c *Config) { c.Family, c.QKVBias = FamilyQwen2, false },
		"qwen3 without norms":  func(c *Config) { c.Family = FamilyQwen3 },
		"llama q/k norms":      func(c *Config) { c.QKNorm = true },
		"llama window":         func(c *Config) { c.SlidingWindow = 4 },
		"llama qkv bias alone": func(c *Config) { c.QKVBias = true },
		"mistral biases":       func(c *Config) { c.Family, c.QKVBias, c.OBias = FamilyMistral, true, true },
		"unknown family":       func(c *Config) { c.Family = "gemma" },
		"other rope scaling":   func(c *Config) { c.RopeScaling = RopeScaling{Type: "yarn", Factor: 4} },
		"llama3 scaling bad":   func(c *Config) { c.RopeScaling = RopeScaling{Type: "llama3", Factor: 8} },
		"odd head dim":         func(c *Config) { c.HeadDimension = 5 },
		"window layer":         func(c *Config) { c.Family, c.SlidingWindow, c.WindowFrom = FamilyMistral, 4, 1 },
	}
	for name, f := range bad {
		c := tinyConfig(true)
		f(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Without head_dim the width must still divide; with it, it need not.
	c := tinyConfig(true)
	c.Dim = 18
	if c.Validate() == nil {
		t.Error("dim 18 over 4 heads accepted without head_dim")
	}
	c.HeadDimension = 6
	c.Family, c.QKNorm = FamilyQwen3, true
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}

func TestFamilyTensorShapes(t *testing.T) {
	for name, c := range familyConfigs() {
		m := newTestModel(t, c, 1)
		got, want := c.TensorShapes(), m.Params.Tensors()
		if len(got) != len(want) {
			t.Fatalf("%s: %d shapes, %d tensors", name, len(got), len(want))
		}
		n := 0
		for i := range got {
			if got[i].Name != want[i].Name || got[i].Offset != want[i].Offset || len(got[i].Shape) != len(want[i].Shape) {
				t.Fatalf("%s: shape %d %+v vs tensor %s", name, i, got[i], want[i].Name)
			}
			n += len(want[i].Data)
		}
		if int64(n) != c.NumParams() || n != m.NumParams() {
			t.Errorf("%s: tensors hold %d, NumParams %d, model %d", name, n, c.NumParams(), m.NumParams())
		}
	}
}

// TestFamilyGradient is TestModelGradient for each family's options, on both the thin and the
// general path.
func TestFamilyGradient(t *testing.T) {
	for name, cfg := range familyConfigs() {
		for _, general := range []bool{false, true} {
			thinOff = general
			m := newTestModel(t, cfg, 1)
			rng := rand.New(rand.NewPCG(2, 3))
			randomizeWeights(m, rng)
			V := cfg.Vocab
			b := packedBatch(t, 9, randTokens(rng, 3, V), randTokens(rng, 6, V), randTokens(rng, 9, V), randTokens(rng, 2, V))
			a, bb, loss := policyLoss(t, m, b, rng)
			loss()
			m.ZeroGrad()
			if err := m.Backward(b, a, bb); err != nil {
				t.Fatal(err)
			}
			checkDirectionalDerivatives(t, rng, m.Params.Tensors(), m.Grads.Tensors(), loss, false, fmt.Sprintf("%s general=%v ", name, general))
		}
	}
	thinOff = false
}

// TestFamilyDecodeMatchesForward checks, for each family, that prefilling and stepping several
// slots together (f32 and bf16 packed weights and caches) gives the full forward pass's logits,
// that a prefill gives bit for bit what step-by-step decoding gives, and that a slot's logits do
// not depend on the slots beside it.
func TestFamilyDecodeMatchesForward(t *testing.T) {
	const seqLen = 14
	for name, cfg := range familyConfigs() {
		m := newTestModel(t, cfg, 5)
		rng := rand.New(rand.NewPCG(6, 6))
		randomizeWeights(m, rng)
		V := cfg.Vocab
		seqs := [][]int32{randTokens(rng, seqLen, V), randTokens(rng, seqLen, V), randTokens(rng, seqLen, V)}
		want := make([][]float32, len(seqs))
		for s := range seqs {
			want[s] = fullLogits(t, m, seqs[s])
		}
		for _, prec := range []Precision{F32, BF16} {
			for _, packed := range []bool{false, true} {
				if packed {
					if err := m.PackDecodeWeightsAs(prec); err != nil {
						t.Fatal(err)
					}
				} else {
					m.dec.packed = nil
				}
				tol := 1e-4
				if prec == BF16 {
					tol = 0.1
				}
				c, err := m.NewKVCacheAs(len(seqs), seqLen, prec)
				if err != nil {
					t.Fatal(err)
				}
				// Slot s is prefilled with s+1 tokens, then all step together.
				logit := make([]float32, V)
				for s := range seqs {
					if err := m.Prefill(c, s, seqs[s][:s+1], logit); err != nil {
						t.Fatal(err)
					}
				}
				all := make([]float32, len(seqs)*V)
				stepped := make([][]float32, len(seqs))
				for s := range seqs {
					stepped[s] = make([]float32, seqLen*V)
				}
				for {
					var slots []int
					var toks []int32
					for s := range seqs {
						if l := c.Len(s); l < seqLen {
							slots, toks = append(slots, s), append(toks, seqs[s][l])
						}
					}
					if len(slots) == 0 {
						break
					}
					if err := m.Step(c, slots, toks, all[:len(slots)*V]); err != nil {
						t.Fatal(err)
					}
					for i, s := range slots {
						p := c.Len(s) - 1
						copy(stepped[s][p*V:(p+1)*V], all[i*V:(i+1)*V])
						for j := range V {
							if d := math.Abs(float64(all[i*V+j] - want[s][p*V+j])); d > tol {
								t.Fatalf("%s %s packed=%v: slot %d position %d logit %d = %v, forward %v", name, prec, packed, s, p, j, all[i*V+j], want[s][p*V+j])
							}
						}
					}
				}
				// One slot alone, prefilled whole: bit for bit its stepped logits at the end.
				alone, _ := m.NewKVCacheAs(1, seqLen, prec)
				for s := range seqs {
					alone.Reset(0)
					if err := m.Prefill(alone, 0, seqs[s], logit); err != nil {
						t.Fatal(err)
					}
					last := stepped[s][(seqLen-1)*V:]
					for j := range V {
						if logit[j] != last[j] {
							t.Fatalf("%s %s packed=%v: slot %d prefilled alone gives logit %d = %v, stepped beside others %v", name, prec, packed, s, j, logit[j], last[j])
						}
					}
				}
			}
		}
	}
}

func TestEstimateMemoryMatchesAllocation(t *testing.T) {
	for name, cfg := range familyConfigs() {
		m := newTestModel(t, cfg, 1)
		e := cfg.EstimateMemory(MemoryUse{Train: true, TrainTokens: 18, CacheSlots: 2, CacheLen: 16, DecodeWeights: F32})
		if e.Weights != int64(4*len(m.Params.Data)) || e.Grads != e.Weights || e.Optimizer != 2*e.Weights {
			t.Errorf("%s: %+v for %d weights", name, e, len(m.Params.Data))
		}
		if got := int64(4 * (len(m.NewKVCache(2, 16).k) + len(m.NewKVCache(2, 16).v))); e.KVCache != got {
			t.Errorf("%s: KV cache estimate %d, allocated %d", name, e.KVCache, got)
		}
		// The training workspace after a step of 2×9 tokens, all with targets.
		rng := rand.New(rand.NewPCG(1, 1))
		b := packedBatch(t, 9, randTokens(rng, 9, cfg.Vocab), randTokens(rng, 9, cfg.Vocab))
		for i := range b.Targets {
			b.Targets[i] = 0
		}
		forward(t, m, b)
		w := &m.train
		var held int
		for _, s := range [][]float32{w.res, w.ln1, w.rstd1, w.qkv, w.lse, w.atty, w.mid, w.ln2, w.rstd2, w.gu, w.sw, w.lnf, w.rstdf,
			w.dres, w.dln, w.dqkv, w.datty, w.dgu, w.dsw, w.qkRaw, w.qkRstd, w.logits, w.lnfT} {
			held += 4 * len(s)
		}
		if d := float64(e.Activations-int64(held)) / float64(held); d < 0 || d > 0.35 {
			t.Errorf("%s: activation estimate %d, the workspace holds %d", name, e.Activations, held)
		}
	}
	if parseMemTotal([]byte("MemTotal:       24576000 kB\nMemFree: 1 kB\n")) != 24576000<<10 || parseMemTotal([]byte("junk")) != 0 {
		t.Error("parseMemTotal")
	}
}
