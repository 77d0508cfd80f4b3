package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/config"
)

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := Main(context.Background(), args, &out, &out)
	return out.String(), err
}

// tinyTrain is a whole run small enough for a test.
func tinyTrain(runs string) []string {
	sets := []string{
		"runs_dir=" + runs, "name=cli",
		"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64", "model.max_seq=320",
		"rollout.max_context=320", "rollout.engine_slots=16", "tokenizer.vocab_size=320", "tokenizer.corpus_samples=100",
		"phases.sft.steps=3", "phases.sft.optim.warmup=1", "phases.sft.sft.demos=32", "phases.sft.sft.batch_size=8",
		"phases.rl.steps=2", "phases.rl.optim.warmup=1", "phases.rl.rl.groups_per_step=2", "phases.rl.rl.group_size=4",
		"eval.tasks=4", "checkpoint.every=1",
	}
	args := []string{"train"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return args
}

func TestTrainEvalAndResume(t *testing.T) {
	runs := t.TempDir()
	out, err := runCLI(t, tinyTrain(runs)...)
	if err != nil {
		t.Fatalf("train: %v\n%s", err, out)
	}
	for _, want := range []string{"eval before", "after-sft", "after-rl", "held-out pass@1", "sft step 3/3", "rl step 2/2"} {
		if !strings.Contains(out, want) {
			t.Fatalf("train output lacks %q:\n%s", want, out)
		}
	}
	dir := filepath.Join(runs, "cli")
	for _, f := range []string{"config.yaml", "metrics.jsonl", "trajectories.atrs", "eval-after-rl.json", "checkpoints/LATEST", "checkpoints/best/model.safetensors", "tokenizer/tokenizer.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("run directory lacks %s: %v", f, err)
		}
	}
	out, err = runCLI(t, "eval", "--checkpoint", filepath.Join(dir, "checkpoints", "best"), "--env", "calc", "--tasks", "3", "--k", "2", "--json")
	if err != nil || !strings.Contains(out, `"pass1_greedy"`) || !strings.Contains(out, `"passk"`) {
		t.Fatalf("eval: %v\n%s", err, out)
	}
	// The table: greedy only with --k 0 (no pass@0 column), the sampled columns with --k 2.
	out, err = runCLI(t, "eval", "--checkpoint", filepath.Join(dir, "checkpoints", "best"), "--env", "calc", "--tasks", "2", "--k", "0")
	if err != nil || !strings.Contains(out, "pass@1 greedy") || strings.Contains(out, "pass@0") || strings.Contains(out, "sampled") {
		t.Fatalf("eval --k 0: %v\n%s", err, out)
	}
	out, err = runCLI(t, "eval", "--checkpoint", filepath.Join(dir, "checkpoints", "best"), "--env", "calc", "--tasks", "2", "--k", "2")
	if err != nil || !strings.Contains(out, "pass@1 sampled") || !strings.Contains(out, "pass@2") {
		t.Fatalf("eval --k 2: %v\n%s", err, out)
	}
	// A finished run resumes to nothing left to do.
	out, err = runCLI(t, "train", "--resume", dir)
	if err != nil || !strings.Contains(out, "resuming at phase 2") {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "train", "--resume", dir, "--set", "seed=3"); err == nil {
		t.Fatal("--resume with --set was accepted")
	}
}

func TestTrainAndConfigRejectBadSettings(t *testing.T) {
	cases := [][]string{
		{"train", "--set", "phases.rl.rl.grup_size=3"},
		{"train", "--preset", "nope"},
		{"train", "--set", "rollout.top_k=5"},
		{"config", "show", "--set", "model.dim=-1"},
	}
	for _, args := range cases {
		if out, err := runCLI(t, args...); err == nil {
			t.Errorf("%v accepted:\n%s", args, out)
		}
	}
	out, err := runCLI(t, "config", "show", "--preset", "calc", "--set", "seed=9")
	if err != nil || !strings.Contains(out, "seed: 9") || !strings.Contains(out, "group_size: 8") {
		t.Fatalf("config show: %v\n%s", err, out)
	}
}

func TestBenchTrainReportsLift(t *testing.T) {
	args := []string{"bench", "train", "--seeds", "1,2", "--quiet"}
	for _, a := range tinyTrain(t.TempDir())[1:] {
		if strings.HasPrefix(a, "name=") {
			continue // bench train names each run after its seed
		}
		args = append(args, a)
	}
	// "--set" "name=cli" pairs: drop the dangling flag left by skipping the value.
	var clean []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--set" && (i+1 == len(args) || args[i+1] == "--set") {
			continue
		}
		clean = append(clean, args[i])
	}
	out, err := runCLI(t, clean...)
	if err != nil {
		t.Fatalf("bench train: %v\n%s", err, out)
	}
	for _, want := range []string{"pass@1 sampled", "held-out pass@1 (sampled) lift", "over 2 runs"} {
		if !strings.Contains(out, want) {
			t.Fatalf("bench train output lacks %q:\n%s", want, out)
		}
	}
}

// Item 8 of issue 29: RL from a checkpoint is `train --init CKPT --only rl` on the preset: the
// preset's RL phase with its defaults, the checkpoint's architecture and tokenizer.
func TestTrainRLFromACheckpoint(t *testing.T) {
	runs := t.TempDir()
	if out, err := runCLI(t, tinyTrain(runs)...); err != nil {
		t.Fatalf("train: %v\n%s", err, out)
	}
	ck := filepath.Join(runs, "cli", "checkpoints", "sft-p0.s000003")
	args := []string{"train", "--init", ck, "--only", "rl", "--set", "runs_dir=" + runs, "--set", "name=rl-only",
		"--set", "rollout.engine_slots=16", "--set", "phases.rl.steps=1", "--set", "phases.rl.optim.warmup=1",
		"--set", "phases.rl.rl.groups_per_step=2", "--set", "phases.rl.rl.group_size=4", "--set", "eval.tasks=2"}
	out, err := runCLI(t, args...)
	if err != nil {
		t.Fatalf("train --init --only rl: %v\n%s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(runs, "rl-only", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	preset, err := config.Preset("calc")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Phases) != 1 || cfg.Phases[0].Name != "rl" || cfg.Phases[0].Optim.LR != preset.Phases[1].Optim.LR || cfg.Init == "" || cfg.Model.Dim != 32 {
		t.Fatalf("the run's config: %d phases, lr %v (preset %v), init %q, dim %d", len(cfg.Phases), cfg.Phases[0].Optim.LR, preset.Phases[1].Optim.LR, cfg.Init, cfg.Model.Dim)
	}
	if _, err := runCLI(t, "train", "--init", ck, "--only", "nope"); err == nil || !strings.Contains(err.Error(), `no phase "nope" (its phases: sft, rl)`) {
		t.Fatalf("--only nope: %v", err)
	}
}
