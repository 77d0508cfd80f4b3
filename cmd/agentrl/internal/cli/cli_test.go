package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// cancelWriter cancels when what it has been written contains at.
type cancelWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	at     string
	cancel context.CancelFunc
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.at) {
		w.cancel()
	}
	return n, err
}

// An interrupted training says how to resume it, exactly, and exits 130 (issue 13, item 11).
func TestInterruptPrintsResumeCommand(t *testing.T) {
	runs := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancelWriter{at: "sft step 1/3", cancel: cancel}
	err := Main(ctx, tinyTrain(runs), w, w)
	if err == nil {
		t.Fatal("an interrupted run reported success")
	}
	want := "agentrl train --resume " + runs + "/cli"
	if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("err = %v, want the resume command %q", err, want)
	}
	if code := ExitCode(err); code != 130 {
		t.Fatalf("exit status %d, want 130", code)
	}
	if code := ExitCode(context.Canceled); code != 1 {
		t.Fatalf("a plain error's exit status %d, want 1", code)
	}
}

// --version and the help command (item 12).
func TestVersionAndHelp(t *testing.T) {
	out, err := runCLI(t, "--version")
	if err != nil || !strings.HasPrefix(out, "agentrl ") || !strings.Contains(out, runtime.Version()) {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	out, err = runCLI(t, "help")
	if err != nil || !strings.Contains(out, "Usage: agentrl <command>") {
		t.Fatalf("help: %v\n%s", err, out)
	}
	out, err = runCLI(t, "help", "env", "serve")
	if err != nil || !strings.Contains(out, "Usage: agentrl env serve") {
		t.Fatalf("help env serve: %v\n%s", err, out)
	}
}

// --set takes one KEY=VALUE per flag: a list value keeps its commas, and switching a loss's
// policy gives its defaults (item 10).
func TestSetKeepsCommas(t *testing.T) {
	out, err := runCLI(t, "config", "show", "--set", "phases.rl.envs=[{name: calc, weight: 1}, {name: maze, weight: 2}]",
		"--set", "phases.rl.rl.loss.policy=gspo")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"name: maze", "weight: 2", "policy: gspo", "clip_low: 0.0003"} {
		if !strings.Contains(out, want) {
			t.Fatalf("config show lacks %q:\n%s", want, out)
		}
	}
}

// Sizes given on eval's command line are bounded before the checkpoint is read (item 8).
func TestEvalSizeFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--k", "99999999999"}, "eval.MaxK"},
		{[]string{"--tasks", "99999999999"}, "eval.MaxTasks"},
		{[]string{"--slots", "100000000"}, "local.MaxSlots"},
		{[]string{"--tasks", "100000", "--k", "1000", "--max-context", "512"}, "eval.MaxEpisodeTokens"},
	} {
		out, err := runCLI(t, append([]string{"eval", "--checkpoint", dir}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("eval %v: err = %v, want %q\n%s", c.args, err, c.want, out)
		}
	}
}

// config show prints a reward block with every part, and what it prints loads back as it is.
func TestConfigShowRewardBlock(t *testing.T) {
	out, err := runCLI(t, "config", "show", "--set", `phases.rl.envs.0.reward={format: {pattern: '^Answer:', weight: 0.1},
  overlong: {max_len: 96, cache: 32, weight: 1}, process: {valid_call: 0.1, invalid_call: -0.1, step_cost: 0},
  progressive: {from: 0.2, steps: 50, cosine: true},
  judge: {weight: 0.5, rubric: "{{.Response}} Score: N", max_score: 10, timeout: 30s, fallback: 0, max_tokens: 16, generator: policy}}`)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"reward:", "outcome: 1.0", `pattern: "^Answer:"`, "max_len: 96", "cache: 32", "valid_call: 0.1", "invalid_call: -0.1",
		"step_cost: 0.0", "from: 0.2", "cosine: true", "judge:", `rubric: "{{.Response}} Score: N"`, "max_score: 10.0", "timeout: 30s", "fallback: 0.0", "max_tokens: 16", "generator: policy"} {
		if !strings.Contains(out, want) {
			t.Fatalf("config show lacks %q:\n%s", want, out)
		}
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := runCLI(t, "config", "show", "--config", path)
	if err != nil || again != out {
		t.Fatalf("the printed config does not load back as it is: %v\n%s", err, again)
	}
}

// agentrl checkpoint merge writes a checkpoint's adapters merged into its weights.
func TestCheckpointMerge(t *testing.T) {
	runs := t.TempDir()
	sets := append(tinyTrain(runs), "--set", "phases.sft.lora={rank: 2, alpha: 4, targets: [q_proj, down_proj]}")
	var out bytes.Buffer
	if err := Main(context.Background(), sets, &out, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	matches, _ := filepath.Glob(filepath.Join(runs, "*", "checkpoints", "sft-*"))
	var src string
	for _, m := range matches {
		if _, err := os.Stat(filepath.Join(m, "adapter_config.json")); err == nil {
			src = m
		}
	}
	if src == "" {
		t.Fatalf("no checkpoint with adapters among %v", matches)
	}
	dst := filepath.Join(t.TempDir(), "merged")
	out.Reset()
	if err := Main(context.Background(), []string{"checkpoint", "merge", "--checkpoint", src, "--out", dst, "--dtype", "bf16"}, &out, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "merged") {
		t.Fatalf("output %q", out.String())
	}
	if _, err := os.Stat(filepath.Join(dst, "adapter_config.json")); err == nil {
		t.Fatal("the merged checkpoint has an adapter")
	}
	if _, err := os.Stat(filepath.Join(dst, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	if err := Main(context.Background(), []string{"checkpoint", "merge", "--checkpoint", dst, "--out", t.TempDir()}, &out, &out); err == nil || !strings.Contains(err.Error(), "no adapters") {
		t.Fatalf("merging a checkpoint without adapters: %v", err)
	}
	// export keeps the adapters beside the weights, in the requested dtype.
	exp := filepath.Join(t.TempDir(), "export")
	out.Reset()
	if err := Main(context.Background(), []string{"checkpoint", "export", "--checkpoint", src, "--out", exp, "--dtype", "f16"}, &out, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "f16 weights") {
		t.Fatalf("output %q", out.String())
	}
	for _, f := range []string{"adapter_config.json", "adapter_model.safetensors", "model.safetensors"} {
		if _, err := os.Stat(filepath.Join(exp, f)); err != nil {
			t.Fatal(err)
		}
	}
}
