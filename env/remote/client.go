package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/traj"
)

// ClientOptions configures Dial and Spec. Zero fields take the defaults in parentheses.
type ClientOptions struct {
	// Timeout bounds each request, on top of the caller's context; a request past it fails with
	// an error wrapping context.DeadlineExceeded (60s).
	Timeout time.Duration
	// MaxResponseBytes bounds a response body (64 MiB).
	MaxResponseBytes int64
	// APIKey, when set, is sent as "Authorization: Bearer <key>" with every request.
	APIKey string
	// Transport replaces the client's own tuned transport (tests, proxies). A client closes idle
	// connections only of a transport it made itself.
	Transport http.RoundTripper
}

func (o ClientOptions) withDefaults() (ClientOptions, error) {
	if o.Timeout == 0 {
		o.Timeout = 60 * time.Second
	}
	if o.MaxResponseBytes == 0 {
		o.MaxResponseBytes = 64 << 20
	}
	if o.Timeout < 0 || o.MaxResponseBytes < 0 {
		return o, fmt.Errorf("remote: negative client option (timeout %v, max response %d)", o.Timeout, o.MaxResponseBytes)
	}
	return o, nil
}

// newTransport is tuned for one environment instance talking to one server: its requests are
// sequential, so a couple of kept-alive connections serve every episode without new handshakes.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          2,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true, // small JSON, usually on loopback: gzip would cost more than it saves
		ExpectContinueTimeout: time.Second,
	}
}

// Client is a remote environment instance: an env.Env and env.Closer whose episodes run on a
// server. Like any Env it is for one episode at a time; it is not safe for concurrent use.
type Client struct {
	base    *url.URL
	opts    ClientOptions
	hc      *http.Client
	owned   *http.Transport // closed on Close; nil when the caller supplied the transport
	session string
	closed  bool
}

// Dial returns a client for the server at baseURL (e.g. "http://127.0.0.1:8931"). It does not
// contact the server; the first Reset does.
func Dial(baseURL string, opts ClientOptions) (*Client, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("remote: base URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("remote: base URL %q: want http://host:port or https://host:port", baseURL)
	}
	c := &Client{base: u, opts: opts}
	rt := opts.Transport
	if rt == nil {
		c.owned = newTransport()
		rt = c.owned
	}
	// No redirects: a step that moved is not the same step.
	c.hc = &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return c, nil
}

// SessionID is the server session of the current episode ("" before the first Reset).
func (c *Client) SessionID() string { return c.session }

// Reset ends the current session, if any, and starts a new one for seed.
func (c *Client) Reset(ctx context.Context, seed int64) (env.Observation, error) {
	if c.closed {
		return env.Observation{}, errors.New("remote env: reset after Close")
	}
	if c.session != "" {
		if err := c.closeSession(ctx); err != nil {
			return env.Observation{}, err
		}
	}
	var resp resetResponse
	if err := c.call(ctx, "reset", http.MethodPost, "/reset", resetRequest{Seed: &seed}, &resp); err != nil {
		return env.Observation{}, err
	}
	if resp.SessionID == "" {
		return env.Observation{}, fmt.Errorf("remote env reset: %w: answer without a session id", ErrProtocol)
	}
	c.session = resp.SessionID
	return env.Observation{System: string(resp.Observation.System), Text: string(resp.Observation.Text)}, nil
}

// Step sends action to the current session.
func (c *Client) Step(ctx context.Context, action string) (env.Transition, error) {
	if c.closed {
		return env.Transition{}, errors.New("remote env: step after Close")
	}
	if c.session == "" {
		return env.Transition{}, fmt.Errorf("remote env step: %w", env.ErrNotReset)
	}
	a := text(action)
	var resp stepResponse
	if err := c.call(ctx, "step", http.MethodPost, "/step", stepRequest{SessionID: c.session, Action: &a}, &resp); err != nil {
		return env.Transition{}, err
	}
	role, err := traj.ParseRole(resp.Role)
	if err != nil {
		return env.Transition{}, fmt.Errorf("remote env step: %w: %v", ErrProtocol, err)
	}
	tr := env.Transition{Observation: string(resp.Observation), Role: role, Reward: float64(resp.Reward), Done: resp.Done}
	for _, tc := range resp.ToolCalls {
		tr.ToolCalls = append(tr.ToolCalls, traj.ToolCall{Name: string(tc.Name), Arguments: string(tc.Arguments),
			Result: string(tc.Result), Error: string(tc.Error)})
	}
	if len(resp.Info) > 0 {
		tr.Info = make(map[string]string, len(resp.Info))
		for k, v := range resp.Info {
			tr.Info[k] = string(v)
		}
	}
	return tr, nil
}

// State asks the server about the current session.
func (c *Client) State(ctx context.Context) (State, error) {
	if c.session == "" {
		return State{}, fmt.Errorf("remote env state: %w", env.ErrNotReset)
	}
	var st State
	err := c.call(ctx, "state", http.MethodGet, "/state?session_id="+url.QueryEscape(c.session), nil, &st)
	return st, err
}

// Close ends the current session on the server and releases idle connections. A session the
// server already dropped (expired, or the server restarted) is not an error; an unreachable server
// is, though the client is closed either way.
func (c *Client) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	var err error
	if c.session != "" {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
		err = c.closeSession(ctx)
		cancel()
	}
	if c.owned != nil {
		c.owned.CloseIdleConnections()
	}
	return err
}

func (c *Client) closeSession(ctx context.Context) error {
	id := c.session
	c.session = ""
	err := c.call(ctx, "close", http.MethodPost, "/close", closeRequest{SessionID: id}, nil)
	if errors.Is(err, ErrSessionNotFound) || errors.Is(err, ErrSessionExpired) || errors.Is(err, ErrSessionEvicted) {
		return nil
	}
	return err
}

// call sends one request and decodes a 2xx JSON answer into out (if non-nil).
func (c *Client) call(ctx context.Context, op, method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("remote env %s: encode request: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, body)
	if err != nil {
		return fmt.Errorf("remote env %s: %w", op, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("remote env %s %s: %w", op, c.base.Host, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, c.opts.MaxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("remote env %s %s: read answer: %w", op, c.base.Host, err)
	}
	if int64(len(raw)) > c.opts.MaxResponseBytes {
		return fmt.Errorf("remote env %s: %w: answer over %d bytes", op, ErrProtocol, c.opts.MaxResponseBytes)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := &Error{Op: op, Status: resp.StatusCode}
		var eb errorBody
		if json.Unmarshal(raw, &eb) == nil && eb.Error.Code != "" {
			e.Code, e.Message = eb.Error.Code, eb.Error.Message
		} else {
			e.Code, e.Message = http.StatusText(resp.StatusCode), strings.TrimSpace(string(raw[:min(len(raw), 200)]))
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("remote env %s: %w: decode answer: %v", op, ErrProtocol, err)
	}
	return nil
}
