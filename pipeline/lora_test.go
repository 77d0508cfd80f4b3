package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
)

// onesSets trains the tiny run on test-ones, whose rewards differ within a group from the first
// RL step on (gaeSets' start without GAE).
var onesSets = []string{
	"phases.rl.rl.dynamic_sampling=null",
	"phases.sft.envs=[{name: test-ones, weight: 1}]", "phases.rl.envs=[{name: test-ones, weight: 1}]",
	"rollout.max_turns=1", "rollout.max_tokens_per_turn=6", "phases.sft.steps=30", "phases.rl.optim.lr=0.003",
}

// loraSets trains the RL phase's adapters instead of its weights.
var loraSets = append(slices.Clone(onesSets),
	"phases.rl.lora={rank: 4, alpha: 8, dropout: 0, targets: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}")

// An RL phase with a lora block trains adapters beside the weights the SFT phase left: its
// checkpoints hold those weights unchanged and the adapters in PEFT's format; an SFT phase with
// adapters followed by a phase without merges them into the weights it then trains.
func TestLoRAPhases(t *testing.T) {
	run, err := NewRun(tinyConfig(t, t.TempDir(), loraSets...), Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	sft, err := checkpoint.Load(run.checkpointDir("sft-p0.s000030"))
	if err != nil {
		t.Fatal(err)
	}
	rl, err := checkpoint.Load(run.checkpointDir("rl-p1.s000004"))
	if err != nil {
		t.Fatal(err)
	}
	if sft.Model.HasLoRA() || !rl.Model.HasLoRA() {
		t.Fatalf("adapters: sft checkpoint %v, rl checkpoint %v", sft.Model.HasLoRA(), rl.Model.HasLoRA())
	}
	if !slices.Equal(sft.Model.Params.Data, rl.Model.Params.Data) {
		t.Fatal("the RL phase with adapters changed the base weights")
	}
	if _, err := os.Stat(filepath.Join(run.checkpointDir("rl-p1.s000004"), "adapter_model.safetensors")); err != nil {
		t.Fatal(err)
	}
	var moved bool
	for _, v := range rl.Model.LoRA.Tensors() {
		for _, x := range v.Data {
			moved = moved || (x != 0 && v.Shape[1] == 4) // a B entry (out×rank): zero at the start
		}
	}
	if !moved {
		t.Fatal("the adapters' B matrices never left zero")
	}

	// Adapters on SFT, none on RL: RL starts from the merged weights and trains them.
	run2, err := NewRun(tinyConfig(t, t.TempDir(), append(slices.Clone(onesSets), "phases.sft.steps=8", "phases.sft.lora={rank: 2, alpha: 4, targets: [q_proj, down_proj]}")...), Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run2.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	sft2, err := checkpoint.Load(run2.checkpointDir("sft-p0.s000008"))
	if err != nil {
		t.Fatal(err)
	}
	rl2, err := checkpoint.Load(run2.checkpointDir("rl-p1.s000004"))
	if err != nil {
		t.Fatal(err)
	}
	if !sft2.Model.HasLoRA() || rl2.Model.HasLoRA() {
		t.Fatalf("adapters: sft checkpoint %v, rl checkpoint %v", sft2.Model.HasLoRA(), rl2.Model.HasLoRA())
	}
	// The RL phase starts from the merged weights: they differ from the SFT checkpoint's base
	// (its adapters trained), and where no RL step updated anything they are what it ends with.
	merged := sft2.Model.Merged().Params.Data
	if slices.Equal(sft2.Model.Params.Data, rl2.Model.Params.Data) {
		t.Fatal("the RL phase ran on the base weights without the SFT phase's adapters")
	}
	updated := false
	for _, l := range metricLines(t, run2.Dir) {
		if n, ok := l["signal/effective_batch"].(float64); ok && l["phase"] == "rl" && n > 0 {
			updated = true
		}
	}
	if !updated && !slices.Equal(merged, rl2.Model.Params.Data) {
		t.Fatal("no RL step updated the weights, yet they are not the SFT phase's merged ones")
	}
}

// A run with adapters killed mid-RL and resumed writes the metrics of an uninterrupted one: the
// adapters and their optimizer state come back from the checkpoint.
func TestResumeAfterKillWithLoRA(t *testing.T) {
	testResumeAfterKill(t, loraSets, []int{35}) // eval, 30 SFT steps, eval, RL steps 1-3: resumed at RL step 2
}

func TestLoRAConfigRefusals(t *testing.T) {
	for _, c := range []struct{ set, want string }{
		{"phases.rl.lora={rank: 0, alpha: 8, targets: [q_proj]}", "rank"},
		{"phases.rl.lora={rank: 4, alpha: 8, dropout: 0.1, targets: [q_proj]}", "dropout"},
		{"phases.rl.lora={rank: 4, alpha: 8, targets: [embed_tokens]}", "embed_tokens"},
		{"phases.rl.lora={rank: 4, alpha: 8, targets: [q_proj], bias: all}", "bias"},
	} {
		_, err := config.Load(testEnvs(), "", "", []string{c.set})
		if err == nil || !containsFold(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one naming %q", c.set, err, c.want)
		}
	}
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
