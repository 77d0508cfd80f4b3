package cli

import (
	"os"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/config"
)

// readmeCommand returns the arguments of the first command in README.md's fenced blocks that
// starts with prefix, its continuation lines joined and single quotes removed.
func readmeCommand(t *testing.T, prefix string) []string {
	t.Helper()
	data, err := os.ReadFile("../../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		var args []string
		var cur strings.Builder
		quoted, in := false, false
		for _, r := range line {
			switch {
			case r == '\'':
				quoted, in = !quoted, true
			case r == ' ' && !quoted:
				if in {
					args = append(args, cur.String())
					cur.Reset()
					in = false
				}
			default:
				cur.WriteRune(r)
				in = true
			}
		}
		if in {
			args = append(args, cur.String())
		}
		return args
	}
	t.Fatalf("README.md has no command starting %q", prefix)
	return nil
}

// Item 2 of issue 29: the README's learner-and-workers command runs as written on every preset.
func TestReadmeWorkersExampleOnEveryPreset(t *testing.T) {
	args := readmeCommand(t, "agentrl train --preset … --set phases.rl.rl.async")
	var sets []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--set" && i+1 < len(args) {
			sets = append(sets, args[i+1])
			i++
		}
	}
	if len(sets) < 3 {
		t.Fatalf("the README's command has %d --set: %q", len(sets), args)
	}
	t.Setenv("AGENTRL_WORKER_TOKEN", "t0ken")
	for _, preset := range config.Presets() {
		if _, err := config.Load(testEnvs(), preset, "", sets); err != nil {
			t.Errorf("the README's workers command on preset %s: %v", preset, err)
		}
	}
}

// The README's configuration examples load as written (item 5 of issue 29, for configurations):
// the MCP block appended to the calc preset, and the replay example's override.
func TestReadmeConfigExamplesLoad(t *testing.T) {
	data, err := os.ReadFile("../../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	const open = "cat >> run.yaml <<'EOF'\n"
	i := strings.Index(text, open)
	if i < 0 {
		t.Fatal("README.md has no MCP example appended to run.yaml")
	}
	block := text[i+len(open):]
	block = block[:strings.Index(block, "\nEOF\n")+1]
	preset, err := config.Preset("calc")
	if err != nil {
		t.Fatal(err)
	}
	base, err := config.Encode(preset)
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/run.yaml"
	if err := os.WriteFile(path, append(base, block...), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(testEnvs(), "", path, nil)
	if err != nil {
		t.Fatalf("the README's MCP example: %v", err)
	}
	if c.MCP == nil || len(c.MCP.Servers) != 1 {
		t.Fatalf("the README's MCP example loaded without its server: %+v", c.MCP)
	}
	args := readmeCommand(t, "$ agentrl train --set")
	if _, err := config.Load(testEnvs(), "", "", args[len(args)-1:]); err != nil || !strings.HasPrefix(args[len(args)-1], "phases.") {
		t.Fatalf("the README's replay example %q: %v", args, err)
	}
}
