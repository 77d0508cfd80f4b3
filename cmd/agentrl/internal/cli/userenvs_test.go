package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/remote"
	"github.com/agentrl/agentrl/env/remote/remotetest"
)

// remoteConfig writes a configuration whose rl phase defines arith as the server at url.
func remoteConfig(t *testing.T, url string, extra string) string {
	path := filepath.Join(t.TempDir(), "run.yaml")
	data := fmt.Sprintf("phases:\n  - name: rl\n    kind: rl\n    envs:\n      - {name: arith, weight: 1, remote: {url: %q%s}}\n", url, extra)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// env list --config lists the configured remote environment with the seed ranges and tools its
// server reports; eval --env evaluates a checkpoint on it.
func TestConfiguredRemoteEnv(t *testing.T) {
	u := remotetest.StartArith(t)
	cfg := remoteConfig(t, u, "")
	out, err := runCLI(t, "env", "list", "--config", cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !regexp.MustCompile(`arith\s+\[0, 1000000\)\s+\[1000000, 1010000\)\s+remote "arith" at ` + regexp.QuoteMeta(u) + ` \(1 tools, expert true\)`).MatchString(out) {
		t.Fatalf("env list lacks the remote environment:\n%s", out)
	}
	out, err = runCLI(t, "env", "list", "--json", "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var md remote.Metadata
		if err := json.Unmarshal([]byte(l), &md); err != nil {
			t.Fatal(err)
		}
		found = found || (md.Name == "arith" && md.Expert && len(md.Tools) == 1)
	}
	if !found {
		t.Fatalf("env list --json lacks arith:\n%s", out)
	}

	ck := tinyCheckpoint(t, "What is 1 + 2? <tool_call> calculator 3")
	out, err = runCLI(t, "eval", "--checkpoint", ck, "--env", "arith", "--config", cfg, "--tasks", "3", "--k", "0", "--max-turns", "2", "--json")
	if err != nil {
		t.Fatalf("eval --env arith: %v\n%s", err, out)
	}
	if !strings.Contains(out, `"env":"arith"`) && !strings.Contains(out, `"env": "arith"`) {
		t.Fatalf("eval output does not name arith:\n%s", out)
	}

	if out, err := runCLI(t, "env", "list", "--config", remoteConfig(t, "http://127.0.0.1:1", ", unreachable: 500ms")); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("env list with a server that is not there: %v\n%s", err, out)
	}
}

// env list --config lists a dataset environment with its split; a worker whose --config names a
// remote environment nobody serves says so instead of taking tasks.
func TestConfiguredDatasetAndWorker(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "d.csv")
	var rows strings.Builder
	rows.WriteString("q,a\n")
	for i := range 40 {
		fmt.Fprintf(&rows, "What is %d?,%d\n", i, i)
	}
	os.WriteFile(data, []byte(rows.String()), 0o644)
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("phases:\n  - name: rl\n    kind: rl\n    envs:\n      - {name: mytasks, weight: 1, tasks: {path: %q, prompt: q, answer: a, split: {held_out: 0.25}, verifier: numeric}}\n", data)), 0o644)
	out, err := runCLI(t, "env", "list", "--config", cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !regexp.MustCompile(`mytasks\s+\[0, \d+\)\s+\[\d+, 40\)\s+tasks of ` + regexp.QuoteMeta(data)).MatchString(out) {
		t.Fatalf("env list lacks the dataset:\n%s", out)
	}
	out, err = runCLI(t, "worker", "--connect", "nats://127.0.0.1:1", "--run", "x", "--config", remoteConfig(t, "http://127.0.0.1:1", ", unreachable: 300ms"))
	if err == nil || !strings.Contains(err.Error(), "http://127.0.0.1:1") || !strings.Contains(err.Error(), "no server") {
		t.Fatalf("worker with an unserved remote environment: %v\n%s", err, out)
	}
}
