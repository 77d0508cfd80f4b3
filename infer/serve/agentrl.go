package serve

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/infer/wire"
	"github.com/agentrl/agentrl/model"
)

// parseGenerate reads the agentrl generate body: an infer.Request, strictly (an unknown field is
// an error: a misspelt sampling setting must not silently sample something else). The usual
// shape is read by wire.ReadRequest; the rest, and every error, by encoding/json.
func (s *Server) parseGenerate(data []byte) (infer.Request, error) {
	req, ok := wire.ReadRequest(data)
	if !ok {
		req = infer.Request{}
		if err := decodeBody(data, &req, true); err != nil {
			return req, err
		}
	}
	return req, s.checkRequest(req, "prompt")
}

// handleGenerate is POST /agentrl/v1/generate: infer.Request in, infer.Completion out, exactly
// what the in-process engine's Generate returns for the same request.
func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request) error {
	req, err := parseBody(s, w, r, s.parseGenerate)
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
	eng := s.acquire()
	go func() {
		defer eng.leave()
		c, err := eng.GenerateStream(ctx, req, func(local.Step) {
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
	buf := getBuffer()
	defer putBuffer(buf)
	if acceptsBinary(r.Header) {
		b, err := wire.AppendBinaryCompletion(*buf, c)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		*buf = b
		writeTyped(w, http.StatusOK, binaryType, *buf)
		return nil
	}
	b, err := wire.AppendCompletion(*buf, c)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	*buf = append(b, '\n') // as json.Encoder ends a value
	writeBytes(w, http.StatusOK, *buf)
	return nil
}

// weightsRequest is the JSON form of POST /agentrl/v1/weights: load a checkpoint folder on the
// server's disk as version (of epoch).
type weightsRequest struct {
	Path    string `json:"path"`
	Version *int32 `json:"version"`
	Epoch   *int64 `json:"epoch"`
}

// weightsUpdate is a weight update as parsed: the version, the epoch it names (nil: the
// server's), and for the JSON form the checkpoint folder to load.
type weightsUpdate struct {
	version int32
	epoch   *int64
	path    string
}

// parseWeightsJSON reads the JSON form's body; the fuzz tests call it directly.
func parseWeightsJSON(data []byte) (weightsUpdate, error) {
	var req weightsRequest
	if err := decodeBody(data, &req, true); err != nil {
		return weightsUpdate{}, err
	}
	if req.Path == "" || req.Version == nil {
		return weightsUpdate{}, badRequest("", "a JSON weight update needs path (a checkpoint folder on the server) and version")
	}
	return checkUpdate(weightsUpdate{version: *req.Version, epoch: req.Epoch, path: req.Path})
}

// parseWeightsQuery reads the query of a pushed model.safetensors (version=N, epoch=E); the fuzz
// tests call it directly.
func parseWeightsQuery(raw string) (weightsUpdate, error) {
	q, _ := url.ParseQuery(raw) // as Request.URL.Query: what parses is used
	v, err := strconv.ParseInt(q.Get("version"), 10, 32)
	if err != nil {
		return weightsUpdate{}, badRequest("version", "a pushed model.safetensors needs ?version=N (a 32-bit integer); a JSON update is {\"path\", \"version\"}")
	}
	u := weightsUpdate{version: int32(v)}
	if q.Has("epoch") {
		e, err := strconv.ParseInt(q.Get("epoch"), 10, 64)
		if err != nil {
			return weightsUpdate{}, badRequest("epoch", "epoch must be a 64-bit integer, got %q", q.Get("epoch"))
		}
		u.epoch = &e
	}
	return checkUpdate(u)
}

func checkUpdate(u weightsUpdate) (weightsUpdate, error) {
	if u.version < 0 {
		return weightsUpdate{}, badRequest("version", "version must not be negative, got %d", u.version)
	}
	if u.epoch != nil && *u.epoch < 0 {
		return weightsUpdate{}, badRequest("epoch", "epoch must not be negative, got %d", *u.epoch)
	}
	return u, nil
}

// handleWeights is POST /agentrl/v1/weights. A JSON body {"path", "version", "epoch"} loads a
// checkpoint folder on the server's disk; any other body is a model.safetensors for the version
// (and epoch) given in the query (?version=N&epoch=E). It answers once the new weights are in use.
//
// Versions are ordered within an epoch. The epoch names the trainer process that publishes
// (agentrl train uses the time its RL phase started, in milliseconds since 1970), so that a
// resumed trainer, which restarts from its last checkpoint behind the versions its killed
// process had already published, can bring the servers back to its own weights:
//   - an update of the server's epoch (or naming none) must have a version above the latest
//     accepted; otherwise it is refused with 409 (versions only go up);
//   - an update of an older epoch is refused with 409 (a trainer started after it owns the server);
//   - an update of a newer epoch is taken whatever its version: the server serves version N of
//     epoch E from then on, and its versions go up from there.
//
// A version above the engine's is loaded between two decode steps: requests in flight continue
// and their tokens from then on carry the new version. A version not above it (a rewind) goes to
// a fresh engine, since the engine reuses keys and values cached under an equal version number;
// requests in flight finish on the engine they started on, with its weights and versions, and
// that engine is closed after them. Either way, (epoch, version) names one set of weights.
func (s *Server) handleWeights(w http.ResponseWriter, r *http.Request) error {
	var u weightsUpdate
	var err error
	var load func() (*model.Model, error)
	if isJSONWeights(r) {
		buf := getBuffer()
		defer putBuffer(buf)
		data, err := readBody(w, r, 1<<20, s.opts.ReadTimeout, buf)
		if err != nil {
			return err
		}
		if u, err = parseWeightsJSON(data); err != nil {
			return err
		}
		load = func() (*model.Model, error) { return checkpoint.LoadWeights(u.path) } // with its adapter, if any
	} else {
		if u, err = parseWeightsQuery(r.URL.RawQuery); err != nil {
			return err
		}
		load = func() (*model.Model, error) { return s.loadPushed(w, r) }
	}
	version, epoch := u.version, u.epoch
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return local.ErrClosed
	}
	e := s.epoch.Load()
	if epoch != nil {
		e = *epoch
	}
	if err := s.checkVersion(e, version); err != nil {
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
	cur := s.eng.Load()
	previous, previousEpoch := cur.Version(), s.epoch.Load()
	result := "ok"
	if version > s.latest {
		applied, err := cur.LoadWeights(m, version)
		if err != nil {
			return err
		}
		s.latest = version
		s.epoch.Store(e)
		_ = s.scorer.Set(m, version) // the served config (checked above); the engines copy m
		select {
		case <-applied:
		case <-r.Context().Done():
			return r.Context().Err()
		}
	} else {
		fresh, err := local.NewEngine(m, version, s.engCfg)
		if err != nil {
			s.met.weightUpdates.WithLabelValues("failed").Inc()
			return fmt.Errorf("serve: %w", err)
		}
		s.latest = version
		s.epoch.Store(e)
		_ = s.scorer.Set(m, version) // the served config (checked above); the engines copy m
		s.eng.Store(&engine{Engine: fresh})
		s.retired = slices.DeleteFunc(s.retired, (*engine).done)
		s.retired = append(s.retired, cur)
		cur.retire()
		result = "rewind"
	}
	s.met.weightUpdates.WithLabelValues(result).Inc()
	writeJSON(w, http.StatusOK, map[string]int64{"version": int64(version), "epoch": e, "previous": int64(previous), "previous_epoch": previousEpoch})
	return nil
}

// isJSONWeights reports whether a weight update is the JSON form: its Content-Type says so, or it
// names no ?version and its body starts with '{' (curl -d sends a form type; a safetensors file
// starts with its header's length).
func isJSONWeights(r *http.Request) bool {
	if strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "application/json") {
		return true
	}
	if r.URL.Query().Has("version") || r.Body == nil {
		return false
	}
	br := bufio.NewReaderSize(r.Body, 512)
	r.Body = struct {
		io.Reader
		io.Closer
	}{br, r.Body}
	for {
		c, err := br.ReadByte() // under the server's read deadline
		if err != nil {
			return false
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		_ = br.UnreadByte()
		return c == '{'
	}
}

// checkVersion refuses an update of an older epoch, or of the server's epoch at a version not
// above the latest accepted.
func (s *Server) checkVersion(epoch int64, v int32) error {
	cur := s.epoch.Load()
	switch {
	case epoch < cur:
		s.met.weightUpdates.WithLabelValues("stale").Inc()
		return &apiError{status: http.StatusConflict, typ: typeConflict, code: "stale_epoch",
			message: fmt.Sprintf("epoch %d is older than the server's epoch %d: a trainer started after this one publishes to this server", epoch, cur)}
	case epoch == cur && v <= s.latest:
		s.met.weightUpdates.WithLabelValues("stale").Inc()
		return &apiError{status: http.StatusConflict, typ: typeConflict, code: "stale_version",
			message: fmt.Sprintf("version %d is not newer than the latest version %d of epoch %d: versions only go up within an epoch", v, s.latest, cur)}
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
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": s.Version(), "epoch": s.Epoch()})
	return nil
}

// handleVersion is GET /agentrl/v1/version: {"version", "epoch"} of the weights in use.
func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]int64{"version": int64(s.Version()), "epoch": s.Epoch()})
	return nil
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": s.opts.ModelName, "object": "model", "created": s.created, "owned_by": "agentrl",
			"max_model_len": s.maxLen, "version": s.Version(), "epoch": s.Epoch(),
		}},
	})
	return nil
}

