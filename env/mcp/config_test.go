package mcp

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/env/mcp/mcptest"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/traj"
)

// testEnvs is the built-in environments (calc has a tool to clash with) and test-mcp-echo.
func testEnvs() *env.Registry {
	r := all.Builtins()
	if err := r.Register(mcptest.EchoSpec(nil)); err != nil {
		panic(err)
	}
	return r
}

// runYAML writes a run configuration whose one phase uses envs (test-mcp-echo when none are
// given), with mcpBlock appended, as a user would write it.
func runYAML(t *testing.T, mcpBlock string, envs ...string) string {
	t.Helper()
	if len(envs) == 0 {
		envs = []string{"test-mcp-echo"}
	}
	y := "name: mcp\nphases:\n- name: sft\n  kind: sft\n  envs:\n"
	for _, e := range envs {
		y += fmt.Sprintf("  - name: %s\n    weight: 1\n", e)
	}
	path := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(path, []byte(y+mcpBlock), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// mcpTok is a tokenizer for driving episodes without a run.
func mcpTok(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	spec, _ := testEnvs().Lookup("test-mcp-echo")
	tok, err := tokenizer.Train(spec.Corpus(50), tokenizer.TrainOptions{VocabSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func runEchoEpisodes(t *testing.T, tools *Toolbox, tok *tokenizer.Tokenizer, seeds ...int64) []*traj.Trajectory {
	t.Helper()
	runner := &rollout.Runner{Tok: tok, Cfg: rollout.DefaultConfig(), NewGen: func(task rollout.Task) infer.Generator {
		return &rollout.AgentGenerator{Agent: &mcptest.EchoExpert{Seed: task.Seed}, Tok: tok}
	}}
	tasks := make([]rollout.Task, len(seeds))
	for i, s := range seeds {
		tasks[i] = rollout.Task{Env: "test-mcp-echo", Seed: s, GroupID: uint64(i)}
	}
	groups, err := runner.RunGroups(context.Background(), tools.Factory(), tasks, 2, 4)
	if err != nil {
		t.Fatalf("RunGroups: %v (a dead tool server must not fail the rollout)", err)
	}
	var out []*traj.Trajectory
	for _, g := range groups {
		out = append(out, g.Trajs...)
	}
	return out
}

// A stdio server that dies mid-run turns the episodes whose calls meet the failure into
// env_error episodes (never trained on, no reward), the rollout goes on, and later calls start
// the server again.
func TestMCPServerDiesMidRun(t *testing.T) {
	serverDir := t.TempDir()
	cfg, err := Load(testEnvs(), runYAML(t, mcptest.StdioBlock(t, serverDir)))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := Connect(context.Background(), testEnvs(), cfg, "test-mcp-echo")
	if err != nil {
		t.Fatal(err)
	}
	defer tools.Close()
	tok := mcpTok(t)
	for _, tr := range runEchoEpisodes(t, tools, tok, 1, 2) {
		if tr.Status != traj.StatusOK || tr.Reward != 1 {
			t.Fatalf("before the server died: status %v reward %v %s", tr.Status, tr.Reward, tr.Error)
		}
	}
	pid := mcptest.ServerPID(t, serverDir)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, tr := range runEchoEpisodes(t, tools, tok, 3, 4) {
		switch {
		case tr.Status == traj.StatusEnvError && tr.Reward == 0 && strings.Contains(tr.Error, "infrastructure"):
			failed++
		case tr.Status == traj.StatusOK && tr.Reward == 1:
		default:
			t.Errorf("after the server died: status %v reward %v error %q, want env_error, 0 and an infrastructure error, or a restarted server's answer", tr.Status, tr.Reward, tr.Error)
		}
	}
	if failed == 0 {
		t.Error("no episode met the dead server")
	}
	for _, tr := range runEchoEpisodes(t, tools, tok, 5, 6) {
		if tr.Status != traj.StatusOK || tr.Reward != 1 {
			t.Errorf("after the restart: status %v reward %v %s", tr.Status, tr.Reward, tr.Error)
		}
	}
	if again := mcptest.ServerPID(t, serverDir); again == pid || !mcptest.ProcessGone(pid) {
		t.Errorf("server pid %d before, %d after; old one gone: %v", pid, again, mcptest.ProcessGone(pid))
	}
	if err := tools.Close(); err != nil {
		t.Errorf("Close after the restart: %v", err)
	}
}

// testMCPHandler serves, over streamable HTTP, an MCP server with the tools echo and calculator
// (the name of calc's built-in tool).
func testMCPHandler(t *testing.T) *httptest.Server {
	t.Helper()
	srv := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	type msg struct {
		Message string `json:"message"`
	}
	for _, name := range []string{"echo", "calculator"} {
		sdk.AddTool(srv, &sdk.Tool{Name: name, Description: "Echo the message."},
			func(_ context.Context, _ *sdk.CallToolRequest, in msg) (*sdk.CallToolResult, any, error) {
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "Echo: " + in.Message}}}, nil, nil
			})
	}
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs
}

// Over streamable HTTP (url), the tools reach the episodes too, and the checks that need the
// servers' listings fail the connection with an error that names the clash or the missing tool.
func TestMCPConnectHTTPAndClashes(t *testing.T) {
	hs := testMCPHandler(t)
	ctx := context.Background()
	load := func(envs string) *Config {
		t.Helper()
		block := fmt.Sprintf("mcp:\n  servers:\n  - name: web\n    url: %s\n  envs:\n%s", hs.URL, envs)
		c, err := Load(testEnvs(), runYAML(t, block, "test-mcp-echo", "calc"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tools, err := Connect(ctx, testEnvs(), load("    test-mcp-echo:\n    - server: web\n      prefix: ev_\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range runEchoEpisodes(t, tools, mcpTok(t), 5) {
		if tr.Status != traj.StatusOK || tr.Reward != 1 || tr.Turns[0].ToolCalls[0].Result != "Echo: w5" {
			t.Errorf("over HTTP: status %v reward %v %s %+v", tr.Status, tr.Reward, tr.Error, tr.Turns)
		}
	}
	if err := tools.Close(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ name, envs, want string }{
		{"clash with a built-in tool", "    calc:\n    - server: web\n",
			`mcp.envs.calc[0] (server web): tool "calculator" clashes with the built-in tool "calculator" in environment calc`},
		{"clash between attachments", "    calc:\n    - server: web\n      prefix: a_\n    - server: web\n      prefix: a_\n",
			`mcp.envs.calc[1] (server web): tool "a_calculator" clashes with the tool of mcp.envs.calc[0] (server web)`},
		{"allow-listed tool the server lacks", "    calc:\n    - server: web\n      tools: [echo, nope]\n",
			`mcp.envs.calc[0] (server web): mcp: the server has no tool "nope" (it has: calculator, echo)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tools, err := Connect(ctx, testEnvs(), load(tc.envs))
			if err == nil {
				tools.Close()
				t.Fatal("connected")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want one containing %q", err, tc.want)
			}
		})
	}
}

// A url server's headers reach it with the environment variables they name filled in when it is
// connected; the run's saved config keeps the reference, not the key; an unset variable fails
// the connection naming the server, the header and the variable.
func TestMCPHTTPHeaders(t *testing.T) {
	inner := testMCPHandler(t)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k-31337" || r.Header.Get("X-Team") != "rl" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		inner.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	block := fmt.Sprintf("mcp:\n  servers:\n  - name: web\n    url: %s\n    headers:\n      Authorization: Bearer ${AGENTRL_TEST_MCP_KEY}\n      x-team: rl\n"+
		"  envs:\n    test-mcp-echo:\n    - server: web\n      tools: [echo]\n      prefix: ev_\n", hs.URL)
	cfg, err := Load(testEnvs(), runYAML(t, block))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Setenv("AGENTRL_TEST_MCP_KEY", "k-31337")
	tools, err := Connect(ctx, testEnvs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range runEchoEpisodes(t, tools, mcpTok(t), 3) {
		if tr.Status != traj.StatusOK || tr.Reward != 1 {
			t.Errorf("with the key: status %v reward %v %s", tr.Status, tr.Reward, tr.Error)
		}
	}
	if err := tools.Close(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AGENTRL_TEST_MCP_KEY", "wrong")
	if tools, err := Connect(ctx, testEnvs(), cfg); err == nil {
		tools.Close()
		t.Fatal("connected with the wrong key")
	} else if !strings.Contains(err.Error(), "mcp server web") || !strings.Contains(err.Error(), "Unauthorized") {
		t.Fatalf("wrong key: %v", err)
	}

	os.Unsetenv("AGENTRL_TEST_MCP_KEY")
	if tools, err := Connect(ctx, testEnvs(), cfg); err == nil {
		tools.Close()
		t.Fatal("connected without the variable")
	} else if want := "mcp server web: header Authorization: environment variable AGENTRL_TEST_MCP_KEY is not set"; !strings.Contains(err.Error(), want) {
		t.Fatalf("unset variable: %v, want %q", err, want)
	}
}

// Mistakes in the block are errors that name the setting and what is wrong; so are unknown keys.
func TestMCPConfigErrors(t *testing.T) {
	good := "  - name: s\n    command: node\n"
	envs := "  envs:\n    test-mcp-echo:\n    - server: s\n"
	cases := []struct{ name, block, want string }{
		{"unknown key in a server", "mcp:\n  servers:\n  - name: s\n    comand: node\n" + envs, "comand"},
		{"unknown key in an attachment", "mcp:\n  servers:\n" + good + envs + "      prefx: a\n", "prefx"},
		{"unknown key in the block", "mcp:\n  server: []\n", "server"},
		{"both command and url", "mcp:\n  servers:\n  - name: s\n    command: node\n    url: http://x/mcp\n" + envs,
			"mcp.servers[0] (s): give command (stdio) or url (streamable HTTP), not both"},
		{"neither command nor url", "mcp:\n  servers:\n  - name: s\n    args: [x]\n" + envs,
			"mcp.servers[0] (s): give command (stdio) or url (streamable HTTP)"},
		{"undefined server", "mcp:\n  servers:\n" + good + envs + "    - server: nope\n",
			`mcp.envs.test-mcp-echo[1]: server "nope" is not defined in mcp.servers`},
		{"server attached nowhere", "mcp:\n  servers:\n" + good + "  - name: t\n    url: http://x/mcp\n" + envs,
			"mcp.servers: t is not attached to any environment"},
		{"duplicate server", "mcp:\n  servers:\n" + good + good + envs, "mcp.servers[1] (s): name must be unique"},
		{"unknown environment", "mcp:\n  servers:\n" + good + "  envs:\n    nope:\n    - server: s\n", `mcp.envs.nope: env: unknown environment "nope"`},
		{"environment no phase uses", "mcp:\n  servers:\n" + good + "  envs:\n    calc:\n    - server: s\n", "mcp.envs.calc: no phase uses environment calc"},
		{"empty attachment list", "mcp:\n  servers:\n" + good + "  envs:\n    test-mcp-echo: []\n", "mcp.envs.test-mcp-echo: list at least one server"},
		{"no servers", "mcp:\n  servers: []\n", "mcp.servers: at least one server is needed"},
		{"args with a url", "mcp:\n  servers:\n  - name: s\n    url: http://x/mcp\n    args: [a]\n" + envs, "args, env and dir do nothing for a url server"},
		{"url not http", "mcp:\n  servers:\n  - name: s\n    url: ftp://x/mcp\n" + envs, `url "ftp://x/mcp" must be an absolute http:// or https:// address`},
		{"headers on a stdio server", "mcp:\n  servers:\n  - name: s\n    command: node\n    headers: {X-Key: k}\n" + envs, "headers do nothing for a stdio server"},
		{"bad header name", "mcp:\n  servers:\n  - name: s\n    url: http://x/mcp\n    headers: {\"X Key\": k}\n" + envs, `headers: "X Key" is not a header name`},
		{"transport's header", "mcp:\n  servers:\n  - name: s\n    url: http://x/mcp\n    headers: {mcp-session-id: k}\n" + envs,
			"headers: Mcp-Session-Id is set by the MCP transport and cannot be replaced"},
		{"bad variable reference", "mcp:\n  servers:\n  - name: s\n    url: http://x/mcp\n    headers: {X-Key: \"${A-B}\"}\n" + envs,
			"headers: X-Key: ${A-B} is not an environment variable name"},
		{"line break in a header", "mcp:\n  servers:\n  - name: s\n    url: http://x/mcp\n    headers: {X-Key: \"a\\nb\"}\n" + envs,
			"headers: X-Key: the value holds a line break or NUL"},
		{"bad env name", "mcp:\n  servers:\n  - name: s\n    command: node\n    env: {\"A=B\": x}\n" + envs, `env: "A=B" is not a variable name`},
		{"missing dir", "mcp:\n  servers:\n  - name: s\n    command: node\n    dir: /nonexistent/dir\n" + envs, `dir "/nonexistent/dir" is not a directory`},
		{"negative timeout", "mcp:\n  servers:\n  - name: s\n    command: node\n    connect_timeout: -1s\n" + envs, "connect_timeout must not be negative"},
		{"bad prefix", "mcp:\n  servers:\n" + good + envs + "      prefix: \"a b\"\n", `prefix "a b" may hold only`},
		{"tool listed twice", "mcp:\n  servers:\n" + good + envs + "      tools: [echo, echo]\n", `tools: "echo" is empty or listed twice`},
		{"same tool from two attachments", "mcp:\n  servers:\n" + good + envs + "      tools: [echo]\n    - server: s\n      tools: [echo]\n",
			`mcp.envs.test-mcp-echo[1]: tool "echo" is also given by mcp.envs.test-mcp-echo[0] (server s)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(testEnvs(), runYAML(t, tc.block))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// Load reads only the mcp block of a run's configuration and the environments its phases use:
// the rest need not be valid here (eval and env serve use nothing else), the block itself is
// validated, strictly.
func TestLoad(t *testing.T) {
	block := "mcp:\n  servers:\n  - name: s\n    url: http://127.0.0.1:9/mcp\n  envs:\n    test-mcp-echo:\n    - server: s\n"
	data, _ := os.ReadFile(runYAML(t, block))
	elsewhere := filepath.Join(t.TempDir(), "moved.yaml")
	if err := os.WriteFile(elsewhere, append([]byte("init: /nonexistent/checkpoint\nunknown_setting: 1\n"), data...), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Load(testEnvs(), elsewhere)
	if err != nil || m == nil || m.Servers[0].Name != "s" {
		t.Fatalf("Load: %+v %v", m, err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(data), "- server: s", "- server: t", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(testEnvs(), bad); err == nil || !strings.Contains(err.Error(), `server "t" is not defined`) {
		t.Fatalf("Load of a bad block: %v", err)
	}
	if m, err := Load(testEnvs(), runYAML(t, "")); m != nil || err != nil {
		t.Fatalf("Load without a block: %+v %v", m, err)
	}
}
