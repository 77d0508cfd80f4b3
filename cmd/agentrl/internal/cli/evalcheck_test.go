package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/pipeline"
)

// checkPromptNote is item 9 of issue 29: a checkpoint trained on calc's plain prompt, evaluated
// with MCP tools attached (config), gets a warning that the prompt differs; without them, none.
func checkPromptNote(t *testing.T, ck, config string) {
	t.Helper()
	envs := all.Builtins()
	spec, err := envs.Lookup("calc")
	if err != nil {
		t.Fatal(err)
	}
	sys, err := pipeline.SystemPrompt(context.Background(), envs.New, "calc", spec.Heldout.Lo)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(map[string]string{"calc": sys})
	if err := os.WriteFile(filepath.Join(ck, "prompts.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	const warn = "differs from the one the checkpoint was trained with"
	out, err := runCLI(t, "eval", "--checkpoint", ck, "--env", "calc", "--tasks", "1", "--k", "0", "--max-turns", "1", "--config", config)
	if err != nil || !strings.Contains(out, warn) {
		t.Fatalf("eval with tools the checkpoint was not trained with: %v, no warning:\n%s", err, out)
	}
	out, err = runCLI(t, "eval", "--checkpoint", ck, "--env", "calc", "--tasks", "1", "--k", "0", "--max-turns", "1")
	if err != nil || strings.Contains(out, warn) {
		t.Fatalf("eval with the training prompt: %v, warned:\n%s", err, out)
	}
}
