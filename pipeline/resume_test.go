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

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/all"
)

// tinyConfig is a complete run small enough for a unit test: a cold start and a few RL steps of
// a 1-layer model on calc. test-ones (onesEnvs) may be named too, for a reward the tiny policy
// earns from its first step.
func tinyConfig(t testing.TB, runs string, extra ...string) config.Config {
	t.Helper()
	c, err := config.Load(testEnvs(), "", "", append([]string{
		"runs_dir=" + runs, "name=tiny",
		"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64", "model.max_seq=320",
		"rollout.max_context=320", "rollout.engine_slots=16", "tokenizer.vocab_size=320", "tokenizer.corpus_samples=200",
		"phases.sft.steps=6", "phases.sft.optim.warmup=2", "phases.sft.sft.demos=64", "phases.sft.sft.batch_size=8",
		"phases.rl.steps=4", "phases.rl.optim.warmup=1", "phases.rl.rl.groups_per_step=2", "phases.rl.rl.group_size=4",
		"eval.tasks=8", "checkpoint.every=2",
	}, extra...))
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
	var extra []string
	if e := os.Getenv("AGENTRL_TEST_TRAIN_SETS"); e != "" {
		extra = strings.Split(e, "|")
	}
	run, err := NewRun(tinyConfig(t, dir, extra...), Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// scheduleSets gives both phases a warmup and a cosine decay, and the RL phase several
// minibatches and epochs, so that the learning rate differs at every step and a schedule that
// counted optimizer updates, or restarted its count on resume, would show in the metrics. The
// tiny policy solves nothing, so every group is kept (no dynamic sampling) and an entropy bonus
// gives the updates a gradient.
var scheduleSets = []string{
	"phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.loss.entropy_coef=0.01",
	"phases.sft.optim.warmup=3", "phases.sft.optim.min_lr_ratio=0.1",
	"phases.rl.steps=6", "phases.rl.optim.warmup=3", "phases.rl.optim.min_lr_ratio=0.1",
	"phases.rl.rl.minibatches=2", "phases.rl.rl.epochs=2",
}

// The learning rate of every step is the phase schedule's at that step, however many optimizer
// updates the step takes.
func TestScheduleCountsPhaseSteps(t *testing.T) {
	c := tinyConfig(t, t.TempDir(), scheduleSets...)
	run, err := NewRun(c, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	lines := metricLines(t, run.Dir)
	step := map[string]int{}
	for i, m := range lines {
		ph, _ := m["phase"].(string)
		if _, ok := m["optim/lr"]; !ok {
			continue // an evaluation's line
		}
		p := c.Phases[0]
		if ph == c.Phases[1].Name {
			p = c.Phases[1]
		}
		s, err := p.Optim.Schedule(p.Steps)
		if err != nil {
			t.Fatal(err)
		}
		lr, _ := m["optim/lr"].(float64)
		if ph == "rl" && m["signal/effective_batch"] == nil {
			step[ph]++
			continue // nothing trained, no learning rate
		}
		if want := float64(s.LR(step[ph])); lr != want {
			t.Fatalf("line %d: %s step %d at lr %v, want the schedule's %v", i+1, ph, step[ph]+1, lr, want)
		}
		step[ph]++
	}
	if step["sft"] != 6 || step["rl"] != 6 {
		t.Fatalf("steps seen: %v", step)
	}
}

// A run killed with SIGKILL in the middle of a step and resumed writes the same metrics as a run
// that was never interrupted.
func TestResumeAfterKill(t *testing.T) {
	testResumeAfterKill(t, nil, []int{4, 11}) // mid-SFT, mid-RL (metric lines written)
}

// The same with a learning-rate schedule that moves at every step, resumed at several points of
// both phases.
func TestResumeAfterKillWithSchedule(t *testing.T) {
	testResumeAfterKill(t, scheduleSets, []int{3, 11, 13})
}

func testResumeAfterKill(t *testing.T, extra []string, killPoints []int) {
	ref := t.TempDir()
	whole, err := NewRun(tinyConfig(t, ref, extra...), Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := whole.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := metricLines(t, whole.Dir)

	for _, killAfter := range killPoints {
		t.Run(fmt.Sprintf("kill after %d lines", killAfter), func(t *testing.T) {
			runs := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperTrainProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), "AGENTRL_TEST_TRAIN_RUNS="+runs, "AGENTRL_TEST_TRAIN_SETS="+strings.Join(extra, "|"))
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
			run, err := Resume(dir, Options{Envs: testEnvs()})
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
