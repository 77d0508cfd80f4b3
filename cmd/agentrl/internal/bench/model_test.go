package bench

import (
	"bytes"
	"context"
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
	} {
		var out bytes.Buffer
		if err := Model(context.Background(), &out, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
