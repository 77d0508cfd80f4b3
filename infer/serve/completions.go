package serve

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/agentrl/agentrl/infer"
)

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	Model     string          `json:"model"`
	Prompt    json.RawMessage `json:"prompt"` // string, [string], [int], [[int]]
	MaxTokens *int            `json:"max_tokens"`
	Logprobs  *int            `json:"logprobs"`
	Echo      bool            `json:"echo"`
	BestOf    *int            `json:"best_of"`
	Suffix    *string         `json:"suffix"`
	User      string          `json:"user"`
	sampleParams
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type completionChoice struct {
	Index          int                 `json:"index"`
	Text           string              `json:"text"`
	Logprobs       *completionLogprobs `json:"logprobs"`
	FinishReason   *string             `json:"finish_reason"`
	TokenIDs       []int32             `json:"token_ids,omitempty"`        // return_token_ids
	PromptTokenIDs []int32             `json:"prompt_token_ids,omitempty"` // return_token_ids
}

type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// completionPlan is a validated completions request: one spec per choice.
type completionPlan struct {
	req     completionRequest
	prompts [][]int32
	texts   []string // each prompt's text, for echo
	n       int
	specs   []genSpec
}

// parseCompletion validates a completions body; the fuzz test drives it directly.
func (s *Server) parseCompletion(data []byte) (*completionPlan, error) {
	var p completionPlan
	if err := decodeBody(data, &p.req, false); err != nil {
		return nil, err
	}
	req := &p.req
	if err := s.checkModel(req.Model); err != nil {
		return nil, err
	}
	var err error
	if p.prompts, err = s.parsePrompts(req.Prompt); err != nil {
		return nil, err
	}
	if p.n, err = req.n(); err != nil {
		return nil, err
	}
	if req.BestOf != nil && *req.BestOf != p.n {
		return nil, unsupported("best_of", "best_of other than n is not supported")
	}
	if req.Suffix != nil && *req.Suffix != "" {
		return nil, unsupported("suffix", "suffix is not supported")
	}
	top := 0
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > maxLogprobs {
			return nil, badRequest("logprobs", "logprobs must be in [0, %d], got %d", maxLogprobs, *req.Logprobs)
		}
		if req.Echo {
			return nil, unsupported("echo", "echo with logprobs (prompt logprobs) is not supported")
		}
		top = *req.Logprobs
	}
	sampling, err := req.sampling()
	if err != nil {
		return nil, err
	}
	if g, err := responseFormat(req.ResponseFormat, "response_format"); err != nil || g != nil {
		if err == nil {
			err = unsupported("response_format", "response_format is for chat completions and responses; completions take text only")
		}
		return nil, err
	}
	strs, ids, err := req.stops(s.stopIDs, s.mcfg.Vocab)
	if err != nil {
		return nil, err
	}
	seed := req.seed()
	for i, prompt := range p.prompts {
		if err := s.checkPrompt(prompt, "prompt"); err != nil {
			return nil, err
		}
		maxTok, err := s.maxTokens(req.MaxTokens, "max_tokens", len(prompt), 16)
		if err != nil {
			return nil, err
		}
		r := infer.Request{Prompt: prompt, MaxTokens: maxTok, Sampling: sampling, Stop: ids}
		if err := s.checkRequest(r, "prompt"); err != nil {
			return nil, err
		}
		for c := range p.n {
			r.Seed = seed + uint64(i*p.n+c)
			p.specs = append(p.specs, genSpec{req: r, stopStrs: strs, top: top})
		}
		if req.Echo {
			p.texts = append(p.texts, s.tok.Decode(prompt))
		}
	}
	return &p, nil
}

func (s *Server) checkModel(name string) error {
	if name != "" && name != s.opts.ModelName {
		return &apiError{status: http.StatusNotFound, typ: typeNotFound, code: "model_not_found", param: "model",
			message: "the model " + strconv.Quote(name) + " does not exist; this server serves " + strconv.Quote(s.opts.ModelName)}
	}
	return nil
}

