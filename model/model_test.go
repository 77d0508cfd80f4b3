package model

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/optim"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig(2048).Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mod  func(c *Config)
		want string
	}{
		{"vocab", func(c *Config) { c.Vocab = 0 }, "vocabulary"},
		{"heads divide dim", func(c *Config) { c.Heads = 3 }, "multiple of heads"},
		{"kv heads", func(c *Config) { c.KVHeads = 3 }, "kv_heads"},
		{"more kv than q", func(c *Config) { c.KVHeads = 16 }, "kv_heads"},
		{"odd head dim", func(c *Config) { c.Dim, c.Heads, c.KVHeads = 24, 8, 8 }, "even"},
		{"theta", func(c *Config) { c.RopeTheta = 0 }, "rope_theta"},
		{"eps", func(c *Config) { c.NormEps = -1 }, "norm_eps"},
		{"maxseq", func(c *Config) { c.MaxSeq = -1 }, "max_seq"},
	} {
		c := DefaultConfig(100)
		tc.mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want mention of %q", tc.name, err, tc.want)
		}
		if _, err := New(c, 1); err == nil {
			t.Errorf("%s: New accepted the config", tc.name)
		}
		if _, err := NewZero(c); err == nil {
			t.Errorf("%s: NewZero accepted the config", tc.name)
		}
	}
}

// TestNewZero: the loader's constructor has New's layout with every weight zero.
func TestNewZero(t *testing.T) {
	cfg := DefaultConfig(100)
	z, err := NewZero(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := New(cfg, 1)
	if z.NumParams() != m.NumParams() || len(z.Params.Tensors()) != len(m.Params.Tensors()) {
		t.Fatalf("NewZero has %d weights in %d tensors, New %d in %d", z.NumParams(), len(z.Params.Tensors()), m.NumParams(), len(m.Params.Tensors()))
	}
	for i, v := range z.Params.Data {
		if v != 0 {
			t.Fatalf("weight %d = %v, want 0", i, v)
		}
	}
}

func TestTensorsHFLayout(t *testing.T) {
	for _, tied := range []bool{true, false} {
		cfg := tinyConfig(tied)
		m := newTestModel(t, cfg, 1)
		ts := m.Params.Tensors()
		if m.NumParams() != len(m.Params.Data) {
			t.Fatal("NumParams disagrees with Data")
		}
		off := 0
		byName := map[string]NamedTensor{}
		for _, tn := range ts {
			n := 1
			for _, s := range tn.Shape {
				n *= s
			}
			if tn.Offset != off || len(tn.Data) != n || &tn.Data[0] != &m.Params.Data[off] {
				t.Fatalf("%s: offset %d len %d, want %d and %d", tn.Name, tn.Offset, len(tn.Data), off, n)
			}
			off += n
			byName[tn.Name] = tn
		}
		if off != len(m.Params.Data) {
			t.Fatalf("tensors cover %d of %d", off, len(m.Params.Data))
		}
		hd := cfg.HeadDim()
		want := map[string][]int{
			"model.embed_tokens.weight":                      {cfg.Vocab, cfg.Dim},
			"model.layers.1.self_attn.q_proj.weight":         {cfg.Heads * hd, cfg.Dim},
			"model.layers.1.self_attn.k_proj.weight":         {cfg.KVHeads * hd, cfg.Dim},
			"model.layers.0.self_attn.v_proj.weight":         {cfg.KVHeads * hd, cfg.Dim},
			"model.layers.0.self_attn.o_proj.weight":         {cfg.Dim, cfg.Dim},
			"model.layers.0.mlp.gate_proj.weight":            {cfg.Hidden, cfg.Dim},
			"model.layers.0.mlp.up_proj.weight":              {cfg.Hidden, cfg.Dim},
			"model.layers.1.mlp.down_proj.weight":            {cfg.Dim, cfg.Hidden},
			"model.layers.1.input_layernorm.weight":          {cfg.Dim},
			"model.layers.1.post_attention_layernorm.weight": {cfg.Dim},
			"model.norm.weight":                              {cfg.Dim},
		}
		if !tied {
			want["lm_head.weight"] = []int{cfg.Vocab, cfg.Dim}
		}
		if _, ok := byName["lm_head.weight"]; ok == tied {
			t.Errorf("tied=%v: lm_head.weight present = %v", tied, ok)
		}
		if len(ts) != 2+9*cfg.Layers+map[bool]int{true: 0, false: 1}[tied] {
			t.Errorf("tied=%v: %d tensors", tied, len(ts))
		}
		for name, shape := range want {
			tn, ok := byName[name]
			if !ok || len(tn.Shape) != len(shape) || tn.Shape[0] != shape[0] || tn.Shape[len(shape)-1] != shape[len(shape)-1] {
				t.Errorf("%s: got %v, want shape %v", name, tn.Shape, shape)
			}
		}
		// Views used by the kernels point into the named tensors.
		if &m.Params.Layers[1].K[0] != &byName["model.layers.1.self_attn.k_proj.weight"].Data[0] {
			t.Error("K view is not k_proj")
		}
		if tied != (&m.Params.LMHead[0] == &m.Params.Embed[0]) {
			t.Error("LM head tying does not match the config")
		}
		// The matrices take weight decay, the norm gains do not.
		for _, tn := range ts {
			if gain := strings.HasSuffix(tn.Name, "norm.weight"); tn.Decays() == gain {
				t.Errorf("%s: Decays() = %v", tn.Name, tn.Decays())
			}
		}
	}
}

// decaySegments splits the parameters into AdamW segments as learn.DecaySegments does (learn
// imports model, so model's tests cannot use it).
func decaySegments(p *Params) []optim.Segment {
	var segs []optim.Segment
	for _, t := range p.Tensors() {
		if n := len(segs); n > 0 && segs[n-1].Decay == t.Decays() {
			segs[n-1].Len += len(t.Data)
			continue
		}
		segs = append(segs, optim.Segment{Off: t.Offset, Len: len(t.Data), Decay: t.Decays()})
	}
	return segs
}

// trainRun does steps of TrainCE + clipping + AdamW from seed and returns the weights.
func trainRun(t *testing.T, cfg Config, seed uint64, steps, workers int) ([]float32, []float32) {
	t.Helper()
	m := newTestModel(t, cfg, seed)
	m.SetWorkers(workers)
	opt, err := optim.NewAdamW(optim.DefaultConfig(), m.NumParams(), decaySegments(&m.Params))
	if err != nil {
		t.Fatal(err)
	}
	sched := optim.Schedule{PeakLR: 3e-3, MinLR: 3e-4, WarmupSteps: 3, TotalSteps: steps}
	rng := rand.New(rand.NewPCG(seed, 77))
	var losses []float32
	for s := 0; s < steps; s++ {
		var seqs [][]int32
		for range 6 {
			// A learnable pattern: each token is the previous plus one, modulo the vocabulary.
			start := rng.IntN(cfg.Vocab)
			seq := make([]int32, 3+rng.IntN(8))
			for j := range seq {
				seq[j] = int32((start + j) % cfg.Vocab)
			}
			seqs = append(seqs, seq)
		}
		b := packedBatch(t, 24, seqs...)
		m.ZeroGrad()
		loss, err := m.TrainCE(b)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, loss)
		optim.ClipGradNorm(m.Grads.Data, 1)
		if err := opt.Step(m.Params.Data, m.Grads.Data, sched.LR(s)); err != nil {
			t.Fatal(err)
		}
	}
	return m.Params.Data, losses
}

