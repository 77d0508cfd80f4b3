package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/model"
)

// parseGenerate reads the agentrl generate body: an infer.Request, strictly (an unknown field is
// an error: a misspelt sampling setting must not silently sample something else).
func (s *Server) parseGenerate(data []byte) (infer.Request, error) {
	var req infer.Request
	if err := decodeBody(data, &req, true); err != nil {
		return req, err
	}
	return req, s.checkRequest(req, "prompt")
}

// handleGenerate is POST /agentrl/v1/generate: infer.Request in, infer.Completion out, exactly
// what the in-process engine's Generate returns for the same request.
func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request) error {
	data, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	req, err := s.parseGenerate(data)
	if err != nil {
		return err
	}
	release, err := s.reserve(1)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
	defer cancel()
	s.met.promptTokens.Add(float64(len(req.Prompt)))
	s.met.queued.Inc()
	start := time.Now()
	var started atomic.Bool
	type result struct {
		c   infer.Completion
		err error
	}
	fin := make(chan result, 1)
	go func() {
		c, err := s.eng.GenerateStream(ctx, req, func(local.Step) {
			if !started.Load() {
				started.Store(true)
				s.met.queued.Dec()
				s.met.running.Inc()
				s.met.ttft.Observe(time.Since(start).Seconds())
			}
		})
		if started.Load() {
			s.met.running.Dec()
		} else {
			s.met.queued.Dec()
		}
		fin <- result{c, err}
	}()
	var c infer.Completion
	select {
	case r := <-fin:
		c, err = r.c, r.err
	case <-ctx.Done(): // see run: a request still queued is dropped by the engine unrun
		err = ctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("serve: generation: %w", err)
	}
	s.met.completionTokens.Add(float64(len(c.Tokens)))
	writeJSON(w, http.StatusOK, c)
	return nil
}

// weightsRequest is the JSON form of POST /agentrl/v1/weights: load a checkpoint folder on the
// server's disk as version.
type weightsRequest struct {
	Path    string `json:"path"`
	Version *int32 `json:"version"`
}

// handleWeights is POST /agentrl/v1/weights. A JSON body {"path", "version"} loads a checkpoint
// folder on the server's disk; any other body is a model.safetensors for the version given in
// the query (?version=N). The new weights are used from the next decode step on: requests in
// flight continue and their tokens from then on carry the new version. A version not above the
// latest accepted is refused with 409. It answers once the engine uses the new weights.
func (s *Server) handleWeights(w http.ResponseWriter, r *http.Request) error {
	ct := strings.ToLower(r.Header.Get("Content-Type"))
	var version int32
	var load func() (*model.Model, error)
	if strings.HasPrefix(ct, "application/json") {
		var req weightsRequest
		if err := decodeJSON(w, r, 1<<20, bodyReadTimeout, &req, true); err != nil {
			return err
		}
		if req.Path == "" || req.Version == nil {
			return badRequest("", "a JSON weight update needs path (a checkpoint folder on the server) and version")
		}
		version = *req.Version
		load = func() (*model.Model, error) { return checkpoint.LoadModel(req.Path) }
	} else {
		v, err := strconv.ParseInt(r.URL.Query().Get("version"), 10, 32)
		if err != nil {
			return badRequest("version", "a pushed model.safetensors needs ?version=N (a 32-bit integer)")
		}
		version = int32(v)
		load = func() (*model.Model, error) { return s.loadPushed(w, r) }
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.checkVersion(version); err != nil {
		return err
	}
	m, err := load()
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return err
		}
		s.met.weightUpdates.WithLabelValues("failed").Inc()
		return badRequest("", "loading the weights: %v", err)
	}
	if m.Cfg != s.mcfg {
		s.met.weightUpdates.WithLabelValues("failed").Inc()
		return badRequest("", "the weights are of a different model: %+v, serving %+v", m.Cfg, s.mcfg)
	}
	previous := s.eng.Version()
	applied, err := s.eng.LoadWeights(m, version)
	if err != nil {
		return err
	}
	s.latest = version
	select {
	case <-applied:
	case <-r.Context().Done():
		return r.Context().Err()
	}
	s.met.weightUpdates.WithLabelValues("ok").Inc()
	writeJSON(w, http.StatusOK, map[string]int32{"version": version, "previous": previous})
	return nil
}

func (s *Server) checkVersion(v int32) error {
	if v <= s.latest {
		s.met.weightUpdates.WithLabelValues("stale").Inc()
		return &apiError{status: http.StatusConflict, typ: typeConflict, code: "stale_version",
			message: fmt.Sprintf("version %d is not newer than the latest version %d: versions only go up", v, s.latest)}
	}
	return nil
}

// loadPushed reads a pushed model.safetensors into a temporary folder beside the checkpoint's
// config.json and loads it with checkpoint's checks.
func (s *Server) loadPushed(w http.ResponseWriter, r *http.Request) (*model.Model, error) {
	dir, err := os.MkdirTemp("", "agentrl-serve-weights-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), s.configJSON, 0o600); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return nil, err
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(weightsReadTimeout))
	_, err = io.Copy(f, http.MaxBytesReader(w, r.Body, s.opts.MaxWeightBytes))
	_ = rc.SetReadDeadline(time.Time{})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, bodyError(err, s.opts.MaxWeightBytes)
	}
	return checkpoint.LoadModel(dir)
}

// weightsReadTimeout bounds reading a pushed model.safetensors.
const weightsReadTimeout = 10 * time.Minute

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": s.eng.Version()})
	return nil
}

func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]int32{"version": s.eng.Version()})
	return nil
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": s.opts.ModelName, "object": "model", "created": s.created, "owned_by": "agentrl",
			"max_model_len": s.maxLen, "version": s.eng.Version(),
		}},
	})
	return nil
}

// handleTokenize is POST /agentrl/v1/tokenize {"text"} → {"tokens"}: the checkpoint's tokenizer.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Text string `json:"text"`
	}
	if err := decodeJSON(w, r, s.opts.MaxBodyBytes, bodyReadTimeout, &req, true); err != nil {
		return err
	}
	toks := s.tok.Encode(req.Text)
	if toks == nil {
		toks = []int32{}
	}
	writeJSON(w, http.StatusOK, map[string][]int32{"tokens": toks})
	return nil
}

// handleDetokenize is POST /agentrl/v1/detokenize {"tokens"} → {"text"}.
func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Tokens []int32 `json:"tokens"`
	}
	if err := decodeJSON(w, r, s.opts.MaxBodyBytes, bodyReadTimeout, &req, true); err != nil {
		return err
	}
	text, err := s.tok.DecodeStrict(req.Tokens)
	if err != nil {
		return badRequest("tokens", "%v", err)
	}
	writeJSON(w, http.StatusOK, map[string]string{"text": text})
	return nil
}
