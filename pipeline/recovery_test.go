package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/traj"
)

// trainedRun trains a tiny run to the end, keeping every checkpoint, and returns its directory.
func trainedRun(t *testing.T, extra ...string) string {
	t.Helper()
	run, err := NewRun(tinyConfig(t, t.TempDir(), append([]string{"checkpoint.keep=20"}, extra...)...), Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	return run.Dir
}

// copyRun copies a run directory, so that each case damages its own.
func copyRun(t *testing.T, dir string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "runs", filepath.Base(dir))
	if err := os.CopyFS(dst, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// progressOf reads a checkpoint's progress without loading its weights.
func progressOf(t *testing.T, dir, name string) progressState {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, checkpointsDir, name, "trainer_state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ts struct {
		Extra progressState `json:"extra"`
	}
	if err := json.Unmarshal(data, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Extra
}

func writeLatest(t *testing.T, dir, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, checkpointsDir, latestFile), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// resumeAndTrain resumes dir and trains it to the end, returning the run's output.
func resumeAndTrain(t *testing.T, dir string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	run, err := Resume(dir, Options{Envs: all.Builtins(), Out: &out})
	if err != nil {
		return out.String(), err
	}
	_, err = run.Train(context.Background())
	return out.String(), err
}

// Item 3 of issue 13: LATEST is checked, never followed out of the run, and a missing, empty,
// torn or damaged one falls back to the newest intact checkpoint; a run that trained is never
// silently started over.
func TestResumeLatestFallback(t *testing.T) {
	base := trainedRun(t)
	want := metricLines(t, base)
	mid := "rl-p1.s000002" // the checkpoint after RL step 2 of 4
	if _, err := os.Stat(filepath.Join(base, checkpointsDir, mid)); err != nil {
		t.Fatal(err)
	}
	damage := func(dir, name string) {
		if err := os.Truncate(filepath.Join(dir, checkpointsDir, name, "model.safetensors"), 100); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		setup   func(dir string)
		from    string // the checkpoint resumed from ("" for an error)
		wantErr string
		wantOut string
	}{
		{"LATEST missing", func(dir string) {
			os.Remove(filepath.Join(dir, checkpointsDir, latestFile))
		}, "rl-p1.s000004", "", "LATEST is missing; resuming from rl-p1.s000004, the newest intact checkpoint"},
		{"LATEST empty", func(dir string) { writeLatest(t, dir, "") }, "rl-p1.s000004", "", "LATEST is empty"},
		{"LATEST torn", func(dir string) { writeLatest(t, dir, "rl-p1.s0") }, "rl-p1.s000004", "", "resuming from rl-p1.s000004"},
		{"LATEST garbage", func(dir string) { writeLatest(t, dir, "\x00\x00\x00\x00") }, "rl-p1.s000004", "", "not a checkpoint name"},
		{"LATEST names a damaged checkpoint", func(dir string) {
			writeLatest(t, dir, mid+"\n")
			damage(dir, mid)
		}, "rl-p1.s000004", "", "does not load"},
		{"the newest two damaged", func(dir string) {
			damage(dir, "rl-p1.s000004")
			damage(dir, mid)
		}, "sft-p0.s000006", "", "resuming from sft-p0.s000006"},
		{"LATEST leaves the run", func(dir string) {
			// A valid checkpoint outside the run directory: it must not be used.
			if err := os.CopyFS(filepath.Join(filepath.Dir(dir), "outside"), os.DirFS(filepath.Join(dir, checkpointsDir, mid))); err != nil {
				t.Fatal(err)
			}
			writeLatest(t, dir, "../../outside\n")
		}, "", "must hold the name of a folder in", ""},
		{"no checkpoint left", func(dir string) {
			os.Remove(filepath.Join(dir, checkpointsDir, latestFile))
			names, _ := stepCheckpoints(filepath.Join(dir, checkpointsDir))
			for _, n := range names {
				damage(dir, n)
			}
		}, "", "refusing to start it over", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyRun(t, base)
			tc.setup(dir)
			var out bytes.Buffer
			run, err := Resume(dir, Options{Envs: all.Builtins(), Out: &out})
			if tc.from == "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want an error saying %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer run.Close()
			if !run.restored || !reflect.DeepEqual(run.state, progressOf(t, dir, tc.from)) {
				t.Fatalf("resumed at %+v (restored %v), want checkpoint %s", run.state, run.restored, tc.from)
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Fatalf("output %q does not say %q", out.String(), tc.wantOut)
			}
			run.Close()
			if _, err := resumeAndTrain(t, dir); err != nil {
				t.Fatal(err)
			}
			if got := metricLines(t, dir); !reflect.DeepEqual(got, want) {
				t.Fatalf("metrics after resuming from %s differ from the uninterrupted run's", tc.from)
			}
		})
	}
}

// A run killed before its first checkpoint recorded only the evaluation before training: it
// starts over, and says so.
func TestResumeBeforeFirstCheckpointStartsOver(t *testing.T) {
	base := trainedRun(t)
	dir := copyRun(t, base)
	if err := os.RemoveAll(filepath.Join(dir, checkpointsDir)); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "trajectories.atrs"))
	data, _ := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	first, _, _ := bytes.Cut(data, []byte("\n"))
	os.WriteFile(filepath.Join(dir, "metrics.jsonl"), append(first, '\n'), 0o644)
	out, err := resumeAndTrain(t, dir)
	if err != nil || !strings.Contains(out, "starts over") {
		t.Fatalf("%v\n%s", err, out)
	}
	if got, want := metricLines(t, dir), metricLines(t, base); !reflect.DeepEqual(got, want) {
		t.Fatal("the run started over differs from the uninterrupted one")
	}
}