func TestTrainingDeterministicAndParallelEqualsSerial(t *testing.T) {
	cfg := tinyConfig(true)
	a, la := trainRun(t, cfg, 11, 6, 2)
	b, _ := trainRun(t, cfg, 11, 6, 2)
	c, _ := trainRun(t, cfg, 11, 6, 1)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different weights at %d: %v vs %v", i, a[i], b[i])
		}
		if a[i] != c[i] {
			t.Fatalf("2 workers vs 1: different weights at %d: %v vs %v", i, a[i], c[i])
		}
	}
	d, _ := trainRun(t, cfg, 12, 6, 2)
	same := true
	for i := range a {
		same = same && a[i] == d[i]
	}
	if same {
		t.Fatal("a different seed gave the same weights")
	}
	if la[0] != la[0] {
		t.Fatal("NaN loss")
	}
}

// TestTrainingLearns checks that the whole loop (forward, backward, clipping, AdamW) learns a
// deterministic successor pattern well below the uniform loss ln(13) ≈ 2.56.
func TestTrainingLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for a few hundred steps")
	}
	_, losses := trainRun(t, tinyConfig(true), 3, 300, 2)
	last := losses[len(losses)-1]
	if losses[0] < 2.3 || last > 0.3 {
		t.Fatalf("loss went from %v to %v; want from ≈2.56 to below 0.3", losses[0], last)
	}
}

func TestDecodeParallelEqualsSerial(t *testing.T) {
	cfg := tinyConfig(false)
	m1 := newTestModel(t, cfg, 9)
	m2 := m1.Clone()
	m1.SetWorkers(1)
	m2.SetWorkers(3)
	rng := rand.New(rand.NewPCG(1, 9))
	c1, c2 := m1.NewKVCache(8, 20), m2.NewKVCache(8, 20)
	V := cfg.Vocab
	l1, l2 := make([]float32, 8*V), make([]float32, 8*V)
	for s := 0; s < 8; s++ {
		p := randTokens(rng, 1+s, V)
		if err := m1.Prefill(c1, s, p, l1[:V]); err != nil {
			t.Fatal(err)
		}
		if err := m2.Prefill(c2, s, p, l2[:V]); err != nil {
			t.Fatal(err)
		}
	}
	slots := []int{7, 0, 3, 1, 2, 6, 5, 4}
	for range 5 {
		toks := randTokens(rng, 8, V)
		if err := m1.Step(c1, slots, toks, l1); err != nil {
			t.Fatal(err)
		}
		if err := m2.Step(c2, slots, toks, l2); err != nil {
			t.Fatal(err)
		}
		for i := range l1 {
			if l1[i] != l2[i] {
				t.Fatalf("logit %d: serial %v, parallel %v", i, l1[i], l2[i])
			}
		}
	}
}

func TestCloneAndCopyWeights(t *testing.T) {
	m := newTestModel(t, tinyConfig(true), 1)
	c := m.Clone()
	c.Params.Data[0] += 1
	if m.Params.Data[0] == c.Params.Data[0] {
		t.Fatal("Clone shares weights")
	}
	if err := c.CopyWeightsFrom(m); err != nil || c.Params.Data[0] != m.Params.Data[0] {
		t.Fatalf("CopyWeightsFrom: %v", err)
	}
	if err := c.CopyWeightsFrom(newTestModel(t, tinyConfig(false), 1)); err == nil {
		t.Fatal("CopyWeightsFrom accepted another config")
	}
	if &c.Params.LMHead[0] != &c.Params.Embed[0] || &c.Grads.LMHead[0] != &c.Grads.Embed[0] {
		t.Fatal("clone lost the tied head")
	}
}
