package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// agentrl replay trains a recorded run's RL phase again without environments and reports that
// its metrics are the run's; a damaged recording is an error, never a silent success.
func TestReplayCommand(t *testing.T) {
	runs := t.TempDir()
	if out, err := runCLI(t, tinyTrain(runs)...); err != nil {
		t.Fatalf("train: %v\n%s", err, out)
	}
	dir := filepath.Join(runs, "cli")
	out, err := runCLI(t, "replay", dir)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	if !strings.Contains(out, "replayed 2 RL steps") || !strings.Contains(out, "all 2 RL metrics lines identical") {
		t.Fatalf("replay output:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "replay", "metrics.jsonl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "trajectories.atrs")); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, "replay", dir); err == nil {
		t.Fatalf("replay without a recording succeeded:\n%s", out)
	}
}
