// Package serve is a trained policy as an HTTP server (agentrl serve): OpenAI-compatible
// completions, chat completions (with tools, streaming, logprobs and vLLM's token-id
// extensions) and the Responses API (with previous_response_id over a bounded in-memory store),
// forced tool calls and JSON-schema output by constrained decoding (a schema automaton masking
// the vocabulary before sampling), the agentrl token route that gives training exactly what the in-process
// Generator gives (tokens, logprobs under the distribution actually sampled from, the policy
// version of every token), weight updates while requests are in flight, /health, /v1/models and
// Prometheus /metrics. Every client shares one local.Engine, so requests from all of them are
// decoded together (continuous batching); a client that disconnects ends its generation at the
// next decode step and frees its slot.
//
// Security: Listen refuses a non-loopback address unless the server has an API key or insecure
// is asked for explicitly; with a key, every /v1 and /agentrl route needs it as a bearer token;
// the weight routes always need it (without a key they are disabled). Bodies are bounded and
// read under a deadline (a request refused before its body is read closes its connection); text
// is bounded before it is tokenized, and so is the tokenizing done at once; user and tool
// content is plain text, never control tokens (unless Options.ChatSpecialTokens); malformed
// requests get OpenAI-style JSON errors with a 4xx status.
//
// It does not tokenize with anything but the checkpoint's tokenizer and ChatML template, run
// tools (the client runs them: tool calls come back as tool_calls), compute prompt logprobs
// (echo with logprobs is refused), or route between servers (the remote Generator does).
package serve

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/internal/httpserve"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
)

// Options configure a Server. Zero fields take the defaults below.
type Options struct {
	// ModelName is the id of the one model served (/v1/models, the "model" field). Default "agentrl".
	ModelName string
	// Slots is how many sequences decode together; more requests wait. Default 32.
	Slots int
	// MaxLen bounds prompt + completion tokens of one sequence; 0 means the model's max_seq.
	MaxLen int
	// Version is the policy version of the checkpoint's weights. Weight updates must exceed it.
	Version int32
	// APIKey, when set, is required as "Authorization: Bearer KEY" on /v1 and /agentrl routes.
	// Without it the weight routes are disabled.
	APIKey string
	// MaxBodyBytes bounds a generation request's body. Default 8 MiB.
	MaxBodyBytes int64
	// MaxWeightBytes bounds a pushed model.safetensors. Default 4 GiB.
	MaxWeightBytes int64
	// MaxPending bounds the generations in flight (running or waiting for a slot); a request that
	// would exceed it gets 429. Default 4096.
	MaxPending int
	// RequestTimeout bounds one request's generation. Default 10 minutes.
	RequestTimeout time.Duration
	// ReadTimeout bounds reading one request, headers and body (a pushed model.safetensors has
	// its own, longer bound). Default 30 seconds.
	ReadTimeout time.Duration
	// ChatSpecialTokens reads added-token strings (<|im_end|>, <|im_start|>, <tool_call>, …) in
	// user and tool content as those control tokens, as Encode does. By default (false) they are
	// encoded as plain text, so that the text of a user or a tool cannot end its turn and forge
	// a system or assistant message.
	ChatSpecialTokens bool
	// ResponseStore bounds the responses kept for previous_response_id (the Responses API), the
	// oldest evicted first. Default 1024.
	ResponseStore int
	// ResponseStoreBytes bounds the text those responses hold. Default 64 MiB.
	ResponseStoreBytes int64
}

