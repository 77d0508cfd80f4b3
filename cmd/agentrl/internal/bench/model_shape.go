package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/optim"
)

// NamedShapes are the shapes `agentrl bench model --shape` knows by name: the published
// config.json of each model (vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, head_dim, intermediate_size, rope_theta, rms_norm_eps,
// tie_word_embeddings, attention biases and q/k norms). The weights are random.
var NamedShapes = map[string]model.Config{
	// Qwen/Qwen3-0.6B: head_dim 128 (hidden/heads is 64), q/k RMSNorm, tied embeddings.
	"qwen3-0.6b": {Family: model.FamilyQwen3, Vocab: 151936, Dim: 1024, Layers: 28, Heads: 16, KVHeads: 8,
		HeadDimension: 128, Hidden: 3072, MaxSeq: 40960, RopeTheta: 1000000, NormEps: 1e-6, TieEmbeddings: true, QKNorm: true},
	// HuggingFaceTB/SmolLM2-360M: Llama-shaped, 15 heads over 5 KV heads, tied embeddings.
	"smollm2-360m": {Family: model.FamilyLlama, Vocab: 49152, Dim: 960, Layers: 32, Heads: 15, KVHeads: 5,
		Hidden: 2560, MaxSeq: 8192, RopeTheta: 100000, NormEps: 1e-5, TieEmbeddings: true},
	// Qwen/Qwen2.5-0.5B: q/k/v biases, tied embeddings.
	"qwen2.5-0.5b": {Family: model.FamilyQwen2, Vocab: 151936, Dim: 896, Layers: 24, Heads: 14, KVHeads: 2,
		Hidden: 4864, MaxSeq: 32768, RopeTheta: 1000000, NormEps: 1e-6, TieEmbeddings: true, QKVBias: true},
	// Qwen/Qwen2.5-1.5B: q/k/v biases, tied embeddings.
	"qwen2.5-1.5b": {Family: model.FamilyQwen2, Vocab: 151936, Dim: 1536, Layers: 28, Heads: 12, KVHeads: 2,
		Hidden: 8960, MaxSeq: 32768, RopeTheta: 1000000, NormEps: 1e-6, TieEmbeddings: true, QKVBias: true},
}

