package mcp

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrl/agentrl/tool"
)

// Options tunes an MCP connection. Zero fields take the defaults in parentheses.
type Options struct {
	// Prefix is prepended to every tool name, to keep the tools of several servers apart
	// (none).
	Prefix string
	// Only, when not empty, keeps just the server tools with these names (all).
	Only []string
	// MaxArgBytes bounds a call's JSON arguments (tool.DefaultMaxArgBytes).
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
	// RestartDelay is how long a call waits before trying again to restart a server whose
	// last restart failed; it doubles with each failure up to 30 s (1 s).
	RestartDelay time.Duration
}

func (o Options) withDefaults() Options {
	if o.MaxArgBytes <= 0 {
		o.MaxArgBytes = tool.DefaultMaxArgBytes
	}
	if o.MaxResultBytes <= 0 {
		o.MaxResultBytes = 16 << 10
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 30 * time.Second
	}
	if o.RestartDelay <= 0 {
		o.RestartDelay = time.Second
	}
	return o
}

// maxRestartDelay caps the wait between failed restarts.
const maxRestartDelay = 30 * time.Second

// Client is a session with one MCP server whose tools are exposed as Tools. It owns the
// session (and the server process, for stdio): Close ends both. The tools do not implement
// Close themselves, so env.WithTools may hold them without closing the shared session; whoever
// connected closes the client.
//
// A session that fails under a call (the server process died, the connection broke) is
// replaced at the next call: the server is started again (stdio) or reconnected (HTTP), and
// its tools must still be there. The call that met the failure is not repeated, since the
// server may have acted on it; it fails as an infrastructure error. While the server cannot be
// restarted, calls fail at once until RestartDelay (doubling) has passed since the last try.
type Client struct {
	opts   Options
	redial func(ctx context.Context) (*sdk.ClientSession, error)
	tools  []*Tool
	stderr *tool.CappedBuffer // the stdio server's stderr, for error messages; nil over HTTP

	dialMu sync.Mutex // held while a session is being replaced

	mu       sync.Mutex // protects the fields below
	session  *sdk.ClientSession
	cmd      *exec.Cmd // the current stdio server process; nil over HTTP
	broken   bool      // session failed under a call; the next call replaces it
	delay    time.Duration
	nextTry  time.Time
	lastErr  error
	restarts int
	closed   bool
}

// ConnectCommand starts an MCP server as a child process speaking over stdin and stdout
// (the stdio transport), and lists its tools. The child gets this process's environment and
// working directory and is killed if this process dies.
func ConnectCommand(ctx context.Context, name string, args []string, opts Options) (*Client, error) {
	return ConnectExec(ctx, exec.Command(name, args...), opts)
}

// ConnectExec is ConnectCommand for a prepared, unstarted command, so that the caller
// chooses its environment (cmd.Env) and working directory (cmd.Dir). Unless cmd.SysProcAttr is
// set, the child is killed if this process dies; unless cmd.Stderr is set, the last 4 KiB of the
// child's stderr go into connection errors. The client owns the process from here on: Close
// ends it, and a failed connection has ended it already.
func ConnectExec(ctx context.Context, cmd *exec.Cmd, opts Options) (*Client, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = dieWithParent()
	}
	var stderr *tool.CappedBuffer
	if cmd.Stderr == nil {
		stderr = tool.NewCappedBuffer(4 << 10)
		cmd.Stderr = stderr
	}
	c := &Client{stderr: stderr}
	// Each (re)start runs a fresh copy of cmd: a Cmd runs once.
	next := cmd
	dial := func(ctx context.Context) (*sdk.ClientSession, error) {
		run := next
		next = cloneCmd(run)
		tr := &sdk.CommandTransport{Command: run, TerminateDuration: 2 * time.Second}
		s, err := dialSession(ctx, tr)
		if err != nil {
			if stderr != nil {
				if tail, _ := stderr.String(); tail != "" {
					err = fmt.Errorf("%w; server stderr: %s", err, tail)
				}
			}
			return nil, fmt.Errorf("mcp: %s: %w", cmd.Path, err)
		}
		c.mu.Lock()
		c.cmd = run
		c.mu.Unlock()
		return s, nil
	}
	if err := c.connect(ctx, dial, opts); err != nil {
		return nil, tool.Infra(err)
	}
	return c, nil
}

// cloneCmd is an unstarted copy of cmd, to run it again.
func cloneCmd(cmd *exec.Cmd) *exec.Cmd {
	n := &exec.Cmd{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, Stderr: cmd.Stderr}
	if cmd.SysProcAttr != nil {
		attr := *cmd.SysProcAttr
		n.SysProcAttr = &attr
	}
	return n
}

// ConnectHTTP connects to an MCP server over the streamable HTTP transport at url and lists
// its tools.
func ConnectHTTP(ctx context.Context, url string, opts Options) (*Client, error) {
	client := opts.HTTPClient
	if len(opts.Header) > 0 {
		if client == nil {
			client = http.DefaultClient
		}
		withHeader := *client
		withHeader.Transport = headerTransport{base: cmp.Or[http.RoundTripper](client.Transport, http.DefaultTransport), header: opts.Header.Clone()}
		client = &withHeader
	}
	dial := func(ctx context.Context) (*sdk.ClientSession, error) {
		tr := &sdk.StreamableClientTransport{
			Endpoint:   url,
			HTTPClient: client,
			// Tools are request/response; the server-to-client stream would only carry
			// notifications this adapter does not use.
			DisableStandaloneSSE: true,
		}
		s, err := dialSession(ctx, tr)
		if err != nil {
			return nil, fmt.Errorf("mcp: %s: %w", url, err)
		}
		return s, nil
	}
	c := &Client{}
	if err := c.connect(ctx, dial, opts); err != nil {
		return nil, tool.Infra(err)
	}
	return c, nil
}

