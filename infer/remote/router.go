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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentrl/agentrl/infer"
)

// Options configure a Router.
type Options struct {
	Servers []Server
	// Timeout is the deadline of one call to one server (default 5 minutes). A server that does
	// not answer in time counts as failed and the request goes to another.
	Timeout time.Duration
	// Attempts is how many servers one request may try (default min(3, servers)).
	Attempts int
	// HealthInterval is how often every server's /health is checked (default 5 s; negative: never,
	// only request outcomes then eject and re-admit).
	HealthInterval time.Duration
	// EjectAfter consecutive failures take a server out of rotation until a health check or a
	// last-resort request succeeds (default 2).
	EjectAfter int
	// Epoch is sent with every weight update to an agentrl server (0: none, the server's own).
	// Within an epoch a server takes only increasing versions; a newer epoch may set any version.
	// A trainer gives each start of an RL phase a new, later epoch, so that after a crash and a
	// resume it can bring servers that its killed process had advanced past its last checkpoint
	// back to its own weights.
	Epoch int64
	// MaxResponse bounds a response body (default 64 MiB).
	MaxResponse int64
	// Client is the HTTP client (default: one whose transport keeps an idle connection for each of
	// up to 4,096 concurrent requests per server, so connections are reused, never re-dialled).
	// Its own timeout, if any, also applies.
	Client *http.Client
}

// Router is an infer.Generator over several servers. It is safe for concurrent use; Close stops
// its health checks.
type Router struct {
	opts    Options
	client  *http.Client
	servers []*server

	mu     sync.Mutex     // guards the fields below and every server's counters
	sticky map[string]int // session → server index
	order  []string       // sessions in the order they were pinned, for eviction
	stop   context.CancelFunc
	done   chan struct{}
}

// maxIdlePerServer is how many idle connections the default client keeps to one server: as many
// as requests agentrl serve takes in flight by default (serve.Options.MaxPending).
const maxIdlePerServer = 4096

// maxSessions bounds the sticky table; the oldest pins are forgotten first.
const maxSessions = 1 << 16

type server struct {
	Server
	dialect     dialect
	outstanding int
	healthy     bool
	fails       int // consecutive
	version     int32
	behind      bool // a weight update failed here: it serves an older policy and gets no requests
	// adapter is the LoRA adapter a vLLM server's requests name as their model (lora.go), of
	// policy adapterVersion; empty: the served model.
	adapter        string
	adapterVersion int32
	requests       int
	failures       int
}

// ServerStats is one server's counters.
type ServerStats struct {
	Name        string
	Healthy     bool
	Outstanding int
	Requests    int // calls sent
	Failures    int // calls that failed (transport, deadline, 5xx, protocol)
	Version     int32
	// Behind says the last weight update failed on this server: it gets no requests until a later
	// one succeeds there.
	Behind bool
}

