package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCPOptions tunes an MCP connection. Zero fields take the defaults in parentheses.
type MCPOptions struct {
	// Prefix is prepended to every tool name, to keep the tools of several servers apart
	// (none).
	Prefix string
	// Only, when not empty, keeps just the server tools with these names (all).
	Only []string
	// MaxArgBytes bounds a call's JSON arguments (DefaultMaxArgBytes).
	MaxArgBytes int
	// MaxResultBytes bounds the text a call returns; the rest is cut with a marker (16 KiB).
	MaxResultBytes int
	// ConnectTimeout bounds start-up and the tool listing when ctx has no earlier deadline
	// (30 s).
	ConnectTimeout time.Duration
	// HTTPClient is used by the streamable HTTP transport (http.DefaultClient).
	HTTPClient *http.Client
	// Header is added to every request of the streamable HTTP transport (an API key, an
	// Authorization header); it replaces a header of the same name the transport would send.
	Header http.Header
}

func (o MCPOptions) withDefaults() MCPOptions {
	if o.MaxArgBytes <= 0 {
		o.MaxArgBytes = DefaultMaxArgBytes
	}
	if o.MaxResultBytes <= 0 {
		o.MaxResultBytes = 16 << 10
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 30 * time.Second
	}
	return o
}

// MCPClient is a session with one MCP server whose tools are exposed as Tools. It owns the
// session (and the server process, for stdio): Close ends both. The tools do not implement
// Close themselves, so env.WithTools may hold them without closing the shared session; whoever
// connected closes the client.
type MCPClient struct {
	session *mcp.ClientSession
	tools   []*MCPTool
	stderr  *cappedBuffer // the stdio server's stderr, for error messages; nil over HTTP
	cmd     *exec.Cmd     // the stdio server process; nil over HTTP

	mu     sync.Mutex // protects closed
	closed bool
}

// ConnectMCPCommand starts an MCP server as a child process speaking over stdin and stdout
// (the stdio transport), and lists its tools. The child gets this process's environment and
// working directory and is killed if this process dies.
func ConnectMCPCommand(ctx context.Context, name string, args []string, opts MCPOptions) (*MCPClient, error) {
	return ConnectMCPExec(ctx, exec.Command(name, args...), opts)
}

// ConnectMCPExec is ConnectMCPCommand for a prepared, unstarted command, so that the caller
// chooses its environment (cmd.Env) and working directory (cmd.Dir). Unless cmd.SysProcAttr is
// set, the child is killed if this process dies; unless cmd.Stderr is set, the last 4 KiB of the
// child's stderr go into connection errors. The client owns the process from here on: Close
// ends it, and a failed connection has ended it already.
func ConnectMCPExec(ctx context.Context, cmd *exec.Cmd, opts MCPOptions) (*MCPClient, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	var stderr *cappedBuffer
	if cmd.Stderr == nil {
		stderr = newCappedBuffer(4<<10, nil)
		cmd.Stderr = stderr
	}
	tr := &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	c, err := connectMCP(ctx, tr, opts)
	if err != nil {
		if stderr != nil {
			if tail, _ := stderr.String(); tail != "" {
				err = fmt.Errorf("%w; server stderr: %s", err, tail)
			}
		}
		return nil, Infra(fmt.Errorf("mcp: %s: %w", cmd.Path, err))
	}
	c.stderr, c.cmd = stderr, cmd
	return c, nil
}

// ConnectMCPHTTP connects to an MCP server over the streamable HTTP transport at url and lists
// its tools.
func ConnectMCPHTTP(ctx context.Context, url string, opts MCPOptions) (*MCPClient, error) {
	client := opts.HTTPClient
	if len(opts.Header) > 0 {
		if client == nil {
			client = http.DefaultClient
		}
		withHeader := *client
		withHeader.Transport = headerTransport{base: client.Transport, header: opts.Header.Clone()}
		client = &withHeader
	}
	tr := &mcp.StreamableClientTransport{
		Endpoint:   url,
		HTTPClient: client,
		// Tools are request/response; the server-to-client stream would only carry
		// notifications this adapter does not use.
		DisableStandaloneSSE: true,
	}
	c, err := connectMCP(ctx, tr, opts)
	if err != nil {
		return nil, Infra(fmt.Errorf("mcp: %s: %w", url, err))
	}
	return c, nil
}

