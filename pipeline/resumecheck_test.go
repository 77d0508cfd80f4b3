package pipeline

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fileSizes records the lengths of a run's metrics and trajectories, which a refused resume must
// leave as they are.
func fileSizes(t *testing.T, dir string) [2]int64 {
	t.Helper()
	var out [2]int64
	for i, n := range []string{"metrics.jsonl", "trajectories.atrs"} {
		st, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = st.Size()
	}
	return out
}

// Item 17 of issue 29: a checkpoint that is not the run's (another run's, of another size, or
// renamed to another step) is never resumed from, and nothing is cut.
func TestResumeRefusesForeignCheckpoint(t *testing.T) {
	own := trainedRun(t)
	other := trainedRun(t, "model.dim=16", "model.heads=1", "model.hidden=32")
	mid := "rl-p1.s000002"

	put := func(t *testing.T, dst, src, name string) {
		t.Helper()
		ck := filepath.Join(dst, checkpointsDir)
		if err := os.RemoveAll(ck); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(filepath.Join(ck, name), os.DirFS(filepath.Join(src, checkpointsDir, mid))); err != nil {
			t.Fatal(err)
		}
		writeLatest(t, dst, name+"\n")
	}
	cases := []struct {
		name, want string
		prep       func(t *testing.T, dir string)
	}{
		{"another run of another size", "another run", func(t *testing.T, dir string) { put(t, dir, other, mid) }},
		{"another run, same config", "another run", func(t *testing.T, dir string) {
			twin := copyRun(t, own)
			if err := os.WriteFile(filepath.Join(twin, runIDFile), []byte(newRunID()+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			put(t, dir, twin, mid)
			// The twin is the same run under another id: its checkpoint records that id.
			data, _ := os.ReadFile(filepath.Join(twin, runIDFile))
			raw, err := os.ReadFile(filepath.Join(dir, checkpointsDir, mid, "trainer_state.json"))
			if err != nil {
				t.Fatal(err)
			}
			id, _ := readRunID(own)
			raw = bytes.ReplaceAll(raw, []byte(id), bytes.TrimSpace(data))
			if err := os.WriteFile(filepath.Join(dir, checkpointsDir, mid, "trainer_state.json"), raw, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"own checkpoint renamed to a later step", "not the step its name says", func(t *testing.T, dir string) {
			put(t, dir, own, "rl-p1.s000003")
		}},
		{"run.id deleted", "run.id is missing", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, runIDFile)); err != nil {
				t.Fatal(err)
			}
			writeLatest(t, dir, mid+"\n")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyRun(t, own)
			before := fileSizes(t, dir)
			c.prep(t, dir)
			out, err := resumeAndTrain(t, dir)
			if err == nil || !strings.Contains(err.Error()+out, c.want) {
				t.Fatalf("resume: err %v, output:\n%s\nwant a refusal naming %q", err, out, c.want)
			}
			if got := fileSizes(t, dir); got != before {
				t.Errorf("metrics and trajectories were %v bytes, now %v: a refused resume cut them", before, got)
			}
		})
	}
}

// Item 18 of issue 29: a resumed run's config.yaml must match the configuration its checkpoints
// were trained with, except for the settings documented as safe to change.
func TestResumeRefusesChangedConfig(t *testing.T) {
	own := trainedRun(t)
	want := metricLines(t, own)
	edit := func(t *testing.T, dir, old, new string) {
		t.Helper()
		p := filepath.Join(dir, "config.yaml")
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte(old)) {
			t.Fatalf("config.yaml has no %q:\n%s", old, data)
		}
		if err := os.WriteFile(p, bytes.Replace(data, []byte(old), []byte(new), 1), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, old, new, want string
	}{
		{"rl steps shortened", "steps: 4", "steps: 3", "phases[1].steps was 4, is 3"},
		{"model dim", "dim: 32", "dim: 64", "model.dim was 32, is 64"},
		{"vocabulary", "vocab_size: 320", "vocab_size: 300", "tokenizer.vocab_size was 320, is 300"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyRun(t, own)
			writeLatest(t, dir, "rl-p1.s000002\n")
			before := fileSizes(t, dir)
			edit(t, dir, c.old, c.new)
			out, err := resumeAndTrain(t, dir)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("resume: err %v, output:\n%s\nwant a refusal naming %q", err, out, c.want)
			}
			if got := fileSizes(t, dir); got != before {
				t.Errorf("metrics and trajectories were %v bytes, now %v: a refused resume cut them", before, got)
			}
		})
	}
	t.Run("checkpoint.keep is safe to change", func(t *testing.T) {
		dir := copyRun(t, own)
		writeLatest(t, dir, "rl-p1.s000002\n")
		edit(t, dir, "keep: 20", "keep: 5")
		if out, err := resumeAndTrain(t, dir); err != nil {
			t.Fatalf("resume: %v\n%s", err, out)
		}
		if got := metricLines(t, dir); len(got) != len(want) {
			t.Fatalf("resumed run has %d metrics lines, the uninterrupted one %d", len(got), len(want))
		}
	})
}

// Item 26 of issue 29: a resume that finds metrics.jsonl or trajectories.atrs deleted says so.
func TestResumeNotesDeletedLogs(t *testing.T) {
	own := trainedRun(t)
	for _, name := range []string{"metrics.jsonl", "trajectories.atrs"} {
		t.Run(name, func(t *testing.T) {
			dir := copyRun(t, own)
			writeLatest(t, dir, "rl-p1.s000002\n")
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			out, err := resumeAndTrain(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "warning: "+name+" is missing") {
				t.Errorf("resume with %s deleted said nothing of it:\n%s", name, out)
			}
		})
	}
}

func TestConfigDiff(t *testing.T) {
	a := []byte("seed: 1\nphases:\n- name: sft\n  steps: 4\n- name: rl\n  steps: 8\ncheckpoint: {keep: 3}\n")
	b := []byte("seed: 1\nphases:\n- name: sft\n  steps: 4\n- name: rl\n  steps: 6\ncheckpoint: {keep: 4}\n")
	d, err := configDiff(a, b)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range d {
		got = append(got, c.String())
	}
	want := []string{"checkpoint.keep was 3, is 4", "phases[1].steps was 8, is 6"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("diff %q, want %q", got, want)
	}
	if !resumeSafeKey("checkpoint.keep") || resumeSafeKey("phases[1].steps") || !resumeSafeKey("phases[1].rl.async.workers.url") {
		t.Error("resumeSafeKey")
	}
}