// New makes a router over opts.Servers, all healthy until they fail.
func New(opts Options) (*Router, error) {
	if len(opts.Servers) == 0 {
		return nil, errors.New("remote: no servers")
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Minute
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("remote: timeout must be positive, got %s", opts.Timeout)
	}
	if opts.Attempts == 0 {
		opts.Attempts = min(3, len(opts.Servers))
	}
	if opts.Epoch < 0 {
		return nil, fmt.Errorf("remote: epoch must not be negative, got %d", opts.Epoch)
	}
	if opts.Attempts < 1 {
		return nil, fmt.Errorf("remote: attempts must be positive, got %d", opts.Attempts)
	}
	if opts.HealthInterval == 0 {
		opts.HealthInterval = 5 * time.Second
	}
	if opts.EjectAfter == 0 {
		opts.EjectAfter = 2
	}
	if opts.MaxResponse == 0 {
		opts.MaxResponse = 64 << 20
	}
	r := &Router{opts: opts, client: opts.Client, sticky: map[string]int{}, done: make(chan struct{})}
	if r.client == nil {
		r.client = &http.Client{Transport: &http.Transport{
			Proxy:       nil,
			DialContext: (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			// Every connection a server's requests in flight used stays open for the next ones:
			// with fewer idle slots than concurrent requests, each burst would close the surplus
			// and dial it again.
			MaxIdleConns:        0, // no limit but the one per server
			MaxIdleConnsPerHost: maxIdlePerServer,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	names := map[string]bool{}
	for i, s := range opts.Servers {
		d, err := dialectOf(s.Dialect)
		if err != nil {
			return nil, fmt.Errorf("remote: server %d (%s): %w", i, s.Name, err)
		}
		if s.Name == "" {
			s.Name = s.URL
		}
		if names[s.Name] {
			return nil, fmt.Errorf("remote: server name %q twice", s.Name)
		}
		names[s.Name] = true
		if !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://") {
			return nil, fmt.Errorf("remote: server %s: url %q must start with http:// or https://", s.Name, s.URL)
		}
		s.URL = strings.TrimRight(s.URL, "/")
		if s.Dialect == VLLM && s.Model == "" {
			return nil, fmt.Errorf("remote: server %s: a vllm server needs model (its served model name)", s.Name)
		}
		r.servers = append(r.servers, &server{Server: s, dialect: d, healthy: true})
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	if opts.HealthInterval > 0 {
		go r.healthLoop(ctx)
	} else {
		close(r.done)
	}
	return r, nil
}

// Close stops the health checks and waits for them.
func (r *Router) Close() error {
	r.stop()
	<-r.done
	return nil
}

// SetVersion records the policy version a server confirmed loading (after a weight update
// succeeded there); completions of dialects that report no version carry it.
func (r *Router) SetVersion(name string, v int32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.servers {
		if s.Name == name {
			s.version = v
			return nil
		}
	}
	return fmt.Errorf("remote: no server named %q", name)
}

// Stats returns every server's counters.
func (r *Router) Stats() []ServerStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ServerStats, len(r.servers))
	for i, s := range r.servers {
		out[i] = ServerStats{Name: s.Name, Healthy: s.healthy, Outstanding: s.outstanding, Requests: s.requests, Failures: s.failures, Version: s.version, Behind: s.behind}
	}
	return out
}

// Generate sends req to a server and returns its completion. A failure before a completion
// arrived (transport error, deadline, 5xx, 429) is retried on another server; a request the
// server refuses as bad (other 4xx) and a response that breaks the protocol are not.
func (r *Router) Generate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	if err := req.Sampling.Validate(); err != nil {
		return infer.Completion{}, err
	}
	tried := make([]bool, len(r.servers))
	var errs []error
	for range r.opts.Attempts {
		i := r.pick(req.Session, tried)
		if i < 0 {
			break
		}
		tried[i] = true
		c, err := r.call(ctx, i, req)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return infer.Completion{}, ctx.Err()
		}
		errs = append(errs, fmt.Errorf("%s: %w", r.servers[i].Name, err))
		var fatal *requestError
		if errors.Is(err, errProtocol) || errors.As(err, &fatal) {
			break
		}
	}
	if len(errs) == 0 {
		return infer.Completion{}, errors.New("remote: no server to send the request to")
	}
	return infer.Completion{}, fmt.Errorf("remote: generation failed on %d server(s): %w", len(errs), errors.Join(errs...))
}

// pick chooses the session's server when it is healthy and untried, otherwise the healthy
// untried server with the fewest outstanding requests (then the fewest sent); when no healthy
// one is left, an ejected one as a last resort. A server that missed a weight update is never
// chosen. It counts the request as outstanding.
func (r *Router) pick(session string, tried []bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	best := -1
	if session != "" {
		if i, ok := r.sticky[session]; ok && !tried[i] && r.servers[i].healthy && !r.servers[i].behind {
			best = i
		}
	}
	for _, healthyOnly := range []bool{true, false} {
		if best >= 0 {
			break
		}
		for i, s := range r.servers {
			if tried[i] || s.behind || (healthyOnly && !s.healthy) {
				continue
			}
			if best < 0 || s.outstanding < r.servers[best].outstanding ||
				(s.outstanding == r.servers[best].outstanding && s.requests < r.servers[best].requests) {
				best = i
			}
		}
	}
	if best < 0 {
		return -1
	}
	if session != "" {
		if _, ok := r.sticky[session]; !ok {
			r.order = append(r.order, session)
			if len(r.order) > maxSessions {
				delete(r.sticky, r.order[0])
				r.order = r.order[1:]
			}
		}
		r.sticky[session] = best
	}
	r.servers[best].outstanding++
	r.servers[best].requests++
	return best
}

// requestError is a 4xx answer other than 408 and 429: the request itself is refused.
type requestError struct {
	status int
	msg    string
}

func (e *requestError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.msg) }