func (o Options) withDefaults() Options {
	if o.ModelName == "" {
		o.ModelName = "agentrl"
	}
	if o.Slots == 0 {
		o.Slots = 32
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 8 << 20
	}
	if o.MaxWeightBytes == 0 {
		o.MaxWeightBytes = 4 << 30
	}
	if o.MaxPending == 0 {
		o.MaxPending = 4096
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 10 * time.Minute
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = 30 * time.Second
	}
	if o.ResponseStore == 0 {
		o.ResponseStore = 1024
	}
	if o.ResponseStoreBytes == 0 {
		o.ResponseStoreBytes = 64 << 20
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.Slots < 1:
		return fmt.Errorf("serve: slots must be at least 1, got %d", o.Slots)
	case o.MaxLen < 0:
		return fmt.Errorf("serve: max length must not be negative, got %d", o.MaxLen)
	case o.MaxBodyBytes < 1 || o.MaxWeightBytes < 1 || o.MaxPending < 1 || o.RequestTimeout < 0 || o.ReadTimeout < 0:
		return errors.New("serve: body limits, max pending and the request and read timeouts must be positive")
	case o.ResponseStore < 1 || o.ResponseStoreBytes < 1:
		return errors.New("serve: the response store's bounds must be positive")
	case o.Version < 0:
		return fmt.Errorf("serve: version must not be negative, got %d", o.Version)
	}
	if err := httpserve.CheckKey(o.APIKey); err != nil {
		return fmt.Errorf("serve: API key: %w", err)
	}
	return nil
}

// Server serves one policy. It is an http.Handler; Serve runs it on a listener.
type Server struct {
	opts       Options
	eng        atomic.Pointer[engine] // the engine new generations go to
	engCfg     local.EngineConfig
	tok        *tokenizer.Tokenizer
	mcfg       model.Config
	maxLen     int
	configJSON []byte // the checkpoint's config.json, for pushed weights
	created    int64
	met        *metrics
	routes     map[string]route

	stopIDs []int32       // the end of a chat turn and of text: default stop tokens
	chatTpl *chatTemplate // the checkpoint's own chat template; nil: agentrl's ChatML

	maxPiece    int            // the most bytes one token decodes to (textBound)
	tokenizeSem chan struct{}  // bounds the texts tokenized at once
	encodeHook  func()         // nil, or run while a text is tokenized (tests count them)
	added       []addedToken   // the tokenizer's added tokens, longest first (encodeChat)
	addedFirst  [256]bool      // their first bytes
	responses   *responseStore // the Responses API's stored responses
	vocabOnce   sync.Once
	vocabIdx    *vocabIndex // the token mask's view of the vocabulary (vocab)

	wmu     sync.Mutex // serializes weight updates and Close
	latest  int32      // the version last accepted (loaded or being loaded); under wmu
	epoch   atomic.Int64
	retired []*engine // engines replaced by rewinds, closed by Close if still running; under wmu
	closed  bool      // under wmu

	pending atomic.Int64 // generations in flight

	scorer *local.Scorer // the score route's copy of the served weights (set with every update)
}

type route struct {
	method string
	auth   authLevel
	handle func(w http.ResponseWriter, r *http.Request) error
}

type authLevel int

const (
	authNone   authLevel = iota // /health, /metrics
	authKey                     // the key when the server has one
	authAlways                  // the key, and the server must have one
)

// Open loads the checkpoint folder dir (model.safetensors, config.json, tokenizer.json) and
// starts a server over it.
func Open(dir string, opts Options) (*Server, error) {
	ck, err := checkpoint.Load(dir)
	if err != nil {
		return nil, err
	}
	cfgJSON, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	return New(ck.Model, ck.Tokenizer, cfgJSON, opts)
}

