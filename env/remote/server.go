package remote

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/agentrl/agentrl/env"
)

// Clock tells the time; tests inject a fake one to drive idle expiry.
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// ServerOptions configures NewServer. Zero fields take the defaults in parentheses.
type ServerOptions struct {
	// IdleTimeout ends a session nobody has used for this long (10 minutes).
	IdleTimeout time.Duration
	// MaxSessions bounds live sessions; a reset beyond it gets 503 (256).
	MaxSessions int
	// MaxBodyBytes bounds a request body; larger gets 413 (8 MiB: envtest sends 1 MiB actions,
	// which grow by a third when they are not UTF-8).
	MaxBodyBytes int64
	// MaxIdleEnvs is how many environments of closed sessions are kept for reuse, since some
	// (sandboxes) are costly to make (8). Negative keeps none.
	MaxIdleEnvs int
	// StepTimeout bounds one Reset or Step of the environment; past it the answer is 504
	// (0: no bound beyond the request's own context).
	StepTimeout time.Duration
	// EvictIdle lets a reset that finds every session taken end the least recently used session
	// idle for at least this long (30s), so clients that leave sessions open cannot lock others
	// out until the idle timeout; that session's client is told on its next call (410
	// session_evicted). Negative never evicts: a full server answers 503.
	EvictIdle time.Duration
	// Clock drives idle expiry (the system clock).
	Clock Clock

	// The HTTP connection limits of Serve. ReadHeaderTimeout bounds reading a request's headers
	// (10s) and ReadTimeout the whole request with its body (1m): a client that trickles its
	// request is cut off there (net/http lifts the deadline once the body is read, so the
	// environment's work afterwards is not bounded by it).
	// WriteTimeout bounds a request from the end of its headers to the end of the answer, the
	// environment's work included (StepTimeout + 1m when StepTimeout is set, 10m otherwise).
	// ConnIdleTimeout closes a keep-alive connection idle this long between requests (2m).
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	ConnIdleTimeout   time.Duration
}

func (o ServerOptions) withDefaults() (ServerOptions, error) {
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 10 * time.Minute
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = 256
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 8 << 20
	}
	if o.MaxIdleEnvs == 0 {
		o.MaxIdleEnvs = 8
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if o.EvictIdle == 0 {
		o.EvictIdle = 30 * time.Second
	}
	if o.ReadHeaderTimeout == 0 {
		o.ReadHeaderTimeout = 10 * time.Second
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = time.Minute
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 10 * time.Minute
		if o.StepTimeout > 0 {
			o.WriteTimeout = o.StepTimeout + time.Minute
		}
	}
	if o.ConnIdleTimeout == 0 {
		o.ConnIdleTimeout = 2 * time.Minute
	}
	switch {
	case o.IdleTimeout < 0:
		return o, fmt.Errorf("remote: idle timeout %v is negative", o.IdleTimeout)
	case o.MaxSessions < 0:
		return o, fmt.Errorf("remote: max sessions %d is negative", o.MaxSessions)
	case o.MaxBodyBytes < 0:
		return o, fmt.Errorf("remote: max body bytes %d is negative", o.MaxBodyBytes)
	case o.StepTimeout < 0:
		return o, fmt.Errorf("remote: step timeout %v is negative", o.StepTimeout)
	case o.ReadHeaderTimeout < 0 || o.ReadTimeout < 0 || o.WriteTimeout < 0 || o.ConnIdleTimeout < 0:
		return o, fmt.Errorf("remote: connection timeouts must not be negative (read header %v, read %v, write %v, connection idle %v)",
			o.ReadHeaderTimeout, o.ReadTimeout, o.WriteTimeout, o.ConnIdleTimeout)
	}
	return o, nil
}

// Server serves one environment spec over HTTP. It is an http.Handler; Close ends every session.
type Server struct {
	spec   env.Spec
	opts   ServerOptions
	routes map[string]route

	mu       sync.Mutex // protects sessions, expired, idleEnvs, closed
	sessions map[string]*session
	expired  tombstones
	idleEnvs []env.Env
	closed   bool

	stop     chan struct{} // closed by Close; stops the reaper
	reaperWG sync.WaitGroup

	metrics *serverMetrics // GET /metrics
}

type route struct {
	methods []string
	handle  func(http.ResponseWriter, *http.Request) error
}