// parsePrompts reads a prompt: a string, a list of strings, a list of token ids or a list of
// lists of token ids.
func (s *Server) parsePrompts(raw json.RawMessage) ([][]int32, error) {
	if len(raw) == 0 || isNull(raw) {
		return nil, badRequest("prompt", "prompt is required")
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if err := s.checkText(len(one), "prompt"); err != nil {
			return nil, err
		}
		return [][]int32{s.encode(one)}, nil
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil {
		// Every text is bounded before any is tokenized.
		for _, one := range strs {
			if err := s.checkText(len(one), "prompt"); err != nil {
				return nil, err
			}
		}
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil || len(items) == 0 {
		return nil, badRequest("prompt", "prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids, and not empty")
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil {
		p, err := tokenIDs(ids)
		if err != nil {
			return nil, err
		}
		return [][]int32{p}, nil
	}
	if len(items) > maxPrompts {
		return nil, badRequest("prompt", "at most %d prompts per request, got %d", maxPrompts, len(items))
	}
	out := make([][]int32, 0, len(items))
	for _, it := range items {
		if json.Unmarshal(it, &one) == nil {
			if err := s.checkText(len(one), "prompt"); err != nil {
				return nil, err
			}
			out = append(out, s.encode(one))
			continue
		}
		if json.Unmarshal(it, &ids) != nil {
			return nil, badRequest("prompt", "a list of prompts must hold strings or lists of token ids")
		}
		p, err := tokenIDs(ids)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func tokenIDs(ids []int64) ([]int32, error) {
	out := make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || id > 1<<31-1 {
			return nil, badRequest("prompt", "prompt token %d is %d, not a token id", i, id)
		}
		out[i] = int32(id)
	}
	return out, nil
}

func (s *Server) tokenString(id int32, asIDs bool) string {
	if asIDs {
		return "token_id:" + strconv.Itoa(int(id))
	}
	return s.tok.Decode([]int32{id})
}

// completionLogprobsOf renders steps as the completions API's logprobs, offsets from offset.
func (s *Server) completionLogprobsOf(steps []tokStep, top int, asIDs bool, offset int) *completionLogprobs {
	lp := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float32{}, TextOffset: []int{}}
	if top > 0 {
		lp.TopLogprobs = []map[string]float32{}
	}
	for _, st := range steps {
		tok := s.tokenString(st.tok, asIDs)
		lp.Tokens = append(lp.Tokens, tok)
		lp.TokenLogprobs = append(lp.TokenLogprobs, st.lp)
		lp.TextOffset = append(lp.TextOffset, offset)
		offset += len(s.tok.Decode([]int32{st.tok}))
		if top > 0 {
			m := make(map[string]float32, len(st.top)+1)
			for _, c := range st.top {
				m[s.tokenString(c.Token, asIDs)] = c.Logprob
			}
			m[tok] = st.lp // the sampled token is always listed, as vLLM does
			lp.TopLogprobs = append(lp.TopLogprobs, m)
		}
	}
	return lp
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) error {
	p, err := parseBody(s, w, r, s.parseCompletion)
	if err != nil {
		return err
	}
	release, err := s.reserve(len(p.specs))
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
	defer cancel()
	for _, pr := range p.prompts {
		s.met.promptTokens.Add(float64(len(pr)))
	}
	id, created := newID("cmpl"), time.Now().Unix()
	if p.req.Stream {
		s.streamCompletions(ctx, w, p, id, created)
		return nil
	}
	results, err := s.runAll(ctx, p.specs)
	if err != nil {
		return err
	}
	resp := completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.opts.ModelName, Usage: &usage{}}
	for i, res := range results {
		prompt := p.prompts[i/p.n]
		ch := completionChoice{Index: i, Text: res.text, FinishReason: &res.finish}
		if p.req.Echo {
			ch.Text = p.texts[i/p.n] + res.text
		}
		if p.req.Logprobs != nil {
			ch.Logprobs = s.completionLogprobsOf(res.steps, p.specs[i].top, p.req.ReturnTokensAsTokenIDs, 0)
		}
		if p.req.ReturnTokenIDs {
			ch.TokenIDs, ch.PromptTokenIDs = tokensOf(res.steps), prompt
		}
		resp.Choices = append(resp.Choices, ch)
		resp.Usage.CompletionTokens += len(res.steps)
	}
	for _, pr := range p.prompts {
		resp.Usage.PromptTokens += len(pr)
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens + resp.Usage.CompletionTokens
	writeJSON(w, http.StatusOK, resp)
	return nil
}

func tokensOf(steps []tokStep) []int32 {
	out := make([]int32, len(steps))
	for i, st := range steps {
		out[i] = st.tok
	}
	return out
}

func (s *Server) streamCompletions(ctx context.Context, w http.ResponseWriter, p *completionPlan, id string, created int64) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := startSSE(w)
	chunk := func(ch completionChoice) error {
		return out.send(completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.opts.ModelName, Choices: []completionChoice{ch}})
	}
	var mu sync.Mutex
	var firstErr error
	completion := 0
	var wg sync.WaitGroup
	for i, spec := range p.specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			offset := 0
			if p.req.Echo {
				if err := chunk(completionChoice{Index: i, Text: p.texts[i/p.n]}); err != nil {
					cancel()
					return
				}
				offset = len(p.texts[i/p.n])
			}
			res, err := s.run(ctx, spec, func(d delta) error {
				if d.text == "" && p.req.Logprobs == nil && !p.req.ReturnTokenIDs {
					return nil // nothing to show yet (half a character, or text that may be a stop string)
				}
				ch := completionChoice{Index: i, Text: d.text}
				if p.req.Logprobs != nil && len(d.steps) > 0 {
					ch.Logprobs = s.completionLogprobsOf(d.steps, spec.top, p.req.ReturnTokensAsTokenIDs, offset)
				}
				offset += len(d.text)
				if p.req.ReturnTokenIDs {
					ch.TokenIDs = tokensOf(d.steps)
					if first {
						ch.PromptTokenIDs = spec.req.Prompt
					}
				}
				first = false
				return chunk(ch)
			})
			if err == nil {
				err = chunk(completionChoice{Index: i, FinishReason: &res.finish})
			}
			mu.Lock()
			defer mu.Unlock()
			completion += len(res.steps)
			if err != nil && firstErr == nil {
				firstErr = err
				cancel()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		out.fail(firstErr) // a no-op when the client is gone
		out.done()
		return
	}
	if p.req.StreamOpts != nil && p.req.StreamOpts.IncludeUsage {
		u := &usage{CompletionTokens: completion}
		for _, pr := range p.prompts {
			u.PromptTokens += len(pr)
		}
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
		_ = out.send(completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.opts.ModelName, Choices: []completionChoice{}, Usage: u})
	}
	out.done()
}

// parseBody reads a generation request's body under the size bound and read deadline into a
// pooled buffer, and parses it (parse must not keep the bytes).
func parseBody[T any](s *Server, w http.ResponseWriter, r *http.Request, parse func([]byte) (T, error)) (T, error) {
	buf := getBuffer()
	defer putBuffer(buf)
	data, err := readBody(w, r, s.opts.MaxBodyBytes, s.opts.ReadTimeout, buf)
	if err != nil {
		var zero T
		return zero, err
	}
	return parse(data)
}