// init is saved absolute and only a fresh start needs it: a run whose init checkpoint was given
// by a relative path, and is gone since, resumes from any directory.
func TestResumeWithoutInit(t *testing.T) {
	base := trainedRun(t)
	work := t.TempDir()
	if err := os.CopyFS(filepath.Join(work, "init"), os.DirFS(filepath.Join(base, checkpointsDir, "sft-p0.s000006"))); err != nil {
		t.Fatal(err)
	}
	t.Chdir(work)
	c, err := config.Load(all.Builtins(), "", "", []string{
		"runs_dir=runs", "name=fromsft", "init=init", "seed=3",
		"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64", "model.max_seq=320",
		"rollout.max_context=320", "rollout.engine_slots=16",
		"phases.sft.steps=2", "phases.sft.optim.warmup=1", "phases.sft.sft.demos=16", "phases.sft.sft.batch_size=8",
		"phases.rl.steps=4", "phases.rl.optim.warmup=1", "phases.rl.rl.groups_per_step=2", "phases.rl.rl.group_size=4",
		"eval.tasks=4", "checkpoint.every=2",
	})
	if err != nil {
		t.Fatal(err)
	}
	run, err := NewRun(c, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	dir, _ := filepath.Abs(run.Dir)
	saved, _ := os.ReadFile(filepath.Join(dir, "config.yaml"))
	if !strings.Contains(string(saved), "init: "+filepath.Join(work, "init")) {
		t.Fatalf("config.yaml does not hold init as an absolute path:\n%s", saved)
	}
	if err := os.RemoveAll(filepath.Join(work, "init")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	writeLatest(t, dir, "rl-p1.s000002\n")
	if out, err := resumeAndTrain(t, dir); err != nil {
		t.Fatalf("resume without the init checkpoint: %v\n%s", err, out)
	}
}

// Item 4 of issue 13: a torn or garbled metrics.jsonl is cut back to its intact lines up to the
// checkpoint; resuming never appends after a half line and loses no complete line.
func TestResumeTornMetrics(t *testing.T) {
	base := trainedRun(t)
	want := metricLines(t, base)
	mid := "rl-p1.s000002"
	off := progressOf(t, base, mid).MetricsOffset
	full, err := os.ReadFile(filepath.Join(base, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	covered := bytes.Count(full[:off], []byte("\n")) // lines the checkpoint covers
	for _, tc := range []struct {
		name    string
		damage  func([]byte) []byte
		dropped int // index of the line lost (-1: none)
	}{
		{"torn inside the checkpoint's lines", func(b []byte) []byte { return b[:off-7] }, covered - 1},
		{"torn after the checkpoint", func(b []byte) []byte { return b[:off+9] }, -1},
		{"garbled line", func(b []byte) []byte {
			i := bytes.IndexByte(b, '\n') + 1 // the second line
			for j := i; b[j] != '\n'; j++ {
				b[j] = '#'
			}
			return b
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyRun(t, base)
			writeLatest(t, dir, mid+"\n")
			if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), tc.damage(bytes.Clone(full)), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := resumeAndTrain(t, dir)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			got := metricLines(t, dir) // fails on any line that is not JSON
			exp := want
			if tc.dropped >= 0 {
				exp = append(append([]map[string]any{}, want[:tc.dropped]...), want[tc.dropped+1:]...)
				if !strings.Contains(out, "metrics.jsonl") {
					t.Fatalf("the output does not report the damage: %s", out)
				}
			}
			if !reflect.DeepEqual(got, exp) {
				t.Fatalf("resumed metrics: %d lines, want %d", len(got), len(exp))
			}
		})
	}
}

// Item 5 of issue 13: resuming a run whose trajectory file is damaged before the checkpoint
// says how to repair it, and resumes after the repair.
func TestResumeDamagedTrajectoriesHintsRepair(t *testing.T) {
	base := trainedRun(t)
	dir := copyRun(t, base)
	mid := "rl-p1.s000002"
	writeLatest(t, dir, mid+"\n")
	path := filepath.Join(dir, "trajectories.atrs")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[traj.StreamHeaderLen+30] ^= 0xff // inside the first record
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = resumeAndTrain(t, dir)
	if !errors.Is(err, traj.ErrCorrupt) || !strings.Contains(err.Error(), "agentrl traj repair "+dir) {
		t.Fatalf("resume of a damaged trajectory file: %v", err)
	}
	rep, err := traj.Repair(path, "")
	if err != nil || len(rep.Damage) != 1 {
		t.Fatalf("repair: %+v, %v", rep, err)
	}
	if out, err := resumeAndTrain(t, dir); err != nil {
		t.Fatalf("resume after repair: %v\n%s", err, out)
	}
}

// Item 6 of issue 13: a second training of the same run directory fails at once, naming the
// process that holds it; the lock goes with the run.
func TestRunDirectoryLock(t *testing.T) {
	dir := copyRun(t, trainedRun(t))
	first, err := Resume(dir, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Resume(dir, Options{Envs: all.Builtins()})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", os.Getpid())) {
		t.Fatalf("second resume of a run in use: %v", err)
	}
	if _, err := first.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	again, err := Resume(dir, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatalf("resume after the first training returned: %v", err)
	}
	again.Close()
}