// NewServer returns a server for spec and starts its idle-session reaper.
func NewServer(spec env.Spec, opts ServerOptions) (*Server, error) {
	if spec.Name == "" || spec.New == nil {
		return nil, errors.New("remote: spec needs a Name and New")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{spec: spec, opts: opts, sessions: map[string]*session{}, stop: make(chan struct{}),
		expired: newTombstones(4096)}
	s.routes = map[string]route{
		"/reset":    {[]string{http.MethodPost}, s.handleReset},
		"/step":     {[]string{http.MethodPost}, s.handleStep},
		"/state":    {[]string{http.MethodGet}, s.handleState},
		"/close":    {[]string{http.MethodPost, http.MethodDelete}, s.handleClose},
		"/health":   {[]string{http.MethodGet}, s.handleHealth},
		"/metadata": {[]string{http.MethodGet}, s.handleMetadata},
		"/schema":   {[]string{http.MethodGet}, s.handleSchema},
		"/expert":   {[]string{http.MethodPost}, s.handleExpert},
	}
	s.metrics = newServerMetrics(s)
	s.reaperWG.Add(1)
	go s.reap()
	return s, nil
}

// apiError is an error with its HTTP status and code.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

// ServeHTTP routes a request; every failure answers with a JSON error body. GET /metrics is
// Prometheus text: requests by route and status, their durations, live sessions and the sessions
// the server ended.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/metrics" && r.Method == http.MethodGet {
		s.metrics.handler.ServeHTTP(w, r)
		return
	}
	rt, ok := s.routes[r.URL.Path]
	if !ok {
		writeError(w, errorf(http.StatusNotFound, CodeNotFound, "no endpoint %s (have /reset /step /state /close /health /metadata /schema /expert /metrics)", r.URL.Path))
		return
	}
	t0 := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	defer func() { s.metrics.observe(r.URL.Path, sw.status, time.Since(t0)) }()
	w = sw
	allowed := false
	for _, m := range rt.methods {
		allowed = allowed || m == r.Method
	}
	if !allowed {
		w.Header().Set("Allow", joinMethods(rt.methods))
		writeError(w, errorf(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "%s %s: allowed %s", r.Method, r.URL.Path, joinMethods(rt.methods)))
		return
	}
	if err := rt.handle(w, r); err != nil {
		writeError(w, err)
	}
}

func joinMethods(ms []string) string {
	out := ms[0]
	for _, m := range ms[1:] {
		out += ", " + m
	}
	return out
}

func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = errorf(http.StatusInternalServerError, CodeEnvError, "%v", err)
	}
	var body errorBody
	body.Error.Code, body.Error.Message = ae.code, ae.msg
	writeJSON(w, ae.status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"env_error","message":"encode response: ` + jsonEscape(err.Error()) + `"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// decodeBody reads a JSON request body strictly: bounded size, no unknown fields, one value.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, dst any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, "request body over %d bytes", s.opts.MaxBodyBytes)
		}
		return errorf(http.StatusBadRequest, CodeBadRequest, "read body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return errorf(http.StatusBadRequest, CodeBadRequest, "bad JSON body: %v", err)
	}
	if dec.More() {
		return errorf(http.StatusBadRequest, CodeBadRequest, "bad JSON body: data after the object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errorf(http.StatusBadRequest, CodeBadRequest, "bad JSON body: data after the object")
	}
	return nil
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) error {
	s.mu.Lock()
	n, closed := len(s.sessions), s.closed
	s.mu.Unlock()
	if closed {
		return errorf(http.StatusServiceUnavailable, CodeShuttingDown, "server is closed")
	}
	writeJSON(w, http.StatusOK, health{Status: "ok", Env: s.spec.Name, Sessions: n})
	return nil
}

func (s *Server) handleMetadata(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, Metadata{
		Protocol: ProtocolVersion, Name: s.spec.Name, Description: s.spec.Description,
		Train:        Range{s.spec.Train.Lo, s.spec.Train.Hi},
		Heldout:      Range{s.spec.Heldout.Lo, s.spec.Heldout.Hi},
		MaxBodyBytes: s.opts.MaxBodyBytes, MaxSessions: s.opts.MaxSessions,
		IdleTimeoutMS: s.opts.IdleTimeout.Milliseconds(), Expert: s.spec.Expert != nil,
	})
	return nil
}

func (s *Server) handleSchema(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(schemaJSON) // a failed write means the client left; there is no one to tell
	return nil
}