// headerTransport adds header to every request before base (http.DefaultTransport if nil)
// sends it.
type headerTransport struct {
	base   http.RoundTripper
	header http.Header
}

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	req = req.Clone(req.Context())
	for k, v := range t.header {
		req.Header[k] = v
	}
	return base.RoundTrip(req)
}

// mcpImplementation identifies this client to servers.
var mcpImplementation = &mcp.Implementation{Name: "agentrl", Version: "1"}

func connectMCP(ctx context.Context, tr mcp.Transport, opts MCPOptions) (*MCPClient, error) {
	opts = opts.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	session, err := mcp.NewClient(mcpImplementation, nil).Connect(ctx, tr, nil)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	c := &MCPClient{session: session}
	tools, err := c.listTools(ctx, opts)
	if err != nil {
		_ = session.Close()
		return nil, err
	}
	c.tools = tools
	return c, nil
}

func (c *MCPClient) listTools(ctx context.Context, opts MCPOptions) ([]*MCPTool, error) {
	keep := map[string]bool{}
	for _, n := range opts.Only {
		keep[n] = true
	}
	var out []*MCPTool
	seen := map[string]bool{}
	for t, err := range c.session.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		if t.Name == "" {
			return nil, errors.New("list tools: the server lists a tool without a name")
		}
		if len(keep) > 0 && !keep[t.Name] {
			continue
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("list tools: the server lists %q twice", t.Name)
		}
		seen[t.Name] = true
		schema := json.RawMessage(`{"type":"object"}`)
		if t.InputSchema != nil {
			b, err := json.Marshal(t.InputSchema)
			if err != nil {
				return nil, fmt.Errorf("list tools: schema of %q: %w", t.Name, err)
			}
			schema = b
		}
		out = append(out, &MCPTool{
			client: c, remote: t.Name, name: opts.Prefix + t.Name,
			description: t.Description, schema: schema,
			maxArg: opts.MaxArgBytes, maxResult: opts.MaxResultBytes,
		})
	}
	for n := range keep {
		if !seen[n] {
			return nil, fmt.Errorf("list tools: the server has no tool %q", n)
		}
	}
	return out, nil
}

// Select returns the tools among those listed at connection (Tools) whose server names are in
// only (all of them when only is empty), named prefix + the server's name, in the order the
// server listed them. It lets one session serve several environments, each with its own subset
// and prefix; the tools share the session. A name in only that the server did not list (or that
// MCPOptions.Only left out) is an error naming the tools there are.
func (c *MCPClient) Select(prefix string, only []string) ([]Tool, error) {
	keep := make(map[string]bool, len(only))
	for _, n := range only {
		keep[n] = true
	}
	var out []Tool
	have := make([]string, len(c.tools))
	seen := map[string]bool{}
	for i, t := range c.tools {
		have[i] = t.remote
		if len(keep) > 0 && !keep[t.remote] {
			continue
		}
		seen[t.remote] = true
		cp := *t
		cp.name = prefix + t.remote
		out = append(out, &cp)
	}
	for _, n := range only {
		if !seen[n] {
			return nil, fmt.Errorf("mcp: the server has no tool %q (it has: %s)", n, strings.Join(have, ", "))
		}
	}
	return out, nil
}

// Tools returns the server's tools, in the order the server listed them.
func (c *MCPClient) Tools() []Tool {
	out := make([]Tool, len(c.tools))
	for i, t := range c.tools {
		out[i] = t
	}
	return out
}

// Close ends the session; for a stdio server it closes the server's stdin, waits for it to
// exit (signalling it after a grace period) and reaps it. Later calls fail; Close is
// idempotent.
func (c *MCPClient) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	if err := c.session.Close(); err != nil && !isExitAfterClose(err) {
		return fmt.Errorf("mcp: close: %w", err)
	}
	return nil
}

// isExitAfterClose reports the error a stdio server's exit status produces when it was
// signalled or exited non-zero after its stdin closed: the session did end.
func isExitAfterClose(err error) bool {
	var exitErr *exec.ExitError
	return errors.As(err, &exitErr)
}

func (c *MCPClient) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
