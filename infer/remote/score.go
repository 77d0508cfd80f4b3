package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/agentrl/agentrl/infer"
)

// scoreDialect is how a dialect asks for the logprobs of given tokens (a teacher's scoring):
//
//   - agentrl: POST /agentrl/v1/score {"tokens": […], "start": s} → {"logprobs": […], "version": v}.
//   - vLLM: POST /v1/completions with the tokens as the prompt, max_tokens 1 and prompt_logprobs 0:
//     choices[0].prompt_logprobs has one entry per prompt token (the first null), each a map from
//     token id (as a string) to {"logprob", "rank", "decoded_token"} holding the prompt's own token.
//   - SGLang: POST /generate with input_ids, max_new_tokens 0, return_logprob and
//     logprob_start_len s: meta_info.input_token_logprobs is [logprob, token_id, text] per input
//     token from position s (a null logprob where a token has no context).
//
// Every answer is checked token by token against the tokens asked about (ids, count, finite
// logprobs): a teacher value is never guessed.
type scoreDialect interface {
	scorePath() string
	encodeScore(s *Server, req infer.ScoreRequest) ([]byte, error)
	decodeScore(body []byte, req infer.ScoreRequest) ([]float32, error)
}

func scoreDialectOf(d Dialect) scoreDialect {
	switch d {
	case VLLM:
		return vllmDialect{}
	case SGLang:
		return sglangDialect{}
	}
	return agentrlDialect{}
}

// Score asks a server for the logprob of every token of req from req.Start on, under the same
// routing, deadline, attempts and health accounting as Generate: a failure before an answer
// arrived goes to another server, a refused request or an answer that breaks the protocol (wrong
// count, other token ids, a non-finite or positive logprob) does not. Router implements
// infer.Scorer.
func (r *Router) Score(ctx context.Context, req infer.ScoreRequest) ([]float32, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	tried := make([]bool, len(r.servers))
	var errs []error
	for range r.opts.Attempts {
		i := r.pick("", tried)
		if i < 0 {
			break
		}
		tried[i] = true
		lps, err := r.scoreCall(ctx, i, req)
		if err == nil {
			return lps, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		errs = append(errs, fmt.Errorf("%s: %w", r.servers[i].Name, err))
		var fatal *requestError
		if errors.Is(err, errProtocol) || errors.Is(err, infer.ErrBadScores) || errors.As(err, &fatal) {
			break
		}
	}
	if len(errs) == 0 {
		return nil, errors.New("remote: no server to send the score request to")
	}
	return nil, fmt.Errorf("remote: scoring failed on %d server(s): %w", len(errs), errors.Join(errs...))
}

// scoreCall sends req to server i under the per-call deadline.
func (r *Router) scoreCall(ctx context.Context, i int, req infer.ScoreRequest) (lps []float32, err error) {
	s := r.servers[i]
	defer func() {
		var refused *requestError
		r.done1(i, err == nil || ctx.Err() != nil || errors.As(err, &refused))
	}()
	lps, _, err = r.scoreOn(ctx, s, &s.Server, req)
	return lps, err
}

// scoreOn sends req to s under the per-call deadline, encoded for srv (s's own Server, or a copy
// that names a LoRA adapter as its model), outside the router's accounting. It returns the
// logprobs, checked against req, and the policy version an agentrl server names in its answer
// (-1 for dialects that name none).
func (r *Router) scoreOn(ctx context.Context, s *server, srv *Server, req infer.ScoreRequest) ([]float32, int32, error) {
	d := scoreDialectOf(s.Dialect)
	body, err := d.encodeScore(srv, req)
	if err != nil {
		return nil, -1, err
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(cctx, http.MethodPost, s.URL+d.scorePath(), bytes.NewReader(body))
	if err != nil {
		return nil, -1, err
	}
	hr.Header["Content-Type"] = jsonType
	if s.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+s.APIKey)
	}
	resp, err := r.client.Do(hr)
	if err != nil {
		return nil, -1, err
	}
	defer resp.Body.Close()
	buf := buffers.Get().(*[]byte)
	defer putBuffer(buf)
	data, err := readAll(resp.Body, resp.ContentLength, r.opts.MaxResponse, buf)
	if err != nil {
		return nil, -1, err
	}
	if resp.StatusCode != http.StatusOK {
		msg := errorMessage(data)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout {
			return nil, -1, &requestError{status: resp.StatusCode, msg: msg}
		}
		return nil, -1, fmt.Errorf("HTTP %d: %s", resp.StatusCode, msg)
	}
	lps, err := d.decodeScore(data, req)
	if err != nil {
		return nil, -1, err
	}
	version := int32(-1)
	if s.Dialect == Agentrl {
		var v struct {
			Version *int32 `json:"version"`
		}
		if json.Unmarshal(data, &v) == nil && v.Version != nil {
			version = *v.Version
		}
	}
	return lps, version, infer.CheckScores(req, lps)
}

func (agentrlDialect) scorePath() string { return "/agentrl/v1/score" }

func (agentrlDialect) encodeScore(_ *Server, req infer.ScoreRequest) ([]byte, error) {
	return json.Marshal(req)
}

// ScoreResponse is the body of agentrl serve's score route.
type ScoreResponse struct {
	Logprobs []float32 `json:"logprobs"`
	Version  int32     `json:"version"`
}

