package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

var allTargets = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// loraModel is a family model with adapters on every target, both A and B random (a fresh B is
// zero, which would hide A's gradient).
func loraModel(t *testing.T, cfg Config, targets []string) *Model {
	t.Helper()
	m := newTestModel(t, cfg, 3)
	rng := rand.New(rand.NewPCG(4, 4))
	randomizeWeights(m, rng)
	if err := m.AddLoRA(LoRAConfig{Rank: 3, Alpha: 6, Targets: targets}, 5); err != nil {
		t.Fatal(err)
	}
	for i := range m.LoRA.Data {
		m.LoRA.Data[i] = float32(rng.NormFloat64() * 0.3)
	}
	return m
}

func TestLoRAConfigValidate(t *testing.T) {
	c := tinyConfig(true)
	for _, bad := range []LoRAConfig{
		{Rank: 0, Alpha: 1, Targets: allTargets},
		{Rank: 2, Alpha: 0, Targets: allTargets},
		{Rank: 2, Alpha: 1, Dropout: 0.05, Targets: allTargets},
		{Rank: 2, Alpha: 1},
		{Rank: 2, Alpha: 1, Targets: []string{"lm_head"}},
		{Rank: 2, Alpha: 1, Targets: []string{"q_proj", "q_proj"}},
	} {
		if err := bad.Validate(c); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestLoRAGradient checks the adapters' gradients against finite differences of the whole
// model, and that the frozen base weights get none.
func TestLoRAGradient(t *testing.T) {
	for name, cfg := range familyConfigs() {
		m := loraModel(t, cfg, allTargets)
		rng := rand.New(rand.NewPCG(2, 3))
		V := cfg.Vocab
		b := packedBatch(t, 9, randTokens(rng, 3, V), randTokens(rng, 6, V), randTokens(rng, 9, V))
		a, bb, loss := policyLoss(t, m, b, rng)
		loss()
		m.ZeroGrad()
		m.LoRA.ZeroGrad()
		if err := m.Backward(b, a, bb); err != nil {
			t.Fatal(err)
		}
		for i, g := range m.Grads.Data {
			if g != 0 {
				t.Fatalf("%s: frozen weight %d got gradient %v", name, i, g)
			}
		}
		// Richardson-extrapolated: the random weights curve the loss enough within a step of
		// 2e-3 to move a plain central difference by several percent.
		checkDirectionalDerivatives(t, rng, m.LoRA.Tensors(), m.LoRA.GradTensors(), loss, true, name+" ")
	}
}

// TestLoRAMergedAndDecode checks that the merged model computes what the model with adapters
// computes, that decoding with adapters (merged into the packed weights) gives the forward
// pass's logits, that a fresh adapter changes nothing, and that Clone keeps the adapters.
func TestLoRAMergedAndDecode(t *testing.T) {
	for name, cfg := range familyConfigs() {
		m := loraModel(t, cfg, []string{"q_proj", "v_proj", "o_proj", "down_proj"})
		rng := rand.New(rand.NewPCG(9, 9))
		seq := randTokens(rng, 12, cfg.Vocab)
		want := fullLogits(t, m, seq)
		merged := fullLogits(t, m.Merged(), seq)
		cloned := fullLogits(t, m.Clone(), seq)
		plain := newTestModel(t, cfg, 3)
		randomizeWeights(plain, rand.New(rand.NewPCG(4, 4)))
		base := fullLogits(t, plain, seq)
		var moved bool
		for i := range want {
			if math.Abs(float64(merged[i]-want[i])) > 1e-4 || cloned[i] != want[i] {
				t.Fatalf("%s: logit %d: adapters %v, merged %v, clone %v", name, i, want[i], merged[i], cloned[i])
			}
			moved = moved || math.Abs(float64(base[i]-want[i])) > 1e-3
		}
		if !moved {
			t.Fatalf("%s: the adapters change no logit", name)
		}
		c := m.NewKVCache(1, 12)
		logit := make([]float32, cfg.Vocab)
		for i, tok := range seq {
			if err := m.Step(c, []int{0}, []int32{tok}, logit); err != nil {
				t.Fatal(err)
			}
			closeLogits(t, name+" decode with adapters", logit, want[i*cfg.Vocab:(i+1)*cfg.Vocab])
		}
		// A fresh adapter (B = 0) is the identity.
		fresh := newTestModel(t, cfg, 3)
		randomizeWeights(fresh, rand.New(rand.NewPCG(4, 4)))
		if err := fresh.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, Targets: allTargets}, 1); err != nil {
			t.Fatal(err)
		}
		got := fullLogits(t, fresh, seq)
		for i := range base {
			if math.Abs(float64(got[i]-base[i])) > 1e-5 {
				t.Fatalf("%s: a fresh adapter moved logit %d from %v to %v", name, i, base[i], got[i])
			}
		}
	}
}

func TestLoRAParamsAndMemory(t *testing.T) {
	for name, cfg := range familyConfigs() {
		m := newTestModel(t, cfg, 1)
		l := LoRAConfig{Rank: 3, Alpha: 6, Targets: []string{"q_proj", "o_proj", "up_proj"}}
		if err := m.AddLoRA(l, 1); err != nil {
			t.Fatal(err)
		}
		if got := cfg.LoRAParams(l); got != int64(len(m.LoRA.Data)) {
			t.Errorf("%s: LoRAParams %d, the adapters hold %d", name, got, len(m.LoRA.Data))
		}
		full := cfg.EstimateMemory(MemoryUse{Train: true, TrainTokens: 10})
		lora := cfg.EstimateMemory(MemoryUse{Train: true, TrainTokens: 10, LoRA: &l})
		if lora.Optimizer != 8*int64(len(m.LoRA.Data)) || lora.Grads != 4*int64(len(m.LoRA.Data)) || lora.Total() >= full.Total() {
			t.Errorf("%s: LoRA estimate %+v, full %+v", name, lora, full)
		}
	}
}

// TestLoRAZeroGradSkipsFrozenBase: with adapters, ZeroGrad clears the adapters' gradients and
// writes none of the frozen base's (Backward writes none of them, TestLoRAGradient), so a LoRA
// step never makes resident a gradient buffer as large as the weights.
func TestLoRAZeroGradSkipsFrozenBase(t *testing.T) {
	m := loraModel(t, tinyConfig(true), allTargets)
	const sentinel = 7
	for i := range m.Grads.Data {
		m.Grads.Data[i] = sentinel
	}
	for i := range m.LoRA.Grads {
		m.LoRA.Grads[i] = 1
	}
	m.ZeroGrad()
	for i, g := range m.LoRA.Grads {
		if g != 0 {
			t.Fatalf("adapter gradient %d is %v after ZeroGrad", i, g)
		}
	}
	for i, g := range m.Grads.Data {
		if g != sentinel {
			t.Fatalf("ZeroGrad wrote the frozen base's gradient %d (%v)", i, g)
		}
	}
	// Without adapters every gradient is cleared.
	full := newTestModel(t, tinyConfig(true), 3)
	for i := range full.Grads.Data {
		full.Grads.Data[i] = sentinel
	}
	full.ZeroGrad()
	for i, g := range full.Grads.Data {
		if g != 0 {
			t.Fatalf("gradient %d is %v after ZeroGrad", i, g)
		}
	}
}
