package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

// A max_context that the prompt alone fills fails at the start of the run, naming the setting
// and the prompt's length, before evaluation or demonstrations (item 7).
func TestPromptOverMaxContextFailsFirst(t *testing.T) {
	cfg := tinyConfig(t, t.TempDir(), "rollout.max_context=40")
	run, err := NewRun(cfg, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Train(context.Background())
	if err == nil || !strings.Contains(err.Error(), "rollout.max_context 40 leaves no room for calc's prompt") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(run.Dir, "eval-before.json")); err == nil {
		t.Fatal("the run evaluated before refusing its context")
	}
}