// handleTokenize is POST /agentrl/v1/tokenize {"text"} → {"tokens"}: the checkpoint's tokenizer.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) error {
	text, err := parseBody(s, w, r, parseTokenize)
	if err != nil {
		return err
	}
	if len(text) > s.textBound() {
		return badRequest("text", "the text has %d bytes; this server tokenizes at most %d (its context of %d tokens, %d bytes per token at most)", len(text), s.textBound(), s.maxLen, s.maxPiece)
	}
	toks := s.encode(text)
	if toks == nil {
		toks = []int32{}
	}
	writeJSON(w, http.StatusOK, map[string][]int32{"tokens": toks})
	return nil
}

// handleDetokenize is POST /agentrl/v1/detokenize {"tokens"} → {"text"}.
func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) error {
	text, err := parseBody(s, w, r, s.parseDetokenize)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"text": text})
	return nil
}

// parseTokenize reads the tokenize body {"text"}; the fuzz tests call it directly.
func parseTokenize(data []byte) (string, error) {
	var req struct {
		Text string `json:"text"`
	}
	err := decodeBody(data, &req, true)
	return req.Text, err
}

// parseDetokenize reads the detokenize body {"tokens"} and decodes the ids; the fuzz tests call
// it directly.
func (s *Server) parseDetokenize(data []byte) (string, error) {
	var req struct {
		Tokens []int32 `json:"tokens"`
	}
	if err := decodeBody(data, &req, true); err != nil {
		return "", err
	}
	text, err := s.tok.DecodeStrict(req.Tokens)
	if err != nil {
		return "", badRequest("tokens", "%v", err)
	}
	return text, nil
}
