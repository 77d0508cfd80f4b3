package tinker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/learn"
)

// Sampler is an infer.Generator over a Tinker service's sampler: every Generate is one asample
// of the weights last saved for sampling (Use), under the client's deadline, and its answer is
// checked against the request before it is returned: one sequence, as many logprobs as tokens,
// finite logprobs, tokens inside the vocabulary, no more than max_tokens, a "stop" that ended on
// a stop token. Each completion's tokens carry the version of the weights that sampled them.
// It is safe for concurrent use.
type Sampler struct {
	c     *Client
	vocab int // token ids must be below it (0: unchecked)

	mu      sync.RWMutex
	path    string
	version int32

	calls, protocolErrors, failures atomic.Int64
	first                           atomic.Pointer[error]
}

var _ infer.Generator = (*Sampler)(nil)

// NewSampler samples through c; vocab bounds the token ids an answer may hold (0: unchecked).
func NewSampler(c *Client, vocab int) *Sampler { return &Sampler{c: c, vocab: vocab} }

// Use makes art (a SaveForSampler artifact) the weights that Generate samples from.
func (s *Sampler) Use(art learn.Artifact) error {
	if art.URI == "" {
		return fmt.Errorf("learn/tinker: version %d has no tinker:// path to sample from", art.Version)
	}
	s.mu.Lock()
	s.path, s.version = art.URI, art.Version
	s.mu.Unlock()
	return nil
}

// Path is the tinker:// path sampled from and its version ("" before Use).
func (s *Sampler) Path() (string, int32) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.path, s.version
}

// Calls is how many samples were asked; ProtocolErrors how many answers were refused for
// breaking the protocol (malformed, wrong lengths, non-finite logprobs).
func (s *Sampler) Calls() int64          { return s.calls.Load() }
func (s *Sampler) ProtocolErrors() int64 { return s.protocolErrors.Load() }

// Failed is how many samples failed — the service did not answer in time, answered an error,
// or broke the protocol — not counting those whose caller gave up first, and the first failure.
func (s *Sampler) Failed() (int64, error) {
	if p := s.first.Load(); p != nil {
		return s.failures.Load(), *p
	}
	return 0, nil
}

func (s *Sampler) fail(err error) error {
	s.failures.Add(1)
	s.first.CompareAndSwap(nil, &err)
	return err
}

// ErrProtocol is wrapped by the error of an answer that breaks the sampling protocol.
var ErrProtocol = errors.New("learn/tinker: the sampler's answer breaks the protocol")

// Generate implements infer.Generator.
func (s *Sampler) Generate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	path, version := s.Path()
	if path == "" {
		return infer.Completion{}, errors.New("learn/tinker: no weights saved for sampling yet")
	}
	if err := req.Sampling.Validate(); err != nil {
		return infer.Completion{}, err
	}
	if req.MaxTokens < 1 || len(req.Prompt) == 0 {
		return infer.Completion{}, fmt.Errorf("learn/tinker: a sample needs a prompt and max_tokens ≥ 1 (got %d prompt tokens, max_tokens %d)", len(req.Prompt), req.MaxTokens)
	}
	s.calls.Add(1)
	params := map[string]any{"max_tokens": req.MaxTokens, "temperature": req.Sampling.Temperature,
		"seed": int64(req.Seed & math.MaxInt64), "top_k": -1, "top_p": 1}
	if req.Sampling.TopK > 0 {
		params["top_k"] = req.Sampling.TopK
	}
	if p := req.Sampling.TopP; p > 0 && p < 1 {
		params["top_p"] = p
	}
	if len(req.Stop) > 0 {
		params["stop"] = req.Stop
	}
	body := map[string]any{"num_samples": 1, "model_path": path, "type": "sample",
		"prompt":          map[string]any{"chunks": []chunk{{Type: "encoded_text", Tokens: req.Prompt}}},
		"sampling_params": params}
	var raw json.RawMessage
	if err := s.c.call(ctx, "sample", "/api/v1/asample", body, &raw); err != nil {
		if ctx.Err() != nil { // the caller gave up (an episode's deadline): not the service's failure
			return infer.Completion{}, err
		}
		return infer.Completion{}, s.fail(err)
	}
	comp, err := decodeSample(raw, req, s.vocab)
	if err != nil {
		s.protocolErrors.Add(1)
		return infer.Completion{}, s.fail(fmt.Errorf("sampling %s: %w", path, err))
	}
	comp.Versions = make([]int32, len(comp.Tokens))
	for i := range comp.Versions {
		comp.Versions[i] = version
	}
	return comp, nil
}

// decodeSample reads an asample future's result (SampleOutput) as the completion of req, or says
// how it breaks the protocol (an error wrapping ErrProtocol).
func decodeSample(raw []byte, req infer.Request, vocab int) (infer.Completion, error) {
	bad := func(format string, a ...any) (infer.Completion, error) {
		return infer.Completion{}, fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, a...)...)
	}
	var res struct {
		Sequences []struct {
			StopReason string    `json:"stop_reason"`
			Tokens     []int64   `json:"tokens"`
			Logprobs   []float64 `json:"logprobs"`
		} `json:"sequences"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return bad("not a SampleOutput: %v", err)
	}
	if len(res.Sequences) != 1 {
		return bad("%d sequences for num_samples 1", len(res.Sequences))
	}
	q := res.Sequences[0]
	n := len(q.Tokens)
	switch {
	case q.Logprobs == nil:
		return bad("no logprobs (the agent loop trains on the sampler's per-token logprobs)")
	case len(q.Logprobs) != n:
		return bad("%d tokens with %d logprobs", n, len(q.Logprobs))
	case n == 0:
		return bad("no tokens")
	case n > req.MaxTokens:
		return bad("%d tokens for max_tokens %d", n, req.MaxTokens)
	}
	c := infer.Completion{Tokens: make([]int32, n), Logprobs: make([]float32, n)}
	for i, t := range q.Tokens {
		if t < 0 || t > math.MaxInt32 || (vocab > 0 && t >= int64(vocab)) {
			return bad("token %d is id %d, outside the vocabulary of %d", i, t, vocab)
		}
		c.Tokens[i] = int32(t)
		lp := q.Logprobs[i]
		if !(lp <= 1e-4) || math.IsInf(lp, -1) {
			return bad("logprob %d is %v", i, lp)
		}
		c.Logprobs[i] = float32(min(lp, 0))
	}
	switch q.StopReason {
	case "stop":
		if !slices.Contains(req.Stop, c.Tokens[n-1]) {
			return bad("stop_reason stop, but the last token %d is none of the stop tokens %v", c.Tokens[n-1], req.Stop)
		}
		c.Finish = infer.FinishStop
	case "length":
		c.Finish = infer.FinishLength
	default:
		return bad("stop_reason %q (want stop or length)", q.StopReason)
	}
	return c, nil
}
