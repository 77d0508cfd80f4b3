package remote

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/agentrl/agentrl/learn"
)

// Server serves a learn.Backend on the protocol of docs/learner.md. It takes a fresh random epoch
// when made; calls are served one at a time.
type Server struct {
	// SaveWeights, when set, writes the backend's weights as a checkpoint folder at dir for
	// save_for_sampler and returns the bytes written; without it the route is refused.
	SaveWeights func(dir string, version int32) (int64, error)

	backend learn.Backend
	key     string
	vocab   int
	info    Info
	epoch   uint64
	mu      sync.Mutex
	steps   int64
	pending int64
	buf     []byte
}

// MaxBody bounds a request body.
const MaxBody = 1 << 30

// NewServer serves b. key, when set, is required as a bearer token; vocab bounds token ids;
// info is what /v1/info reports beside the epoch and counts. steps is the backend's optimizer
// update count now.
func NewServer(b learn.Backend, key string, vocab int, steps int64, info Info) (*Server, error) {
	var e [8]byte
	if _, err := rand.Read(e[:]); err != nil {
		return nil, err
	}
	epoch := binary.LittleEndian.Uint64(e[:])>>1 | 1
	return &Server{backend: b, key: key, vocab: vocab, info: info, epoch: epoch, steps: steps}, nil
}

// Epoch is the server's epoch.
func (s *Server) Epoch() uint64 { return s.epoch }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(EpochHeader, strconv.FormatUint(s.epoch, 10))
	if s.key != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(s.key)) != 1 {
			fail(w, http.StatusUnauthorized, "unauthorized", "missing or wrong key: send Authorization: Bearer KEY")
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.URL.Path == "/v1/info" {
		if r.Method != http.MethodGet {
			fail(w, http.StatusMethodNotAllowed, "bad_request", "GET only")
			return
		}
		info := s.info
		info.Epoch, info.Steps, info.PendingTokens = s.epoch, s.steps, s.pending
		writeJSON(w, info)
		return
	}
	if r.Method != http.MethodPost {
		fail(w, http.StatusMethodNotAllowed, "bad_request", "POST only")
		return
	}
	if e := r.Header.Get(EpochHeader); e != strconv.FormatUint(s.epoch, 10) {
		fail(w, http.StatusConflict, "epoch", fmt.Sprintf("request for epoch %q, the learner is at %d", e, s.epoch))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		fail(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if len(body) > MaxBody {
		fail(w, http.StatusRequestEntityTooLarge, "bad_request", "body too large")
		return
	}
	ctx := r.Context()
	switch r.URL.Path {
	case "/v1/forward":
		req, err := decodeRequest(body, s.vocab)
		if err == nil && req.kind != kindForward {
			err = errors.New("body is not a forward request")
		}
		if err != nil {
			fail(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
		o := learn.ForwardOptions{Entropies: req.flags&flagEntropies != 0, Values: req.flags&flagValues != 0, Reference: req.flags&flagReference != 0}
		n := len(req.seqs.Tokens)
		out := learn.Outputs{Logprobs: make([]float32, n)}
		ans := uint32(flagDLogprobs)
		if o.Entropies {
			out.Entropies = make([]float32, n)
			ans |= flagDEntropies
		}
		if o.Values {
			out.Values = make([]float32, n)
			ans |= flagDValues
		}
		if err := s.backend.Forward(ctx, &req.seqs, o, &out); err != nil {
			fail(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
		s.buf = encodeAnswer(s.buf, ans, &out)
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(s.buf)
	case "/v1/forward_backward":
		req, err := decodeRequest(body, s.vocab)
		if err == nil && req.kind != kindForwardBackward {
			err = errors.New("body is not a forward_backward request")
		}
		if err != nil {
			fail(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
		if err := s.backend.ForwardBackward(ctx, &req.seqs, req.coef); err != nil {
			fail(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
		var n int64
		for i := range req.seqs.NumSeqs() {
			for t := req.seqs.Offsets[i] + 1; t < req.seqs.Offsets[i+1]; t++ {
				if req.seqs.Mask[t] {
					n++
				}
			}
		}
		s.pending += n
		writeJSON(w, map[string]int64{"tokens": n, "pending_tokens": s.pending})
	case "/v1/optim_step":
		var req struct {
			Steps    *int64   `json:"steps"`
			LR       *float32 `json:"lr"`
			GradClip float32  `json:"grad_clip"`
			Step     int      `json:"step"`
		}
		if err := strictJSON(body, &req); err != nil || req.Steps == nil || req.LR == nil {
			fail(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("optim_step needs {steps, lr, grad_clip, step}: %v", err))
			return
		}
		if *req.Steps != s.steps {
			fail(w, http.StatusConflict, "steps", fmt.Sprintf("the optimizer has applied %d updates, the request expects %d", s.steps, *req.Steps))
			return
		}
		up, err := s.backend.OptimStep(ctx, learn.OptimStep{LR: *req.LR, GradClip: req.GradClip, Step: req.Step})
		s.pending = 0
		switch {
		case errors.Is(err, learn.ErrNonFinite):
			fail(w, http.StatusUnprocessableEntity, "non_finite", fmt.Sprintf("gradient norm %v; the gradient was cleared", up.GradNorm))
			return
		case errors.Is(err, learn.ErrBrokenWeights):
			s.steps++
			fail(w, http.StatusUnprocessableEntity, "broken_weights", err.Error())
			return
		case err != nil:
			fail(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
		s.steps++
		writeJSON(w, map[string]any{"steps": s.steps, "grad_norm": up.GradNorm, "lr": up.LR})
	case "/v1/save_for_sampler":
		var req struct {
			Version *int32 `json:"version"`
			Dir     string `json:"dir"`
		}
		if err := strictJSON(body, &req); err != nil || req.Version == nil || req.Dir == "" {
			fail(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("save_for_sampler needs {version, dir}: %v", err))
			return
		}
		if s.SaveWeights == nil {
			fail(w, http.StatusNotImplemented, "internal", "this learner writes no weights for samplers")
			return
		}
		n, err := s.SaveWeights(req.Dir, *req.Version)
		if err != nil {
			fail(w, http.StatusInternalServerError, "internal", err.Error())
			return
		}
		writeJSON(w, map[string]any{"dir": req.Dir, "bytes": n})
	case "/v1/save_state", "/v1/load_state":
		var req struct {
			Dir string `json:"dir"`
		}
		if err := strictJSON(body, &req); err != nil || req.Dir == "" {
			fail(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("%s needs {dir}: %v", r.URL.Path, err))
			return
		}
		if r.URL.Path == "/v1/save_state" {
			err = s.backend.SaveState(ctx, req.Dir)
		} else {
			err = s.backend.LoadState(ctx, req.Dir)
			if c, ok := s.backend.(interface{ OptimizerSteps() int64 }); ok && err == nil {
				s.steps, s.pending = c.OptimizerSteps(), 0
			}
		}
		if err != nil {
			fail(w, http.StatusInternalServerError, "internal", err.Error())
			return
		}
		writeJSON(w, map[string]any{"dir": req.Dir, "steps": s.steps})
	default:
		fail(w, http.StatusNotFound, "bad_request", "no route "+r.URL.Path)
	}
}

func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apiError{Error: msg, Code: code})
}