// headerTransport adds header to every request before base sends it.
type headerTransport struct {
	base   http.RoundTripper
	header http.Header
}

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range t.header {
		req.Header[k] = v
	}
	return t.base.RoundTrip(req)
}

// implementation identifies this client to servers.
var implementation = &sdk.Implementation{Name: "agentrl", Version: "1"}

func dialSession(ctx context.Context, tr sdk.Transport) (*sdk.ClientSession, error) {
	s, err := sdk.NewClient(implementation, nil).Connect(ctx, tr, nil)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return s, nil
}

// connect opens the first session with dial, lists the tools and keeps dial for restarts.
func (c *Client) connect(ctx context.Context, dial func(context.Context) (*sdk.ClientSession, error), opts Options) error {
	c.opts = opts.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
	defer cancel()
	session, err := dial(ctx)
	if err != nil {
		return err
	}
	c.session, c.redial = session, dial
	tools, err := c.listTools(ctx, session, c.opts)
	if err != nil {
		_ = session.Close()
		return err
	}
	c.tools = tools
	return nil
}

// current returns the session a call should use, first replacing a session that failed
// (see Client). Its errors are infrastructure errors.
func (c *Client) current(ctx context.Context) (*sdk.ClientSession, error) {
	c.mu.Lock()
	s, err := c.usable()
	c.mu.Unlock()
	if s != nil || err != nil {
		return s, err
	}
	c.dialMu.Lock()
	defer c.dialMu.Unlock()
	c.mu.Lock()
	s, err = c.usable() // another call may have restarted it meanwhile
	c.mu.Unlock()
	if s != nil || err != nil {
		return s, err
	}
	dctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
	defer cancel()
	s, err = c.redial(dctx)
	if err == nil {
		if err = c.checkTools(dctx, s); err != nil {
			_ = s.Close()
		}
	}
	c.mu.Lock()
	if err != nil {
		c.delay = min(max(2*c.delay, c.opts.RestartDelay), maxRestartDelay)
		c.nextTry = time.Now().Add(c.delay)
		c.lastErr = err
		c.mu.Unlock()
		return nil, tool.Infra(fmt.Errorf("mcp: restarting the server: %w", err))
	}
	if c.closed {
		c.mu.Unlock()
		_ = s.Close()
		return nil, tool.Infra(errors.New("mcp: client is closed"))
	}
	old := c.session
	c.session, c.broken, c.delay, c.lastErr = s, false, 0, nil
	c.restarts++
	c.mu.Unlock()
	_ = old.Close() // ends what is left of the failed session (reaps a dead server)
	return s, nil
}

// usable is the current session if it has not failed; nil and nil if it has and a restart may
// be tried now. c.mu is held.
func (c *Client) usable() (*sdk.ClientSession, error) {
	switch {
	case c.closed:
		return nil, tool.Infra(errors.New("mcp: client is closed"))
	case !c.broken:
		return c.session, nil
	case time.Now().Before(c.nextTry):
		return nil, tool.Infra(fmt.Errorf("mcp: the server is down (last restart: %v); next try in %v", c.lastErr, time.Until(c.nextTry).Round(time.Millisecond)))
	}
	return nil, nil
}

// failed records that s broke under a call: the next call replaces it.
func (c *Client) failed(s *sdk.ClientSession) {
	c.mu.Lock()
	if c.session == s {
		c.broken = true
	}
	c.mu.Unlock()
}

// Restarts is how many times the server was restarted (or reconnected) after a failure.
func (c *Client) Restarts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restarts
}

// checkTools makes sure a restarted server still has every tool the client hands out.
func (c *Client) checkTools(ctx context.Context, s *sdk.ClientSession) error {
	have := map[string]bool{}
	for t, err := range s.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		have[t.Name] = true
	}
	for _, t := range c.tools {
		if !have[t.remote] {
			return fmt.Errorf("the restarted server no longer has the tool %q", t.remote)
		}
	}
	return nil
}

func (c *Client) listTools(ctx context.Context, session *sdk.ClientSession, opts Options) ([]*Tool, error) {
	keep := map[string]bool{}
	for _, n := range opts.Only {
		keep[n] = true
	}
	var out []*Tool
	seen := map[string]bool{}
	for t, err := range session.Tools(ctx, nil) {
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
		out = append(out, &Tool{
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
// Options.Only left out) is an error naming the tools there are.
func (c *Client) Select(prefix string, only []string) ([]tool.Tool, error) {
	keep := make(map[string]bool, len(only))
	for _, n := range only {
		keep[n] = true
	}
	var out []tool.Tool
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
func (c *Client) Tools() []tool.Tool {
	out := make([]tool.Tool, len(c.tools))
	for i, t := range c.tools {
		out[i] = t
	}
	return out
}

// Close ends the session; for a stdio server it closes the server's stdin, waits for it to
// exit (signalling it after a grace period) and reaps it. Later calls fail; Close is
// idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	// A restart under way sees closed when it ends and closes what it started; taking dialMu
	// waits for it, so the session read here is the last one.
	c.dialMu.Lock()
	c.mu.Lock()
	s, broken := c.session, c.broken
	c.mu.Unlock()
	c.dialMu.Unlock()
	if err := s.Close(); err != nil && !isExitAfterClose(err) && !broken {
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