// call sends req to server i under the per-call deadline.
func (r *Router) call(ctx context.Context, i int, req infer.Request) (c infer.Completion, err error) {
	s := r.servers[i]
	defer func() {
		var refused *requestError // the request's fault, not the server's
		r.done1(i, err == nil || ctx.Err() != nil || errors.As(err, &refused))
	}()
	if s.Dialect != Agentrl && !s.ProcessedLogprobs && !req.Sampling.Exact() {
		return c, &requestError{status: 400, msg: "this server returns logprobs before temperature, top-k and top-p; declare processed_logprobs (vLLM: --logprobs-mode processed_logprobs) or sample exactly"}
	}
	srv, exactVersion, exact := r.requestServer(s)
	body, err := s.dialect.encode(make([]byte, 0, 160+12*(len(req.Prompt)+len(req.Stop))), srv, req)
	if err != nil {
		return c, err
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(cctx, http.MethodPost, s.URL+s.dialect.path(), bytes.NewReader(body))
	if err != nil {
		return c, err
	}
	hr.Header["Content-Type"] = jsonType
	if a := s.dialect.accept(); a != nil {
		hr.Header["Accept"] = a
	}
	if s.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+s.APIKey)
	}
	resp, err := r.client.Do(hr)
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	buf := buffers.Get().(*[]byte)
	defer putBuffer(buf)
	data, err := readAll(resp.Body, resp.ContentLength, r.opts.MaxResponse, buf)
	if err != nil {
		return c, err
	}
	if resp.StatusCode != http.StatusOK {
		msg := errorMessage(data)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout {
			return c, &requestError{status: resp.StatusCode, msg: msg}
		}
		return c, fmt.Errorf("HTTP %d: %s", resp.StatusCode, msg)
	}
	r.mu.Lock()
	version := s.version
	r.mu.Unlock()
	if exact {
		version = exactVersion
	}
	return s.dialect.decode(data, resp.Header.Get("Content-Type"), version)
}

// jsonType is the Content-Type of every request body (a header value is never modified once set).
var jsonType = []string{"application/json"}

// buffers hold response bodies between calls; the decoders copy what they keep.
var buffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooled is the largest buffer kept for reuse: a rare large body is left to the collector.
const maxPooled = 1 << 20

func putBuffer(b *[]byte) {
	if cap(*b) <= maxPooled {
		*b = (*b)[:0]
		buffers.Put(b)
	}
}

// readAll reads body, whose length is n when known (not -1), into buf, and refuses one over limit
// bytes as a protocol violation.
func readAll(body io.Reader, n, limit int64, buf *[]byte) ([]byte, error) {
	b := (*buf)[:0]
	if n > 0 && n <= limit {
		b = slices.Grow(b, int(n)+1) // +1: the read that finds the end needs room
	}
	lr := io.LimitReader(body, limit+1)
	for {
		if len(b) == cap(b) {
			b = slices.Grow(b, 512)
		}
		m, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		*buf = b
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: response larger than %d bytes", errProtocol, limit)
	}
	return b, nil
}

// done1 ends a call to server i: one request fewer outstanding, and its health updated.
func (r *Router) done1(i int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.servers[i]
	s.outstanding--
	r.mark(s, ok)
}

// mark records a success or failure of s; the caller holds r.mu.
func (r *Router) mark(s *server, ok bool) {
	if ok {
		s.fails, s.healthy = 0, true
		return
	}
	s.fails++
	s.failures++
	if s.fails >= r.opts.EjectAfter {
		s.healthy = false
	}
}

// errorMessage extracts an OpenAI-style {"error": {"message": …}} or a plain body, shortened.
func errorMessage(data []byte) string {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &e) == nil && len(e.Error) > 0 {
		var m struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(e.Error, &m) == nil && m.Message != "" {
			return m.Message
		}
		var s string
		if json.Unmarshal(e.Error, &s) == nil {
			return s
		}
	}
	s := strings.TrimSpace(string(data))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// healthLoop checks every server's /health each interval until ctx ends.
func (r *Router) healthLoop(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.opts.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var wg sync.WaitGroup
		for _, s := range r.servers {
			wg.Go(func() {
				ok := r.probe(ctx, s)
				if ctx.Err() != nil {
					return
				}
				r.mu.Lock()
				r.mark(s, ok)
				r.mu.Unlock()
			})
		}
		wg.Wait()
	}
}

// probe asks s's /health, bounded by the interval.
func (r *Router) probe(ctx context.Context, s *server) bool {
	cctx, cancel := context.WithTimeout(ctx, min(r.opts.HealthInterval, r.opts.Timeout))
	defer cancel()
	hr, err := http.NewRequestWithContext(cctx, http.MethodGet, s.URL+"/health", nil)
	if err != nil {
		return false
	}
	if s.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+s.APIKey)
	}
	resp, err := r.client.Do(hr)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
