package model

import (
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/model/kernels"
)

// vmHWM is the process's peak resident memory in bytes (Linux); resetHWM lowers it to the
// current RSS.
func vmHWM() int64 {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func resetHWM() { os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// BenchmarkLoRAStepQwen25_1_5B is a LoRA training step (Forward and Backward of 256 tokens with
// targets, rank-16 adapters on every projection) of a Qwen2.5-1.5B-shaped model (1.54 G
// parameters, tied embeddings, q/k/v biases): the peak RSS of the process against the memory
// estimate, and the step's rate of useful work (forward and input-gradient products) as a
// fraction of kernels.Sgemm's rate on the model's widest product measured in the same run.
func BenchmarkLoRAStepQwen25_1_5B(b *testing.B) {
	if testing.Short() {
		b.Skip("allocates a 6 GB model")
	}
	cfg := Config{Family: FamilyQwen2, Vocab: 151936, Dim: 1536, Layers: 28, Heads: 12, KVHeads: 2, Hidden: 8960,
		MaxSeq: 32768, RopeTheta: 1000000, NormEps: 1e-6, TieEmbeddings: true, QKVBias: true}
	const T = 256
	lora := LoRAConfig{Rank: 16, Alpha: 32, Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}
	est := cfg.EstimateMemory(MemoryUse{Train: true, TrainTokens: T, LoRA: &lora})
	m, err := NewZero(cfg)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for _, t := range m.Params.Tensors() {
		for i := range t.Data {
			if len(t.Shape) == 1 && !t.Bias() {
				t.Data[i] = 1
			} else {
				t.Data[i] = (rng.Float32() - 0.5) * 0.04
			}
		}
	}
	if err := m.AddLoRA(lora, 1); err != nil {
		b.Fatal(err)
	}
	batch := &Batch{Rows: 1, T: T, Tokens: randTokens(rng, T, cfg.Vocab), Targets: randTokens(rng, T, cfg.Vocab),
		Pos: make([]int32, T), Seg: make([]int32, T)}
	for i := range batch.Pos {
		batch.Pos[i] = int32(i)
	}
	lp, ent := make([]float32, T), make([]float32, T)
	dlp, dent := make([]float32, T), make([]float32, T)
	for i := range dlp {
		dlp[i] = 1
	}
	// kernels.Sgemm on the MLP's gate/up product at the same rows, the model's widest layer
	// GEMM, timed before and after the steps (the faster counts: a loaded machine slows either).
	x := make([]float32, T*cfg.Dim)
	y := make([]float32, T*2*cfg.Hidden)
	gemmRate := func() float64 {
		w := m.Params.Layers[0].GateUp
		t0 := time.Now()
		const reps = 3
		for range reps {
			kernels.Sgemm(false, true, T, 2*cfg.Hidden, cfg.Dim, 1, x, cfg.Dim, w, cfg.Dim, 0, y, 2*cfg.Hidden)
		}
		return reps * 2 * float64(T) * float64(2*cfg.Hidden) * float64(cfg.Dim) / time.Since(t0).Seconds()
	}
	gemm := gemmRate()
	runtime.GC()
	resetHWM()
	var secs float64
	for b.Loop() {
		t0 := time.Now()
		if err := m.Forward(batch, lp, ent); err != nil {
			b.Fatal(err)
		}
		if err := m.Backward(batch, dlp, dent); err != nil {
			b.Fatal(err)
		}
		secs = time.Since(t0).Seconds()
	}
	peak := vmHWM()
	// Useful work: every projection and the LM head forward (2·params·tokens) and their input
	// gradients (as many again); the frozen weights take no weight gradient.
	var matrices int64
	for _, t := range m.Params.Tensors() {
		if len(t.Shape) == 2 {
			matrices += int64(len(t.Data))
		}
	}
	flops := 4 * float64(matrices) * T
	gemm = max(gemm, gemmRate())
	b.ReportMetric(secs, "s/step")
	b.ReportMetric(T/secs, "tokens/s")
	b.ReportMetric(flops/secs/1e9, "GFLOP/s")
	b.ReportMetric(gemm/1e9, "sgemm-GFLOP/s")
	b.ReportMetric(flops/secs/gemm, "of-sgemm")
	b.ReportMetric(float64(peak)/(1<<30), "GiB-peak-RSS")
	b.ReportMetric(float64(est.Total())/(1<<30), "GiB-estimate")
}
