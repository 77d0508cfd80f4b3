package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentrl/agentrl/env/mcp/mcptest"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrl/agentrl/tool"
)

func toolByName(t *testing.T, tools []tool.Tool, name string) tool.Tool {
	t.Helper()
	for _, tl := range tools {
		if tl.Name() == name {
			return tl
		}
	}
	names := make([]string, len(tools))
	for i, tl := range tools {
		names[i] = tl.Name()
	}
	t.Fatalf("no tool %q among %v", name, names)
	return nil
}

type mcpCall struct {
	name, tool, args string
	want             string // exact result, when no error is wanted
	wantErr          string // substring of the error
	infra            bool   // the error must wrap tool.ErrInfra
}

func runMCPCalls(t *testing.T, tools []tool.Tool, calls []mcpCall) {
	t.Helper()
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			got, err := toolByName(t, tools, tc.tool).Call(context.Background(), json.RawMessage(tc.args))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Call: %v", err)
				}
				if got != tc.want {
					t.Fatalf("result %q, want %q", got, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v (result %q), want one containing %q", err, got, tc.wantErr)
			}
			if errors.Is(err, tool.ErrInfra) != tc.infra {
				t.Fatalf("err %v: infra %v, want %v", err, errors.Is(err, tool.ErrInfra), tc.infra)
			}
		})
	}
}