// New starts a server over m (copied: the caller may keep using it) and tok. configJSON is the
// checkpoint's config.json, which pushed weights are read against.
func New(m *model.Model, tok *tokenizer.Tokenizer, configJSON []byte, opts Options) (*Server, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if m == nil || tok == nil {
		return nil, errors.New("serve: New needs a model and a tokenizer")
	}
	if tok.VocabSize() > m.Cfg.Vocab {
		return nil, fmt.Errorf("serve: the tokenizer has %d ids but the model only %d", tok.VocabSize(), m.Cfg.Vocab)
	}
	engCfg := local.EngineConfig{Slots: opts.Slots, MaxLen: opts.MaxLen}
	eng, err := local.NewEngine(m, opts.Version, engCfg)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s := &Server{
		opts:       opts,
		engCfg:     engCfg,
		tok:        tok,
		mcfg:       m.Cfg,
		maxLen:     opts.MaxLen,
		configJSON: configJSON,
		created:    time.Now().Unix(),
		latest:     opts.Version,
	}
	s.eng.Store(&engine{Engine: eng})
	if s.scorer, err = local.NewScorer(m.Clone(), opts.Version); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if s.maxLen == 0 {
		s.maxLen = m.Cfg.MaxSeq
	}
	s.stopIDs = []int32{tok.EndOfTurn()}
	if id, ok := tok.SpecialID(tokenizer.EndOfText); ok && id != tok.EndOfTurn() {
		s.stopIDs = append(s.stopIDs, id)
	}
	if s.chatTpl, err = loadChatTemplate(tok); err != nil {
		return nil, err
	}
	if s.chatTpl != nil {
		s.stopIDs = s.chatTpl.plain.Stop()
	}
	s.maxPiece = longestPiece(tok)
	s.tokenizeSem = make(chan struct{}, tokenizeSlots())
	s.added = addedTokens(tok)
	for _, a := range s.added {
		s.addedFirst[a.text[0]] = true
	}
	s.responses = newResponseStore(opts.ResponseStore, opts.ResponseStoreBytes)
	s.met = newMetrics(s)
	s.routes = map[string]route{
		"/health":                {http.MethodGet, authNone, s.handleHealth},
		"/metrics":               {http.MethodGet, authNone, s.handleMetrics},
		"/v1/models":             {http.MethodGet, authKey, s.handleModels},
		"/v1/completions":        {http.MethodPost, authKey, s.handleCompletions},
		"/v1/chat/completions":   {http.MethodPost, authKey, s.handleChat},
		"/v1/responses":          {http.MethodPost, authKey, s.handleResponses},
		"/agentrl/v1/generate":   {http.MethodPost, authKey, s.handleGenerate},
		"/agentrl/v1/weights":    {http.MethodPost, authAlways, s.handleWeights},
		"/agentrl/v1/version":    {http.MethodGet, authKey, s.handleVersion},
		"/agentrl/v1/tokenize":   {http.MethodPost, authKey, s.handleTokenize},
		"/agentrl/v1/detokenize": {http.MethodPost, authKey, s.handleDetokenize},
		"/agentrl/v1/score":      {http.MethodPost, authKey, s.handleScore},
	}
	return s, nil
}

// Version is the policy version of the weights in use.
func (s *Server) Version() int32 { return s.eng.Load().Version() }

// EngineStats is the decode work of the engine in use (local.Engine.Stats); a rewind's fresh
// engine starts from zero.
func (s *Server) EngineStats() local.Stats { return s.eng.Load().Stats() }

// Epoch is the epoch of the weights in use: 0 until a weight update names one (see
// handleWeights).
func (s *Server) Epoch() int64 { return s.epoch.Load() }

// Close stops the engine; requests in flight fail.
func (s *Server) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.closed = true
	for _, e := range s.retired {
		e.Close()
	}
	return s.eng.Load().Close()
}

// ServeHTTP routes a request, checks its method and key, and answers every failure, including a
// panic, as an OpenAI-style JSON error.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	rt, ok := s.routes[r.URL.Path]
	name := r.URL.Path
	if !ok {
		name = "other"
	}
	defer func() {
		if p := recover(); p != nil {
			if !rec.wrote {
				writeError(rec, fmt.Errorf("serve: internal error: %v", p))
			}
		}
		s.met.observe(name, rec.status, time.Since(start))
	}()
	// A request refused before its body is read closes the connection: the server would
	// otherwise read the unread body to reuse it, for as long as the client trickles it
	// (closeAfterDraining bounds what is read of it).
	refuse := func(err error) {
		if r.ContentLength != 0 {
			closeAfterDraining(rec, r.Body)
		}
		writeError(rec, err)
	}
	if !ok {
		refuse(&apiError{status: http.StatusNotFound, typ: typeNotFound, code: "unknown_url",
			message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
		return
	}
	if r.Method != rt.method && (r.Method != http.MethodHead || rt.method != http.MethodGet) {
		allow := rt.method
		if allow == http.MethodGet {
			allow = "GET, HEAD"
		}
		rec.Header().Set("Allow", allow)
		refuse(&apiError{status: http.StatusMethodNotAllowed, typ: typeInvalid, code: "method_not_allowed",
			message: fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, rt.method)})
		return
	}
	if err := s.authorize(r, rt.auth); err != nil {
		refuse(err)
		return
	}
	body := &bodyTracker{ReadCloser: r.Body}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = body
	}
	if err := rt.handle(rec, r); err != nil {
		if !rec.wrote {
			if r.ContentLength != 0 && !body.eof {
				// The body was not read to its end (too large, trickled past the read timeout,
				// or refused first): close rather than read the rest to reuse the connection.
				closeAfterDraining(rec, r.Body)
			}
			writeError(rec, err)
		}
	}
}

