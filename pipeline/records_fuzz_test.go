package pipeline

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentrl/agentrl/dist"
	"github.com/agentrl/agentrl/env/all"
)

// FuzzWorkerEnvConfig: a task's env_config comes from the wire; the worker makes an environment
// from it or refuses it, never panics.
func FuzzWorkerEnvConfig(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"difficulty": {"levels": [1, 4], "weights": [1, 3]}}`, `{"difficulty": {"levels": [99]}}`,
		`{"difficulty": null}`, `{"x": 1}`, `[1]`, `{"difficulty": {"levels": [1], "weights": [-1]}}`, `{"difficulty": {"levels": []}}`} {
		f.Add(s)
	}
	envs := all.Builtins()
	f.Fuzz(func(t *testing.T, cfg string) {
		e, err := workerEnv(envs, dist.Task{TaskID: "t", Env: "calc", EnvConfig: []byte(cfg)})
		if err == nil && e == nil {
			t.Fatal("no environment and no error")
		}
	})
}

// FuzzCheckpointRecords: a checkpoint's prompts.json and a run's run.id are read from disk;
// whatever they hold gives a note or an error, never a panic.
func FuzzCheckpointRecords(f *testing.F) {
	for _, s := range []string{`{"calc": "You are"}`, `{}`, `null`, `[1]`, `{"calc": 1}`, "0123456789abcdef0123456789abcdef\n", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, content string) {
		dir := t.TempDir()
		for _, name := range []string{promptsFile, runIDFile} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		_ = PromptNote(dir, "calc", "You are")
		id, err := readRunID(dir)
		if err == nil && id != "" && !runIDRE.MatchString(id) {
			t.Fatalf("run id %q accepted", id)
		}
	})
}
