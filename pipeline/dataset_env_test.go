package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/calc"
	"github.com/agentrl/agentrl/traj"
)

// calcTasksJSONL exports n of calc's tasks (seeds from 0) with their exact answers, as a user's
// dataset would hold them; every seventh row lacks its answer.
func calcTasksJSONL(t testing.TB, n int) string {
	t.Helper()
	var b strings.Builder
	for seed := range int64(n) {
		task := calc.NewTask(seed)
		row := map[string]any{"id": fmt.Sprint(seed), "question": task.Question, "answer": task.Answer.RatString(), "ops": task.Ops}
		if seed%7 == 6 {
			delete(row, "answer")
		}
		line, _ := json.Marshal(row)
		b.Write(append(line, '\n'))
	}
	path := filepath.Join(t.TempDir(), "calc.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func datasetEntry(path string) string {
	return fmt.Sprintf(`[{name: calctasks, weight: 1, tasks: {path: %q, prompt: "{question}", answer: answer, id: id, `+
		`system: "Reply: Answer: <number>", split: {held_out: 0.2}, verifier: rational, level: ops}}]`, path)
}

// A run trains on a task dataset end to end: the supervised phase on its reference answers, RL
// steps graded by the rational verifier, evaluation on its held-out rows; the malformed rows are
// counted in the log.
func TestDatasetEnvRun(t *testing.T) {
	path := calcTasksJSONL(t, 300)
	cfg := tinyConfig(t, t.TempDir(), "phases.sft.envs="+datasetEntry(path), "phases.rl.envs=[{name: calctasks, weight: 1}]",
		"phases.rl.steps=2", "eval.tasks=4", "eval.samples=1")
	var out lockedBuilder
	run, err := NewRun(cfg, Options{Envs: testEnvs(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "env calctasks: tasks of "+path) || !strings.Contains(out.String(), "skipped rows: missing_field 42") {
		t.Fatalf("the log does not describe the dataset:\n%s", out.String())
	}
	f, err := os.Open(filepath.Join(run.Dir, "trajectories.atrs"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := traj.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	demosRight, rl := 0, 0
	for tr, err := range rd.All() {
		if err != nil {
			t.Fatal(err)
		}
		if tr.Env != "calctasks" || tr.Status.Failed() || (tr.Reward != 0 && tr.Reward != 1) {
			t.Fatalf("episode %s: env %q status %v reward %v (%s)", tr.ID, tr.Env, tr.Status, tr.Reward, tr.Error)
		}
		for _, kv := range tr.Meta {
			if kv.Key == "phase" && kv.Value == "sft" && tr.Reward == 1 {
				demosRight++
			}
			if kv.Key == "phase" && kv.Value == "rl" {
				rl++
			}
		}
	}
	if demosRight == 0 || rl < 16 {
		t.Fatalf("%d right demonstrations, %d rl episodes", demosRight, rl)
	}
}

// A dataset that cannot be used stops the run at start with the file and the reason; the
// configuration refuses a missing file before any run directory is made.
func TestDatasetEnvErrors(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	os.WriteFile(empty, []byte(`{"question": "a"}`+"\n"), 0o644)
	cfg := tinyConfig(t, t.TempDir(), "phases.sft.envs="+datasetEntry(empty), "phases.rl.envs=[{name: calctasks, weight: 1}]")
	run, err := NewRun(cfg, Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err == nil || !strings.Contains(err.Error(), "no task") || !strings.Contains(err.Error(), "missing_field 1") {
		t.Fatalf("train on a dataset of no usable row: %v", err)
	}
	_, err = config.Load(testEnvs(), "", "", []string{"phases.rl.envs=" + datasetEntry("/nonexistent/x.jsonl")})
	if err == nil || !strings.Contains(err.Error(), "tasks.path") {
		t.Fatalf("a missing file: %v", err)
	}
}
