package serve

import (
	"context"
	"fmt"
	"net/http"

	"github.com/agentrl/agentrl/infer"
)

// parseScore reads the score route's body, strictly: {"tokens": […], "start": s}.
func (s *Server) parseScore(data []byte) (infer.ScoreRequest, error) {
	var req infer.ScoreRequest
	if err := decodeBody(data, &req, true); err != nil {
		return req, err
	}
	if len(req.Tokens) > s.maxLen {
		return req, badRequest("tokens", "this model's context is %d tokens, got %d", s.maxLen, len(req.Tokens))
	}
	for i, t := range req.Tokens {
		if t < 0 || int(t) >= s.mcfg.Vocab {
			return req, badRequest("tokens", "token %d is %d, outside the vocabulary of %d", i, t, s.mcfg.Vocab)
		}
	}
	if req.Start < 1 || req.Start >= len(req.Tokens) {
		return req, badRequest("start", "start must be in [1, %d) for %d tokens, got %d", len(req.Tokens), len(req.Tokens), req.Start)
	}
	return req, nil
}

// handleScore is POST /agentrl/v1/score: token ids and a start in, the logprob of every token
// from start on under the served weights out (a teacher's scoring of sampled tokens), with the
// version of those weights. It counts as a request in flight, under the request deadline.
func (s *Server) handleScore(w http.ResponseWriter, r *http.Request) error {
	req, err := parseBody(s, w, r, s.parseScore)
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
	s.met.promptTokens.Add(float64(len(req.Tokens)))
	type result struct {
		lps []float32
		v   int32
		err error
	}
	fin := make(chan result, 1)
	go func() {
		lps, v, err := s.scorer.ScoreVersion(ctx, req)
		fin <- result{lps, v, err}
	}()
	var res result
	select {
	case res = <-fin:
	case <-ctx.Done():
		return ctx.Err()
	}
	if res.err != nil {
		return fmt.Errorf("serve: scoring: %w", res.err) // non-finite logprobs: broken weights, a server error
	}
	writeJSON(w, http.StatusOK, scoreResponse{Logprobs: res.lps, Version: res.v})
	return nil
}

type scoreResponse struct {
	Logprobs []float32 `json:"logprobs"`
	Version  int32     `json:"version"`
}