// ShapeNames lists NamedShapes' names, sorted.
func ShapeNames() []string {
	names := make([]string, 0, len(NamedShapes))
	for n := range NamedShapes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// shapeConfig is the shape a --shape names: a NamedShapes entry, or the config.json of a
// checkpoint folder.
func shapeConfig(shape string) (model.Config, error) {
	if cfg, ok := NamedShapes[strings.ToLower(shape)]; ok {
		return cfg, nil
	}
	if st, err := os.Stat(shape); err == nil && st.IsDir() {
		cfg, err := checkpoint.ReadConfig(shape)
		if err != nil {
			return model.Config{}, fmt.Errorf("bench model: --shape: %w", err)
		}
		return cfg, nil
	}
	return model.Config{}, fmt.Errorf("bench model: --shape %q is neither a checkpoint folder nor one of %s", shape, strings.Join(ShapeNames(), ", "))
}

// describeConfig names a config's shape in one line.
func describeConfig(cfg model.Config) string {
	fam := cfg.Family
	if fam == "" {
		fam = model.FamilyLlama
	}
	return fmt.Sprintf("%s, dim %d, layers %d, heads %d/%d of %d, hidden %d, vocab %d, %.1f M matrix weights",
		fam, cfg.Dim, cfg.Layers, cfg.Heads, cfg.KVHeads, cfg.HeadDim(), cfg.Hidden, cfg.Vocab, matmulParams(cfg)/1e6)
}

// loraBench times the LoRA RL step through the in-process learner backend (learn.Builtin), as
// an RL phase with lora: runs it: Forward for the sampled tokens' log probabilities (the
// activations kept), ForwardBackward with a policy-gradient coefficient per completion token,
// and OptimStep (clip, AdamW over the adapters). The base is frozen, so the step's useful work
// is the forward products and their input gradients (4 FLOPs per matrix weight per token) and
// causal attention forward and backward; the GEMMs it is compared with are the same forward and
// input-gradient products (stepGEMMsOf without weight gradients) through kernels.Sgemm. Rounds
// alternate c.Steps steps with as many runs of the GEMMs; the median round by ratio is printed.
func (c *ModelOptions) loraBench(w io.Writer, cfg model.Config, _ bool) error {
	m, err := model.New(cfg, c.Seed)
	if err != nil {
		return err
	}
	lc := model.LoRAConfig{Rank: c.LoRA, Alpha: 2 * float64(c.LoRA),
		Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}
	if err := m.AddLoRA(lc, c.Seed); err != nil {
		return err
	}
	params, _, _ := m.Trainable()
	opt, err := optim.NewAdamW(optim.DefaultConfig(), len(params), []optim.Segment{{Len: len(params), Decay: true}})
	if err != nil {
		return err
	}
	be := &learn.Builtin{Model: m, Opt: opt, RowLen: c.Seq}
	// Rows sequences of Seq tokens, a quarter prompt and the rest completion, each completion
	// token with a coefficient of ±1 (an advantage's sign).
	rng := rand.New(rand.NewPCG(c.Seed, 7))
	n := c.Rows * c.Seq
	s := &learn.Seqs{Tokens: make([]int32, n), Mask: make([]bool, n)}
	dlp := make([]float32, n)
	for r := range c.Rows {
		s.Offsets = append(s.Offsets, r*c.Seq)
		for j := range c.Seq {
			i := r*c.Seq + j
			s.Tokens[i] = int32(rng.IntN(cfg.Vocab))
			if j >= c.Seq/4 {
				s.Mask[i] = true
				dlp[i] = float32(2*rng.IntN(2)-1) / float32(n)
			}
		}
	}
	s.Offsets = append(s.Offsets, n)
	out := &learn.Outputs{Logprobs: make([]float32, n)}
	ctx := context.Background()
	step := func() error {
		if err := be.Forward(ctx, s, learn.ForwardOptions{}, out); err != nil {
			return err
		}
		if err := be.ForwardBackward(ctx, s, learn.Coefficients{DLogprobs: dlp}); err != nil {
			return err
		}
		_, err := be.OptimStep(ctx, learn.OptimStep{LR: 1e-5, GradClip: 1})
		return err
	}
	if err := step(); err != nil { // warm-up: sizes the workspace
		return err
	}
	shapes := stepGEMMsOf(cfg, n, false)
	hd := cfg.Heads * cfg.HeadDim()
	flops := float64(n) * (4*matmulParams(cfg) + 6*float64(cfg.Layers*hd*(c.Seq+1)))
	type round struct{ step, gemm, ratio float64 }
	var rs []round
	for range c.Rounds {
		t0 := time.Now()
		for range c.Steps {
			if err := step(); err != nil {
				return err
			}
		}
		r := round{step: time.Since(t0).Seconds() / float64(c.Steps), gemm: timeGEMMs(shapes, c.Steps)}
		r.ratio = (flops / r.step) / (gemmFLOPs(shapes) / r.gemm)
		rs = append(rs, r)
	}
	slices.SortStableFunc(rs, func(a, b round) int { return cmp.Compare(a.ratio, b.ratio) })
	r := rs[len(rs)/2]
	fmt.Fprintf(w, "config %s: LoRA rank %d on all seven projections, %.2f M adapter weights; memory estimate: %s\n", describeConfig(cfg), c.LoRA, float64(len(params))/1e6,
		cfg.EstimateMemory(model.MemoryUse{Train: true, TrainTokens: n, LoRA: &lc}))
	fmt.Fprintf(w, "  LoRA RL step %d×%d tokens (Forward, ForwardBackward, OptimStep through learn.Builtin): %.2f s/step, %.0f tokens/s, %.1f GFLOP/s useful (forward and input-gradient products, attention)\n",
		c.Rows, c.Seq, r.step, float64(n)/r.step, flops/r.step/1e9)
	fmt.Fprintf(w, "  sgemm at the step's shapes (its %d forward and input-gradient GEMMs): %.2f s, %.1f GFLOP/s; LoRA RL step rate / GEMM rate = %.2f (median of %d rounds alternating steps and GEMMs, %.2f–%.2f)\n",
		len(shapes), r.gemm, gemmFLOPs(shapes)/r.gemm/1e9, r.ratio, len(rs), rs[0].ratio, rs[len(rs)-1].ratio)
	return nil
}