func (agentrlDialect) decodeScore(body []byte, _ infer.ScoreRequest) ([]float32, error) {
	var r struct {
		Logprobs *[]float32 `json:"logprobs"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", errProtocol, err)
	}
	if r.Logprobs == nil {
		return nil, fmt.Errorf("%w: no logprobs", errProtocol)
	}
	return *r.Logprobs, nil
}

func (vllmDialect) scorePath() string { return "/v1/completions" }

type vllmScoreRequest struct {
	Model          string  `json:"model"`
	Prompt         []int32 `json:"prompt"`
	MaxTokens      int     `json:"max_tokens"`
	Temperature    float32 `json:"temperature"`
	PromptLogprobs int     `json:"prompt_logprobs"`
	Stream         bool    `json:"stream"`
}

func (vllmDialect) encodeScore(s *Server, req infer.ScoreRequest) ([]byte, error) {
	// max_tokens 1: vLLM generates at least one token; it is ignored.
	return json.Marshal(vllmScoreRequest{Model: s.Model, Prompt: req.Tokens, MaxTokens: 1, Temperature: 1, PromptLogprobs: 0})
}

func (vllmDialect) decodeScore(body []byte, req infer.ScoreRequest) ([]float32, error) {
	var r struct {
		Choices []struct {
			PromptLogprobs *[]map[string]*struct {
				Logprob *float64 `json:"logprob"`
			} `json:"prompt_logprobs"`
			PromptTokenIDs *[]int32 `json:"prompt_token_ids"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", errProtocol, err)
	}
	if len(r.Choices) != 1 {
		return nil, fmt.Errorf("%w: %d choices, want 1", errProtocol, len(r.Choices))
	}
	ch := r.Choices[0]
	if ch.PromptTokenIDs != nil && !slices.Equal(*ch.PromptTokenIDs, req.Tokens) {
		return nil, fmt.Errorf("%w: prompt_token_ids differ from the tokens scored", errProtocol)
	}
	if ch.PromptLogprobs == nil {
		return nil, fmt.Errorf("%w: no prompt_logprobs (was prompt_logprobs honoured?)", errProtocol)
	}
	pl := *ch.PromptLogprobs
	if len(pl) != len(req.Tokens) {
		return nil, fmt.Errorf("%w: %d prompt_logprobs entries for %d prompt tokens", errProtocol, len(pl), len(req.Tokens))
	}
	out := make([]float32, 0, len(req.Tokens)-req.Start)
	for t := req.Start; t < len(req.Tokens); t++ {
		e := pl[t][strconv.Itoa(int(req.Tokens[t]))]
		if e == nil || e.Logprob == nil {
			return nil, fmt.Errorf("%w: prompt_logprobs[%d] has no entry for token %d", errProtocol, t, req.Tokens[t])
		}
		out = append(out, float32(*e.Logprob))
	}
	return out, nil
}

func (sglangDialect) scorePath() string { return "/generate" }

type sglangScoreRequest struct {
	InputIDs        []int32             `json:"input_ids"`
	SamplingParams  sglangScoreSampling `json:"sampling_params"`
	ReturnLogprob   bool                `json:"return_logprob"`
	LogprobStartLen int                 `json:"logprob_start_len"`
	Stream          bool                `json:"stream"`
}

type sglangScoreSampling struct {
	MaxNewTokens int     `json:"max_new_tokens"`
	Temperature  float32 `json:"temperature"`
}

func (sglangDialect) encodeScore(_ *Server, req infer.ScoreRequest) ([]byte, error) {
	return json.Marshal(sglangScoreRequest{
		InputIDs:       req.Tokens,
		SamplingParams: sglangScoreSampling{MaxNewTokens: 0, Temperature: 1},
		ReturnLogprob:  true, LogprobStartLen: req.Start,
	})
}

func (sglangDialect) decodeScore(body []byte, req infer.ScoreRequest) ([]float32, error) {
	var r struct {
		MetaInfo *struct {
			InputTokenLogprobs *[][]json.RawMessage `json:"input_token_logprobs"`
		} `json:"meta_info"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", errProtocol, err)
	}
	if r.MetaInfo == nil || r.MetaInfo.InputTokenLogprobs == nil {
		return nil, fmt.Errorf("%w: no meta_info.input_token_logprobs (were return_logprob and logprob_start_len honoured?)", errProtocol)
	}
	entries := *r.MetaInfo.InputTokenLogprobs
	n := len(req.Tokens) - req.Start
	// The entries cover positions from logprob_start_len on; a server that starts earlier (a
	// null for position 0) is read from its last n entries, each of which must name its token.
	first := len(req.Tokens) - len(entries)
	if first < 0 || first > req.Start {
		return nil, fmt.Errorf("%w: %d input_token_logprobs entries for %d tokens scored from %d", errProtocol, len(entries), len(req.Tokens), req.Start)
	}
	out := make([]float32, 0, n)
	for i, e := range entries {
		pos := first + i
		if len(e) < 2 {
			return nil, fmt.Errorf("%w: input_token_logprobs[%d] has %d fields, want [logprob, id, text]", errProtocol, i, len(e))
		}
		var id int32
		if err := json.Unmarshal(e[1], &id); err != nil || id != req.Tokens[pos] {
			return nil, fmt.Errorf("%w: input_token_logprobs[%d] names token %s, position %d holds %d", errProtocol, i, e[1], pos, req.Tokens[pos])
		}
		if pos < req.Start {
			continue
		}
		var lp *float64
		if err := json.Unmarshal(e[0], &lp); err != nil || lp == nil {
			return nil, fmt.Errorf("%w: input_token_logprobs[%d] logprob %s", errProtocol, i, e[0])
		}
		out = append(out, float32(*lp))
	}
	return out, nil
}
