package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/remote"
)

// mcpConfig writes the calc preset with an mcp block attaching, to calc, the lookup tool of an
// in-process MCP server over streamable HTTP; sessions counts the server's client sessions.
func mcpConfig(t *testing.T) (path string, sessions *mcpSessions) {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	type in struct {
		Key string `json:"key"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "lookup", Description: "Look a key up."},
		func(_ context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "value of " + a.Key}}}, nil, nil
		})
	sessions = new(mcpSessions)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sessions.note(r)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	c, err := config.Preset("calc")
	if err != nil {
		t.Fatal(err)
	}
	data, err := config.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	block := "mcp:\n  servers:\n  - name: kv\n    url: " + hs.URL + "\n  envs:\n    calc:\n    - server: kv\n      prefix: kv_\n"
	path = filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(path, append(data, block...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, sessions
}

// config show prints the block; env serve --config serves calc with the MCP tool beside the
// calculator; eval --config connects the server for the evaluated environment and refuses a
// configuration that attaches nothing to it.
func TestMCPFromConfig(t *testing.T) {
	path, sessions := mcpConfig(t)
	out, err := runCLI(t, "config", "show", "--config", path)
	if err != nil || !strings.Contains(out, "mcp:\n  servers:\n  - name: kv\n") || !strings.Contains(out, "      prefix: kv_\n") {
		t.Fatalf("config show: %v\n%s", err, out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var served syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- Main(ctx, []string{"env", "serve", "--env", "calc", "--addr", "127.0.0.1:0", "--config", path}, &served, &served)
	}()
	url := servingURL(t, "calc", &served, done)
	spec, err := remote.Spec(url, remote.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := spec.New()
	if err != nil {
		t.Fatal(err)
	}
	obs, err := e.Reset(ctx, 1)
	if err != nil || !strings.Contains(obs.System, "calculator(") || !strings.Contains(obs.System, "kv_lookup(key)") {
		t.Fatalf("served system prompt lacks the tools: %v\n%s", err, obs.System)
	}
	tr, err := e.Step(ctx, `<tool_call>{"name": "kv_lookup", "arguments": {"key": "k1"}}</tool_call>`+
		`<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>`)
	if err != nil || tr.Observation != "<tool_response>value of k1</tool_response>\n<tool_response>5</tool_response>" {
		t.Fatalf("served tool calls: %v %q", err, tr.Observation)
	}
	e.(env.Closer).Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve after cancel: %v", err)
	}
	if opened, closed := sessions.counts(); opened != 1 || closed != 1 {
		t.Fatalf("env serve opened %d MCP sessions and closed %d, want 1 and 1", opened, closed)
	}

	ck := tinyCheckpoint(t, "What is 1 + 2? Answer: 3")
	out, err = runCLI(t, "eval", "--checkpoint", ck, "--env", "calc", "--tasks", "2", "--k", "0", "--max-turns", "2", "--config", path)
	if err != nil || !strings.Contains(out, "pass@1 greedy") {
		t.Fatalf("eval --config: %v\n%s", err, out)
	}
	if opened, closed := sessions.counts(); opened != 2 || closed != 2 {
		t.Fatalf("eval opened %d MCP sessions and closed %d, want 1 and 1", opened-1, closed-1)
	}
	checkPromptNote(t, ck, path)
	out, err = runCLI(t, "eval", "--checkpoint", ck, "--env", "maze", "--tasks", "1", "--k", "0", "--config", path)
	if err == nil || !strings.Contains(err.Error(), "attaches no MCP tools to environment maze") {
		t.Fatalf("eval --config for an environment without MCP tools: %v\n%s", err, out)
	}
	// The file is read as train reads it: a misspelt key outside the mcp block is an error too.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	typo := filepath.Join(t.TempDir(), "typo.yaml")
	if err := os.WriteFile(typo, []byte(strings.Replace(string(data), "seed:", "sede:", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"eval", "--checkpoint", ck, "--env", "calc", "--tasks", "1", "--k", "0", "--config", typo},
		{"env", "serve", "--env", "calc", "--addr", "127.0.0.1:0", "--config", typo},
	} {
		if out, err := runCLI(t, args...); err == nil || !strings.Contains(err.Error(), "sede") {
			t.Fatalf("%s with a misspelt key: %v\n%s", args[0], err, out)
		}
	}
}

// mcpSessions counts the sessions a streamable HTTP server sees opened (distinct session ids)
// and closed (DELETE requests).
type mcpSessions struct {
	mu     sync.Mutex
	ids    map[string]bool
	closed int
}

func (s *mcpSessions) note(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id := r.Header.Get("Mcp-Session-Id"); id != "" {
		if s.ids == nil {
			s.ids = map[string]bool{}
		}
		s.ids[id] = true
	}
	if r.Method == http.MethodDelete {
		s.closed++
	}
}

func (s *mcpSessions) counts() (opened, closed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids), s.closed
}