func (s *Server) authorize(r *http.Request, lvl authLevel) error {
	if lvl == authNone || (lvl == authKey && s.opts.APIKey == "") {
		return nil
	}
	if s.opts.APIKey == "" {
		return &apiError{status: http.StatusForbidden, typ: typePerm, code: "weights_disabled",
			message: "weight updates are disabled: start the server with an API key (--api-key or AGENTRL_API_KEY)"}
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(s.opts.APIKey)) != 1 {
		return &apiError{status: http.StatusUnauthorized, typ: typeAuth, code: "invalid_api_key",
			message: "missing or wrong API key: send Authorization: Bearer KEY"}
	}
	return nil
}

// bodyTracker notes whether a request body was read to its end.
type bodyTracker struct {
	io.ReadCloser
	eof bool
}

func (b *bodyTracker) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// statusRecorder remembers the status written, for metrics and the panic handler.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	if !r.wrote {
		r.status, r.wrote = http.StatusOK, true
	}
	return r.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (flushes, deadlines).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// CheckAddr refuses a listen address that is not loopback unless the server has an API key or
// insecure is set.
func CheckAddr(addr string, hasKey, insecure bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("serve: listen address %q: %w", addr, err)
	}
	if hasKey || insecure {
		return nil
	}
	if httpserve.Loopback(host) {
		return nil
	}
	return fmt.Errorf("serve: refusing to listen on %q without an API key: it is not a loopback address (give --api-key or AGENTRL_API_KEY, or --insecure to serve anyone who can connect)", addr)
}

// ShutdownGrace is how long Serve waits for requests in flight when its context ends.
const ShutdownGrace = 10 * time.Second

// Serve answers requests on ln until ctx ends, then shuts down gracefully and closes the engine.
// Request contexts are not ctx's children: a request in flight finishes within ShutdownGrace.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: min(10*time.Second, s.opts.ReadTimeout),
		// ReadTimeout bounds a request until its handler has read the body (readBody then lifts
		// the deadline, so that the connection's background read does not cancel a long
		// generation); a body nobody reads, of a refused request, is bounded by it too.
		ReadTimeout:    s.opts.ReadTimeout,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       log.New(io.Discard, "", 0), // client hang-ups are not the server's news
		// No WriteTimeout: streams write under a deadline per chunk, and a generation is bounded
		// by Options.RequestTimeout.
	}
	if err := httpserve.Run(ctx, hs, ln, ShutdownGrace); err != nil {
		s.Close()
		return fmt.Errorf("serve: %w", err)
	}
	return s.Close()
}

// newID returns a response id with prefix.
func newID(prefix string) string {
	return fmt.Sprintf("%s-%016x", prefix, rand.Uint64())
}

// What closeAfterDraining reads of a refused request's body at most.
const (
	drainBytes = 1 << 20
	drainTime  = 500 * time.Millisecond
)

// closeAfterDraining marks the connection to close after the answer, first reading what the
// client has sent of the body, at most drainBytes within drainTime. Closing a socket whose
// received data is unread makes the kernel reset the connection, which can discard the answer
// before the client reads it (a client still writing its body then sees "connection reset" instead
// of the refusal); a client that trickles its body is held no longer than drainTime.
func closeAfterDraining(w http.ResponseWriter, body io.Reader) {
	w.Header().Set("Connection", "close")
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(drainTime))
	if body != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(body, drainBytes))
	}
	_ = rc.SetReadDeadline(time.Now())
}
