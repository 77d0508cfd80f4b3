package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/env/mcp/mcptest"
	"github.com/agentrl/agentrl/traj"
)

// mcpEchoActHook, when set, runs on every expert action of test-mcp-echo (a test's way to act
// mid-run).
var mcpEchoActHook func()

// mcpEnvs is the built-in environments and test-mcp-echo.
func mcpEnvs() *env.Registry {
	r := all.Builtins()
	if err := r.Register(mcptest.EchoSpec(func() {
		if mcpEchoActHook != nil {
			mcpEchoActHook()
		}
	})); err != nil {
		panic(err)
	}
	return r
}

// mcpRunYAML is a complete, small run configuration (one supervised phase on test-mcp-echo,
// whose expert calls the MCP tool) with mcpBlock appended, as a user would write it.
func mcpRunYAML(t *testing.T, runs, mcpBlock string) string {
	t.Helper()
	c, err := config.Load(mcpEnvs(), "", "", []string{
		"runs_dir=" + runs, "name=mcp",
		"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64", "model.max_seq=256",
		"rollout.max_context=256", "rollout.max_tokens_per_turn=48", "rollout.max_turns=3", "rollout.engine_slots=8",
		"tokenizer.vocab_size=320", "tokenizer.corpus_samples=50",
		"phases=[{name: sft, kind: sft, envs: [{name: test-mcp-echo, weight: 1}], steps: 2, " +
			"optim: {lr: 0.001, min_lr_ratio: 1, warmup: 0, weight_decay: 0, grad_clip: 1, beta1: 0.9, beta2: 0.99}, " +
			"sft: {demos: 12, noise: 0, batch_size: 4, keep: all}}]",
		"eval.tasks=2", "eval.samples=1", "checkpoint.every=1",
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := config.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(path, append(data, []byte(mcpBlock)...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A run configured from YAML connects the stdio server once, attaches its echo tool to the
// environment, and the episodes call it: every demonstration of the supervised phase holds an
// ev_echo call whose result is the server's reply, and the reward the environment gave for
// answering with it. When the run ends the server has exited.
func TestMCPRunFromYAML(t *testing.T) {
	serverDir := t.TempDir()
	path := mcpRunYAML(t, t.TempDir(), mcptest.StdioBlock(t, serverDir))
	cfg, err := config.Load(mcpEnvs(), "", path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	run, err := NewRun(cfg, Options{Envs: mcpEnvs(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "mcp tools: test-mcp-echo gets ev_echo") {
		t.Errorf("the run's log does not say what was attached:\n%s", out.String())
	}
	if pid := mcptest.ServerPID(t, serverDir); !mcptest.ProcessGone(pid) {
		t.Errorf("server process %d still exists after the run", pid)
	}
	saved, err := os.ReadFile(filepath.Join(run.Dir, "config.yaml"))
	if err != nil || !strings.Contains(string(saved), "prefix: ev_") {
		t.Fatalf("the run directory's config lacks the mcp block: %v\n%s", err, saved)
	}

	demos := 0
	for _, tr := range readTrajs(t, run.Dir) {
		demos++
		if tr.Status != traj.StatusOK || tr.Reward != 1 {
			t.Errorf("episode %s: status %v reward %v (%s), want ok and 1", tr.ID, tr.Status, tr.Reward, tr.Error)
			continue
		}
		want := fmt.Sprintf("Echo: w%d", tr.TaskSeed)
		if len(tr.Turns) < 1 || len(tr.Turns[0].ToolCalls) != 1 {
			t.Fatalf("episode %s: no tool call in the first turn: %+v", tr.ID, tr.Turns)
		}
		if c := tr.Turns[0].ToolCalls[0]; c.Name != "ev_echo" || c.Result != want || c.Error != "" {
			t.Errorf("episode %s: tool call %+v, want ev_echo answering %q", tr.ID, c, want)
		}
	}
	if demos != 12 {
		t.Fatalf("%d demonstrations recorded, want 12", demos)
	}
}

// A run that is cancelled mid-phase returns and leaves no server running.
func TestMCPRunCancelledClosesServers(t *testing.T) {
	serverDir := t.TempDir()
	cfg, err := config.Load(mcpEnvs(), "", mcpRunYAML(t, t.TempDir(), mcptest.StdioBlock(t, serverDir)), nil)
	if err != nil {
		t.Fatal(err)
	}
	run, err := NewRun(cfg, Options{Envs: mcpEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mcpEchoActHook = cancel
	defer func() { mcpEchoActHook = nil }()
	if _, err := run.Train(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Train: %v, want cancellation", err)
	}
	if pid := mcptest.ServerPID(t, serverDir); !mcptest.ProcessGone(pid) {
		t.Errorf("server process %d still exists after the cancelled run", pid)
	}
}

// A server that does not start fails the run at start, naming the server.
func TestMCPServerFailsToStart(t *testing.T) {
	block := "mcp:\n  servers:\n  - name: broken\n    command: /nonexistent/mcp-server\n  envs:\n    test-mcp-echo:\n    - server: broken\n"
	cfg, err := config.Load(mcpEnvs(), "", mcpRunYAML(t, t.TempDir(), block), nil)
	if err != nil {
		t.Fatal(err)
	}
	run, err := NewRun(cfg, Options{Envs: mcpEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Train(context.Background())
	if err == nil || !strings.Contains(err.Error(), "mcp server broken") || !strings.Contains(err.Error(), "/nonexistent/mcp-server") {
		t.Fatalf("Train: %v, want an error naming the server and its command", err)
	}
	if _, statErr := os.Stat(filepath.Join(run.Dir, "tokenizer")); !os.IsNotExist(statErr) {
		t.Errorf("the run did work before failing to connect: %v", statErr)
	}
}

// The mcp block survives Encode and Decode unchanged, prints in `config show`, and can be set
// with --set; the presets have none.
func TestMCPConfigRoundTrip(t *testing.T) {
	block := `mcp:
  servers:
  - name: everything
    command: node
    args: [server.js, stdio]
    env: {B: "2", A_1: "1"}
    dir: /
    connect_timeout: 20s
  - name: web
    url: https://mcp.example.com/mcp
    headers: {Authorization: "Bearer ${MCP_KEY}"}
  envs:
    test-mcp-echo:
    - server: everything
      tools: [echo, get-sum]
      prefix: ev_
    - server: web
`
	c, err := config.Load(mcpEnvs(), "", mcpRunYAML(t, t.TempDir(), block), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := c.MCP
	if m == nil || len(m.Servers) != 2 || m.Servers[0].Env["A_1"] != "1" || m.Servers[0].ConnectTimeout.Seconds() != 20 ||
		m.Servers[1].URL != "https://mcp.example.com/mcp" || len(m.Envs["test-mcp-echo"]) != 2 || m.Envs["test-mcp-echo"][0].Prefix != "ev_" {
		t.Fatalf("decoded %+v", m)
	}
	data, err := config.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mcp:\n  servers:\n  - name: everything\n    command: node\n", "    env:\n      A_1: \"1\"\n      B: \"2\"\n",
		"    connect_timeout: 20s\n", "  - name: web\n    url: https://mcp.example.com/mcp\n    headers:\n      Authorization: Bearer ${MCP_KEY}\n", "  envs:\n    test-mcp-echo:\n    - server: everything\n"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("encoded config lacks %q:\n%s", want, data)
		}
	}
	back, err := config.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := config.Encode(back)
	if string(again) != string(data) {
		t.Fatalf("config changed in a round trip:\n%s\n---\n%s", data, again)
	}
	set, err := config.Override(c, []string{"mcp.servers.web.url=http://127.0.0.1:9/mcp", "mcp.envs.test-mcp-echo.0.prefix=x_", "mcp.servers.web.headers.X-Team=rl"})
	if err != nil {
		t.Fatal(err)
	}
	if set.MCP.Servers[1].URL != "http://127.0.0.1:9/mcp" || set.MCP.Envs["test-mcp-echo"][0].Prefix != "x_" ||
		set.MCP.Servers[1].Headers["X-Team"] != "rl" || set.MCP.Servers[1].Headers["Authorization"] != "Bearer ${MCP_KEY}" {
		t.Fatalf("--set on the mcp block: %+v", set.MCP)
	}
	for _, name := range config.Presets() {
		p, _ := config.Preset(name)
		data, _ := config.Encode(p)
		if p.MCP != nil || strings.Contains(string(data), "mcp:") {
			t.Errorf("preset %s has an mcp block", name)
		}
	}
}

// Mistakes in the block are errors of Load that name the setting and what is wrong; so are
// unknown keys (env/mcp tests every check).
func TestMCPConfigErrors(t *testing.T) {
	good := "  - name: s\n    command: node\n"
	envs := "  envs:\n    test-mcp-echo:\n    - server: s\n"
	cases := []struct{ name, block, want string }{
		{"unknown key in a server", "mcp:\n  servers:\n  - name: s\n    comand: node\n" + envs, "comand"},
		{"unknown key in an attachment", "mcp:\n  servers:\n" + good + envs + "      prefx: a\n", "prefx"},
		{"unknown key in the block", "mcp:\n  server: []\n", "server"},
		{"undefined server", "mcp:\n  servers:\n" + good + envs + "    - server: nope\n",
			`mcp.envs.test-mcp-echo[1]: server "nope" is not defined in mcp.servers`},
		{"environment no phase uses", "mcp:\n  servers:\n" + good + "  envs:\n    calc:\n    - server: s\n", "mcp.envs.calc: no phase uses environment calc"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Load(mcpEnvs(), "", mcpRunYAML(t, t.TempDir(), tc.block), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
