package bench

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBenchModelPrintsEveryFigure(t *testing.T) {
	var out bytes.Buffer
	o := ModelOptions{Vocab: 64, Rows: 1, Seq: 40, Steps: 1, Prompt: 4, Decode: 2, Configs: "64x1", Seed: 1, Engine: 2, EngLen: 12, Rounds: 2}
	if err := Model(context.Background(), &out, o); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"train step 1×40", "GFLOP/s model FLOPs", "sgemm at the step's shapes", "VmHWM",
		"decode batch 1 ", "decode batch 32 ", "config dim 64 layers 1", "engine: 32 slots × 12 tokens", "round 2: 256 tokens", "live heap",
		"decode roofline, batch 1: weights streamed at", "of the read bandwidth", "; by the median step ", "cpu: ", "L1d ",
		"decode bf16 weights, batch 1 ", "decode bf16 weights, batch 32 ", "decode roofline, batch 1: bf16 weights streamed at",
		"decode batch 32 / batch 1 throughput with bf16 weights: median", "decode speed-up of bf16 weights over f32: batch 1 median",
		"decode bf16 weights and KV cache, batch 32 ", "decode speed-up of bf16 weights and KV cache over f32: batch 1 median"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// Both sizes decode, batch 1 then batch 32 in each of the two rounds, with a ratio each.
	if n := strings.Count(out.String(), "decode batch 1 "); n != 4 {
		t.Errorf("%d batch-1 decode lines, want 4 (2 sizes × 2 rounds):\n%s", n, out.String())
	}
	if n := strings.Count(out.String(), "decode batch 32 / batch 1 throughput: median"); n != 2 {
		t.Errorf("%d ratio lines, want 2:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "(median of 2 rounds alternating steps and GEMMs, ") {
		t.Errorf("the step / GEMM ratio is not the median of the 2 rounds:\n%s", out.String())
	}
	if n := strings.Count(out.String(), "decode bf16 weights, batch 1 "); n != 4 {
		t.Errorf("%d bf16 batch-1 decode lines, want 4 (2 sizes × 2 rounds):\n%s", n, out.String())
	}
}

// TestBenchModelPreset: --preset measures the model the preset trains (calc: 64 wide, 2 layers,
// a 512-token vocabulary).
func TestBenchModelPreset(t *testing.T) {
	var out bytes.Buffer
	o := ModelOptions{Vocab: 64, Rows: 1, Seq: 40, Steps: 1, Prompt: 4, Decode: 2, Rounds: 1, Seed: 1, Preset: "calc"}
	if err := Model(context.Background(), &out, o); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "config dim 64 layers 2 heads 4/2 hidden 192 vocab 512") {
		t.Fatalf("output does not describe the calc preset's model:\n%s", out.String())
	}
}

func TestBenchModelRejectsBadFlags(t *testing.T) {
	for _, o := range []ModelOptions{
		{Vocab: 64, Rows: 0, Seq: 40, Steps: 1, Prompt: 4, Decode: 2, Rounds: 1},
		{Vocab: 64, Rows: 1, Seq: 40, Steps: 1, Prompt: 4, Decode: 2, Rounds: 1, Configs: "64by1"},
		{Vocab: 64, Rows: 1, Seq: 40, Steps: 1, Prompt: 4, Decode: 2, Rounds: 1, Configs: "65x1"},
		{Vocab: 64, Rows: 1, Seq: 40, Steps: 1, Prompt: 4, Decode: 2, Rounds: 1, Engine: 1, EngLen: 4},
		{Vocab: 64, Rows: 1, Seq: 40, Steps: 1, Prompt: 4, Decode: 2, Rounds: 1, Engine: -1},
		{Vocab: 64, Rows: 1, Seq: 40, Steps: 1, Prompt: 4, Decode: 2, Rounds: 0},
		{Vocab: 64, Rows: 1, Seq: 40, Steps: 1, Prompt: 4, Decode: 2, Rounds: 1, Preset: "chess"},
		{Vocab: 64, Rows: 1, Seq: 40, Steps: -1, Prompt: 4, Decode: 2, Rounds: 1},
		{Vocab: 64, Rows: 1, Seq: 40, Steps: 1, Prompt: 4, Decode: 2, Rounds: 1, LoRA: -1},
		{Vocab: 64, Rows: 1, Seq: 40, Steps: 1, Prompt: 4, Decode: 2, Rounds: 1, Precisions: "bf16,fp8"},
		{Vocab: 64, Rows: 1, Seq: 40, Steps: 1, Prompt: 4, Decode: 2, Rounds: 1, Precisions: "none,bf16"},
		{Vocab: 64, Rows: 1, Seq: 40, Steps: 1, Prompt: 4, Decode: 2, Rounds: 1, Shape: "qwen9-0.1b"},
		{Vocab: 64, Rows: 1, Seq: 40, Steps: 1, Prompt: 4, Decode: 2, Rounds: 1, Shape: "qwen3-0.6b", Preset: "calc"},
	} {
		var out bytes.Buffer
		if err := Model(context.Background(), &out, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// TestBenchModelShapeLoRA: --shape takes a checkpoint folder's config.json (here a Qwen3 shape
// with head_dim twice hidden/heads), --precision bf16 times only the bf16 decode, and --lora
// makes the training figure the LoRA RL step against the GEMM rate.
func TestBenchModelShapeLoRA(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 64, "num_hidden_layers": 1,
		"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128, "vocab_size": 96,
		"max_position_embeddings": 128, "rope_theta": 1000000, "rms_norm_eps": 1e-6, "tie_word_embeddings": true}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	o := ModelOptions{Vocab: 64, Rows: 2, Seq: 24, Steps: 1, Prompt: 4, Decode: 2, Rounds: 1, Seed: 1, Shape: dir, Precisions: "bf16", LoRA: 4}
	if err := Model(context.Background(), &out, o); err != nil {
		t.Fatal(err)
	}
	// --batch1-only with f32 and bf16: batch 1 alone, and bf16's speed-up over f32 at batch 1.
	var one bytes.Buffer
	o1 := ModelOptions{Vocab: 64, Rows: 2, Seq: 24, Steps: 0, Prompt: 4, Decode: 2, Rounds: 1, Seed: 1, Shape: dir, Precisions: "f32,bf16", Batch1Only: true}
	if err := Model(context.Background(), &one, o1); err != nil {
		t.Fatal(err)
	}
	if s := one.String(); strings.Contains(s, "batch 32") || strings.Contains(s, "train step") || strings.Count(s, "decode roofline, batch 1") != 2 ||
		!strings.Contains(s, "decode speed-up of bf16 weights over f32: batch 1 median") {
		t.Errorf("--batch1-only --steps 0 --precision f32,bf16 printed:\n%s", s)
	}
	for _, want := range []string{"qwen3, dim 64, layers 1, heads 4/2 of 32, hidden 128, vocab 96", "LoRA rank 4 on all seven projections",
		"LoRA RL step 2×24 tokens", "LoRA RL step rate / GEMM rate = ", "decode bf16 weights, batch 1 ", "decode bf16 weights, batch 32 ",
		"decode roofline, batch 1: bf16 weights streamed at"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, not := range []string{"decode batch 1 ", "KV cache, batch", "speed-up"} {
		if strings.Contains(out.String(), not) {
			t.Errorf("output has %q though only bf16 weights were asked for:\n%s", not, out.String())
		}
	}
}

// TestNamedShapesAreValid: every named shape is a model the engine accepts, with the published
// matrix-weight counts (tied heads counted once).
func TestNamedShapesAreValid(t *testing.T) {
	want := map[string]float64{"qwen3-0.6b": 596.0, "smollm2-360m": 361.8, "qwen2.5-0.5b": 494.0, "qwen2.5-1.5b": 1543.6}
	for _, name := range ShapeNames() {
		cfg, err := shapeConfig(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if got := matmulParams(cfg) / 1e6; math.Abs(got-want[name]) > 0.1 {
			t.Errorf("%s: %.1f M matrix weights, want %.1f M", name, got, want[name])
		}
	}
}