func TestMCPStdioEverything(t *testing.T) {
	node, script := mcptest.EverythingServer(t)
	ctx := context.Background()
	c, err := ConnectCommand(ctx, node, []string{script, "stdio"}, Options{Prefix: "ev_"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tools := c.Tools()
	if len(tools) < 3 {
		t.Fatalf("server lists %d tools", len(tools))
	}
	echo := toolByName(t, tools, "ev_echo")
	if echo.Description() == "" || !strings.Contains(string(echo.Schema()), `"message"`) {
		t.Fatalf("echo metadata: %q %s", echo.Description(), echo.Schema())
	}
	runMCPCalls(t, tools, []mcpCall{
		{name: "echo", tool: "ev_echo", args: `{"message":"hello, world"}`, want: "Echo: hello, world"},
		{name: "add", tool: "ev_get-sum", args: `{"a":2,"b":3.5}`, want: "The sum of 2 and 3.5 is 5.5."},
		{name: "echo with a number", tool: "ev_echo", args: `{"message":5}`, wantErr: "message"},
		{name: "add without arguments", tool: "ev_get-sum", args: `{}`, wantErr: "ev_get-sum"},
		{name: "arguments not an object", tool: "ev_echo", args: `["hi"]`, wantErr: "JSON object"},
		{name: "arguments not JSON", tool: "ev_echo", args: `{message`, wantErr: "JSON object"},
		{name: "arguments too large", tool: "ev_echo", args: `{"message":"` + strings.Repeat("x", tool.DefaultMaxArgBytes) + `"}`, wantErr: "limit"},
	})

	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if c.cmd.ProcessState == nil {
		t.Fatal("Close returned before the server process was reaped")
	}
	if _, err := echo.Call(ctx, json.RawMessage(`{"message":"x"}`)); !errors.Is(err, tool.ErrInfra) {
		t.Fatalf("Call after Close: %v, want an infrastructure error", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// A stdio server that dies fails the call that meets it as an infrastructure error (the call is
// not repeated: the server may have acted on it); the next call starts the server again, and
// Close ends the new process.
func TestMCPStdioServerDies(t *testing.T) {
	node, script := mcptest.EverythingServer(t)
	ctx := context.Background()
	c, err := ConnectCommand(ctx, node, []string{script, "stdio"}, Options{Only: []string{"echo"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := len(c.Tools()); n != 1 {
		t.Fatalf("Only kept %d tools, want 1", n)
	}
	first := c.cmd
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	echo := c.Tools()[0]
	_, err = echo.Call(ctx, json.RawMessage(`{"message":"x"}`))
	if !errors.Is(err, tool.ErrInfra) {
		t.Fatalf("Call to a dead server: %v, want an infrastructure error", err)
	}
	got, err := echo.Call(ctx, json.RawMessage(`{"message":"again"}`))
	if err != nil || got != "Echo: again" {
		t.Fatalf("Call after the server died: %q, %v; want the restarted server's answer", got, err)
	}
	if c.Restarts() != 1 || c.cmd == first || first.ProcessState == nil {
		t.Fatalf("restarts %d, new process %v, old one reaped %v", c.Restarts(), c.cmd != first, first.ProcessState != nil)
	}
	if err := c.Close(); err != nil || c.cmd.ProcessState == nil {
		t.Fatalf("Close: %v (restarted server reaped: %v)", err, c.cmd.ProcessState != nil)
	}
}

// Over HTTP a broken connection is replaced at the next call; while the server stays down,
// calls fail at once between restart attempts (no storm of reconnections), and once it is back
// the next attempt reconnects.
func TestMCPHTTPReconnects(t *testing.T) {
	inner := newTestMCPServer(t)
	var mu sync.Mutex
	down, inits := false, 0 // inits counts initialize requests
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		mu.Lock()
		isDown := down
		if bytes.Contains(body, []byte(`"method":"initialize"`)) {
			inits++ // an attempt to open a session
		}
		mu.Unlock()
		if isDown {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		inner.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	setDown := func(d bool) { mu.Lock(); down = d; mu.Unlock() }
	sessions := func() int { mu.Lock(); defer mu.Unlock(); return inits }
	ctx := context.Background()
	const delay = 200 * time.Millisecond
	c, err := ConnectHTTP(ctx, hs.URL, Options{RestartDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	add := c.Tools()[0]
	call := func() (string, error) { return add.Call(ctx, json.RawMessage(`{"a":1,"b":2}`)) }
	if got, err := call(); err != nil || got != "3" {
		t.Fatalf("first call: %q, %v", got, err)
	}

	setDown(true)
	for i := range 3 {
		if _, err := call(); !errors.Is(err, tool.ErrInfra) {
			t.Fatalf("call %d while the server is down: %v, want an infrastructure error", i, err)
		}
	}
	// One failed call, one failed restart; the third call came within the delay and did not dial.
	if n := sessions(); n != 2 {
		t.Fatalf("%d sessions tried, want the first and one restart", n)
	}
	setDown(false)
	time.Sleep(delay + 50*time.Millisecond)
	if got, err := call(); err != nil || got != "3" {
		t.Fatalf("call after the server came back: %q, %v", got, err)
	}
	if c.Restarts() != 1 || sessions() != 3 {
		t.Fatalf("restarts %d, sessions tried %d; want 1 and 3", c.Restarts(), sessions())
	}
}

func TestMCPConnectFailures(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		connect func() (*Client, error)
	}{
		{"missing command", func() (*Client, error) {
			return ConnectCommand(ctx, "/nonexistent/mcp-server", nil, Options{})
		}},
		{"command that is not a server", func() (*Client, error) {
			return ConnectCommand(ctx, "/usr/bin/true", nil, Options{})
		}},
		{"nothing listening", func() (*Client, error) {
			srv := httptest.NewServer(nil)
			url := srv.URL
			srv.Close()
			return ConnectHTTP(ctx, url, Options{})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.connect()
			if err == nil {
				c.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, tool.ErrInfra) {
				t.Fatalf("error %v is not an infrastructure error", err)
			}
		})
	}
}

type addArgs struct {
	A int `json:"a" jsonschema:"the first addend"`
	B int `json:"b" jsonschema:"the second addend"`
}

// newTestMCPServer is an in-process MCP server with an add tool, a tool that always fails and
// a tool that returns two content blocks, served over streamable HTTP on 127.0.0.1.
func newTestMCPServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	sdk.AddTool(srv, &sdk.Tool{Name: "add", Description: "Add two integers."},
		func(_ context.Context, _ *sdk.CallToolRequest, in addArgs) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strconv.Itoa(in.A + in.B)}}}, nil, nil
		})
	sdk.AddTool(srv, &sdk.Tool{Name: "fail", Description: "Always fails."},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return nil, nil, errors.New("disk on fire")
		})
	sdk.AddTool(srv, &sdk.Tool{Name: "two", Description: "Two blocks."},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{
				&sdk.TextContent{Text: "first"},
				&sdk.ImageContent{MIMEType: "image/png", Data: []byte{1, 2, 3}},
				&sdk.TextContent{Text: "last"},
			}}, nil, nil
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs
}

func TestMCPStreamableHTTP(t *testing.T) {
	hs := newTestMCPServer(t)
	ctx := context.Background()
	c, err := ConnectHTTP(ctx, hs.URL, Options{MaxResultBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tools := c.Tools()
	if len(tools) != 3 {
		t.Fatalf("%d tools, want 3", len(tools))
	}
	add := toolByName(t, tools, "add")
	if add.Description() != "Add two integers." || !strings.Contains(string(add.Schema()), `"a"`) {
		t.Fatalf("add metadata: %q %s", add.Description(), add.Schema())
	}
	runMCPCalls(t, tools, []mcpCall{
		{name: "add", tool: "add", args: `{"a":40,"b":2}`, want: "42"},
		{name: "blocks joined", tool: "two", args: `{}`, want: "first\n[image image/png, 3 bytes]\nlast"},
		{name: "null arguments", tool: "two", args: `null`, want: "first\n[image image/png, 3 bytes]\nlast"},
		{name: "tool error", tool: "fail", args: `{}`, wantErr: "disk on fire"},
		{name: "wrong argument type", tool: "add", args: `{"a":"forty","b":2}`, wantErr: "add"},
		{name: "unknown argument", tool: "add", args: `{"a":1,"b":2,"c":3}`, wantErr: "add"},
	})
	hs.CloseClientConnections()
	hs.Close()
	if _, err := add.Call(ctx, json.RawMessage(`{"a":1,"b":2}`)); !errors.Is(err, tool.ErrInfra) {
		t.Fatalf("Call after the server went away: %v, want an infrastructure error", err)
	}
}

func TestJoinContentAndTruncate(t *testing.T) {
	tests := []struct {
		name    string
		content []sdk.Content
		want    string
	}{
		{"empty", nil, ""},
		{"text", []sdk.Content{&sdk.TextContent{Text: "a"}, &sdk.TextContent{Text: "b"}}, "a\nb"},
		{"link", []sdk.Content{&sdk.ResourceLink{URI: "file:///x"}}, "[resource file:///x]"},
		{"embedded text", []sdk.Content{&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "u", Text: "body"}}}, "body"},
		{"audio", []sdk.Content{&sdk.AudioContent{MIMEType: "audio/wav", Data: make([]byte, 10)}}, "[audio audio/wav, 10 bytes]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := joinContent(tc.content); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	if got := tool.TruncateText(strings.Repeat("é", 10), 7); !strings.HasPrefix(got, "ééé") || !strings.Contains(got, "truncated") {
		t.Fatalf("truncateText: %q", got)
	}
}

// ConnectExec runs the prepared command: the script path is relative to cmd.Dir and a
// variable of cmd.Env reaches the server (its get-env tool prints its environment).
func TestMCPExecDirAndEnv(t *testing.T) {
	node, script := mcptest.EverythingServer(t)
	cmd := exec.Command(node, "dist/index.js", "stdio")
	cmd.Dir = filepath.Dir(filepath.Dir(script))
	cmd.Env = append(os.Environ(), "AGENTRL_MCP_TEST=dir-and-env")
	c, err := ConnectExec(context.Background(), cmd, Options{MaxResultBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := toolByName(t, c.Tools(), "get-env").Call(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, `"AGENTRL_MCP_TEST": "dir-and-env"`) {
		t.Fatalf("the variable did not reach the server: %.300s", got)
	}
	if err := c.Close(); err != nil || c.cmd.ProcessState == nil {
		t.Fatalf("Close: %v (reaped: %v)", err, c.cmd.ProcessState != nil)
	}
}

// Select gives one session's tools under several prefixes and subsets; the copies call the same
// server and an unknown name is an error listing the server's tools.
func TestMCPSelect(t *testing.T) {
	hs := newTestMCPServer(t)
	c, err := ConnectHTTP(context.Background(), hs.URL, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	all, err := c.Select("", nil)
	if err != nil || len(all) != 3 {
		t.Fatalf("Select all: %d tools, %v", len(all), err)
	}
	sel, err := c.Select("m.", []string{"two", "add"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sel) != 2 || sel[0].Name() != "m.add" || sel[1].Name() != "m.two" {
		t.Fatalf("Select keeps the server's order with the prefix: %v, %v", sel[0].Name(), sel[1].Name())
	}
	runMCPCalls(t, sel, []mcpCall{{name: "prefixed add", tool: "m.add", args: `{"a":1,"b":2}`, want: "3"}})
	if c.Tools()[0].Name() != "add" {
		t.Fatalf("Select renamed the client's own tools: %s", c.Tools()[0].Name())
	}
	if _, err := c.Select("", []string{"add", "nope"}); err == nil || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), "add, fail, two") {
		t.Fatalf("unknown tool: %v", err)
	}
}

// One client serves many episodes at once: concurrent calls over stdio (server-everything) and
// streamable HTTP each get their own answer. Run under -race.
func TestMCPConcurrentCalls(t *testing.T) {
	hammer := func(t *testing.T, tl tool.Tool, args func(i int) string, want func(i int) string) {
		t.Helper()
		const workers, calls = 8, 16
		errs := make(chan error, workers*calls)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for k := range calls {
					i := w*calls + k
					got, err := tl.Call(context.Background(), json.RawMessage(args(i)))
					if err != nil {
						errs <- err
					} else if got != want(i) {
						errs <- fmt.Errorf("call %d: %q, want %q", i, got, want(i))
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	t.Run("http", func(t *testing.T) {
		c, err := ConnectHTTP(context.Background(), newTestMCPServer(t).URL, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		hammer(t, toolByName(t, c.Tools(), "add"),
			func(i int) string { return fmt.Sprintf(`{"a":%d,"b":1000}`, i) },
			func(i int) string { return strconv.Itoa(i + 1000) })
	})
	t.Run("stdio", func(t *testing.T) {
		node, script := mcptest.EverythingServer(t)
		c, err := ConnectCommand(context.Background(), node, []string{script, "stdio"}, Options{Only: []string{"echo"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		hammer(t, c.Tools()[0],
			func(i int) string { return fmt.Sprintf(`{"message":"m%d"}`, i) },
			func(i int) string { return fmt.Sprintf("Echo: m%d", i) })
	})
}

// Header reaches every request of a streamable HTTP session (the handshake, the listing and the
// calls), so a server that wants an API key works; without it the connection fails, and the
// error does not carry the key.
func TestMCPHTTPHeader(t *testing.T) {
	inner := newTestMCPServer(t).Config.Handler
	var mu sync.Mutex
	seen := 0
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" || r.Header.Get("X-Team") != "rl" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		seen++
		mu.Unlock()
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	ctx := context.Background()

	h := http.Header{}
	h.Set("Authorization", "Bearer s3cret")
	h.Set("X-Team", "rl")
	c, err := ConnectHTTP(ctx, hs.URL, Options{Header: h, HTTPClient: &http.Client{Timeout: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	runMCPCalls(t, c.Tools(), []mcpCall{{name: "add with a key", tool: "add", args: `{"a":2,"b":3}`, want: "5"}})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if seen < 3 {
		t.Errorf("the server saw %d authorized requests, want the handshake, the listing and the call", seen)
	}
	mu.Unlock()

	bad := http.Header{}
	bad.Set("Authorization", "Bearer wrong-key-123")
	for name, opts := range map[string]Options{"no header": {}, "wrong key": {Header: bad}} {
		c, err := ConnectHTTP(ctx, hs.URL, opts)
		if err == nil {
			c.Close()
			t.Fatalf("%s: connected", name)
		}
		if !errors.Is(err, tool.ErrInfra) || strings.Contains(err.Error(), "wrong-key-123") {
			t.Errorf("%s: %v, want an infrastructure error that does not show the key", name, err)
		}
	}
}
