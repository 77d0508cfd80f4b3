package pipeline

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env/all"
)

// tinyConfig is a complete run small enough for a unit test: a cold start and a few RL steps of
// a 1-layer model on calc.
func tinyConfig(t testing.TB, runs string) Config {
	t.Helper()
	c, err := Load(all.Builtins(), "", "", []string{
		"runs_dir=" + runs, "name=tiny",
		"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64", "model.max_seq=320",
		"rollout.max_context=320", "rollout.engine_slots=16", "tokenizer.vocab_size=320", "tokenizer.corpus_samples=200",
		"phases.sft.steps=6", "phases.sft.optim.warmup=2", "phases.sft.sft.demos=64", "phases.sft.sft.batch_size=8",
		"phases.rl.steps=4", "phases.rl.optim.warmup=1", "phases.rl.rl.groups_per_step=2", "phases.rl.rl.group_size=4",
		"eval.tasks=8", "checkpoint.every=2",
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// metricLines reads metrics.jsonl without the wall-clock fields, which differ between runs.
func metricLines(t *testing.T, dir string) []map[string]any {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("metrics line %d: %v", len(out)+1, err)
		}
		for k := range m {
			if strings.HasPrefix(k, "time/") {
				delete(m, k)
			}
		}
		out = append(out, m)
	}
	return out
}

// TestHelperTrainProcess is the child of TestResumeAfterKill: it trains until it is killed.
func TestHelperTrainProcess(t *testing.T) {
	dir := os.Getenv("AGENTRL_TEST_TRAIN_RUNS")
	if dir == "" {
		t.Skip("run by TestResumeAfterKill")
	}
	run, err := NewRun(tinyConfig(t, dir), Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A run killed with SIGKILL in the middle of a step and resumed writes the same metrics as a run
// that was never interrupted.
func TestResumeAfterKill(t *testing.T) {
	ref := t.TempDir()
	whole, err := NewRun(tinyConfig(t, ref), Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := whole.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := metricLines(t, whole.Dir)

	for _, killAfter := range []int{4, 11} { // mid-SFT, mid-RL (metric lines written)
		t.Run(fmt.Sprintf("kill after %d lines", killAfter), func(t *testing.T) {
			runs := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperTrainProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), "AGENTRL_TEST_TRAIN_RUNS="+runs)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(runs, "tiny")
			metrics := filepath.Join(dir, "metrics.jsonl")
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			for {
				data, _ := os.ReadFile(metrics)
				if strings.Count(string(data), "\n") >= killAfter {
					break
				}
				select {
				case err := <-exited:
					t.Fatalf("training exited before it could be killed: %v", err)
				case <-time.After(5 * time.Millisecond):
				}
			}
			cmd.Process.Signal(syscall.SIGKILL)
			<-exited
			run, err := Resume(dir, Options{Envs: all.Builtins()})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("killed after %d metric lines; resuming at phase %d step %d", killAfter, run.state.Phase, run.state.Step)
			if _, err := run.Train(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := metricLines(t, dir)
			if len(got) != len(want) {
				t.Fatalf("resumed run has %d metric lines, uninterrupted %d", len(got), len(want))
			}
			for i := range want {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Fatalf("metric line %d differs:\nresumed       %v\nuninterrupted %v", i+1, got[i], want[i])
				}
			}
		})
	}
}
