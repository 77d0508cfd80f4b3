package pipeline

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/model"
)

// Proof that a model family learns (issue 31, item 7), in the long tier: a small Qwen3-shaped
// model (q/k norms, head_dim 32 where dim/heads is 16, tied embeddings) with agentrl's own calc
// tokenizer is trained by SFT on calc and saved as a Qwen3 checkpoint (Qwen3ForCausalLM); a
// second run starts from it through init: alone (no model block: the architecture comes from
// config.json, the tokenizer from the folder) and trains RL with LoRA adapters on every
// projection, the base frozen, which lifts held-out sampled pass@1 over the SFT checkpoint's as
// the calc preset's RL does.
//
// The sizes are about the smallest that keep it meaningful: the copying the task hinges on
// forms after ~500 SFT steps here (the loss falls below 0.4 nats), so SFT takes 800; RL takes 30
// of the preset's steps (16 groups of 8) at a LoRA learning rate, and evaluation 100 held-out
// tasks × 4 samples. Measured (BENCHMARKS.md): seed 1 (the test's) 16.8% → 32.0% sampled pass@1,
// seed 2 44.2% → 65.0%; with 1,500 SFT steps seed 1 42.0% → 88.2%. About 4 minutes on two
// shared cores.
func TestQwen3SFTThenLoRARLLearnsCalc(t *testing.T) {
	if testing.Short() {
		t.Skip("long tier: SFT and RL of a Qwen3-shaped model on calc (minutes)")
	}
	const sftSteps, rlSteps, margin = 800, 30, 0.10
	runs := t.TempDir()
	envs := all.Builtins()
	opts := Options{Envs: envs}
	if testing.Verbose() {
		opts.Out = os.Stderr // progress of a long run
	}
	t0 := time.Now()

	c, err := config.Preset("calc")
	if err != nil {
		t.Fatal(err)
	}
	c.RunsDir, c.Name = runs, "qwen3-sft"
	c.Model = model.Config{Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 192, MaxSeq: 384, RopeTheta: 10000,
		NormEps: 1e-6, TieEmbeddings: true, Family: model.FamilyQwen3, QKNorm: true, HeadDimension: 32}
	c.Eval.Tasks = 100
	c.Phases = c.Phases[:1]
	c.Phases[0].Steps = sftSteps
	sftRun, err := NewRun(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sftRun.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	ck := sftRun.checkpointDir(sftRun.stepName(0, sftSteps))
	var hf struct {
		Architectures []string `json:"architectures"`
		ModelType     string   `json:"model_type"`
		HeadDim       int      `json:"head_dim"`
		Hidden        int      `json:"hidden_size"`
		Heads         int      `json:"num_attention_heads"`
		Tied          bool     `json:"tie_word_embeddings"`
	}
	data, err := os.ReadFile(filepath.Join(ck, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &hf); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(hf.Architectures, []string{"Qwen3ForCausalLM"}) || hf.ModelType != "qwen3" || hf.HeadDim != 32 || hf.Hidden/hf.Heads == 32 || !hf.Tied {
		t.Fatalf("the SFT checkpoint's config.json is not the Qwen3 model trained: %s", data)
	}
	sftTime := time.Since(t0)

	c2, err := config.Preset("calc")
	if err != nil {
		t.Fatal(err)
	}
	c2.RunsDir, c2.Name, c2.Init = runs, "qwen3-lora-rl", ck
	c2.Model = model.Config{} // all from the checkpoint
	c2.Tokenizer = config.TokenizerConfig{}
	c2.Eval.Tasks = 100
	rl := c2.Phases[1]
	rl.Steps = rlSteps
	rl.Optim.LR = 1e-3 // adapters start at zero: the preset's full-weight rate is too slow for them
	rl.LoRA = &model.LoRAConfig{Rank: 16, Alpha: 32, Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}
	c2.Phases = []config.Phase{rl}
	rlRun, err := NewRun(c2, opts)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile(filepath.Join(rlRun.Dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(saved), "family: qwen3") || !strings.Contains(string(saved), "head_dim: 32") {
		t.Fatalf("the RL run did not take the checkpoint's model:\n%s", saved)
	}
	sum, err := rlRun.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Evals) != 2 {
		t.Fatalf("%d evaluations, want before and after RL", len(sum.Evals))
	}
	before, after := sum.Evals[0].Envs[0], sum.Evals[1].Envs[0]
	t.Logf("SFT %d steps (%s): held-out sampled pass@1 %.3f, greedy %.3f; LoRA RL %d steps (%s): sampled %.3f, greedy %.3f",
		sftSteps, sftTime.Round(time.Second), *before.Pass1Sampled, before.Pass1Greedy,
		rlSteps, (time.Since(t0) - sftTime).Round(time.Second), *after.Pass1Sampled, after.Pass1Greedy)
	if !(*after.Pass1Sampled > *before.Pass1Sampled+margin) {
		t.Fatalf("LoRA RL from the Qwen3 checkpoint: held-out sampled pass@1 %.3f → %.3f, not a lift of %.2f",
			*before.Pass1Sampled, *after.Pass1Sampled, margin)
	}
	ad := rlRun.checkpointDir(rlRun.stepName(0, rlSteps))
	if _, err := os.Stat(filepath.Join(ad, "adapter_model.safetensors")); err != nil {
		t.Fatalf("the RL checkpoint holds no adapter: %v", err)
	}
}
