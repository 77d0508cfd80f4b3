package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
)

// genSpec is one generation of an OpenAI route.
type genSpec struct {
	req      infer.Request
	stopStrs []string // text that ends the completion (not included in its text)
	hold     []string // text from which streaming holds back the rest (the tool-call tag)
	top      int      // how many top logprobs per token (0: none)
	grammar  *frame   // nil, or the grammar the completion is held to (constrained decoding)
}

// tokStep is one sampled token.
type tokStep struct {
	tok     int32
	lp      float32
	version int32
	top     []local.TokenLogprob
}

// genResult is a finished generation.
type genResult struct {
	steps  []tokStep // every token sampled, up to the one that completed a stop string
	text   string    // the completion's text: without a final stop token, cut before a stop string
	finish string    // "stop" or "length"
}

// delta is what a streaming generation has newly produced: tokens and the text that can be
// shown (held back while it may still become a stop string or a tool call).
type delta struct {
	steps []tokStep
	text  string
}

var errOverloaded = &apiError{status: http.StatusTooManyRequests, typ: typeOverload, code: "overloaded",
	message: "the server has too many generations in flight; retry later"}

// reserve takes n generations of the in-flight budget, or refuses.
func (s *Server) reserve(n int) (release func(), err error) {
	if s.pending.Add(int64(n)) > int64(s.opts.MaxPending) {
		s.pending.Add(-int64(n))
		return nil, errOverloaded
	}
	return func() { s.pending.Add(-int64(n)) }, nil
}

// checkPrompt refuses an empty prompt or one that leaves no room for a completion: checked
// before max_tokens, which is bounded by the room left.
func (s *Server) checkPrompt(prompt []int32, param string) error {
	if len(prompt) == 0 {
		return badRequest(param, "the prompt is empty")
	}
	if len(prompt) >= s.maxLen {
		return badRequest(param, "the prompt has %d tokens; this model's context is %d tokens, leaving no room for a completion", len(prompt), s.maxLen)
	}
	return nil
}

// checkRequest reports what the engine would refuse, as a 400 naming the parameter.
func (s *Server) checkRequest(req infer.Request, promptParam string) error {
	if err := s.checkPrompt(req.Prompt, promptParam); err != nil {
		return err
	}
	for i, t := range req.Prompt {
		if t < 0 || int(t) >= s.mcfg.Vocab {
			return badRequest(promptParam, "prompt token %d is %d, outside the vocabulary of %d", i, t, s.mcfg.Vocab)
		}
	}
	for _, t := range req.Stop {
		if t < 0 || int(t) >= s.mcfg.Vocab {
			return badRequest("stop_token_ids", "stop token %d is outside the vocabulary of %d", t, s.mcfg.Vocab)
		}
	}
	if req.MaxTokens < 1 {
		return badRequest("max_tokens", "max_tokens must be at least 1, got %d", req.MaxTokens)
	}
	if room := s.maxLen - len(req.Prompt); req.MaxTokens > room {
		return badRequest("max_tokens", "this model's context is %d tokens; the prompt has %d, so max_tokens may be at most %d, got %d", s.maxLen, len(req.Prompt), room, req.MaxTokens)
	}
	if err := req.Sampling.Validate(); err != nil {
		return badRequest("", "%s", strings.TrimPrefix(err.Error(), "infer: "))
	}
	if t := req.Sampling.Temperature; t > maxTemperature {
		return badRequest("temperature", "temperature must be a number in [0, %d], got %v", maxTemperature, t)
	}
	return nil
}

// run generates spec, calling onDelta (when not nil) from this goroutine as tokens arrive. It
// returns ctx's error when ctx ends first (the engine frees the slot at its next decode step).
func (s *Server) run(ctx context.Context, spec genSpec, onDelta func(delta) error) (genResult, error) {
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	budget := min(spec.req.MaxTokens, s.maxLen-len(spec.req.Prompt))
	steps := make(chan tokStep, budget+1)
	type done struct {
		c   infer.Completion
		err error
	}
	fin := make(chan done, 1)
	sampling := spec.req.Sampling
	top := spec.top
	s.met.queued.Inc()
	started := false
	begin := time.Now()
	eng := s.acquire()
	go func() {
		defer eng.leave()
		var con local.Constraint
		if spec.grammar != nil {
			con = newConstraint(s.vocab(), spec.grammar, spec.req.Stop)
		}
		c, err := eng.GenerateConstrained(jctx, spec.req, con, func(st local.Step) {
			ts := tokStep{tok: st.Token, lp: st.Logprob, version: st.Version}
			if top > 0 {
				ts.top = local.TopLogprobs(st.Logits, sampling, top)
			}
			select {
			case steps <- ts:
			default: // cannot happen: the channel holds every token the budget allows
			}
		})
		fin <- done{c, err}
	}()
	defer func() {
		if started {
			s.met.running.Dec()
		} else {
			s.met.queued.Dec()
		}
	}()

	t := newTextState(s, spec)
	var res genResult
	stopped := false // a stop string ended it: the engine's remaining output is ignored
	take := func(ts tokStep) error {
		if !started {
			started = true
			s.met.queued.Dec()
			s.met.running.Inc()
			s.met.ttft.Observe(time.Since(begin).Seconds())
		}
		if stopped {
			return nil
		}
		res.steps = append(res.steps, ts)
		s.met.completionTokens.Inc()
		d, hit := t.add(ts.tok)
		if hit {
			stopped = true
			res.finish = "stop"
			cancel()
		}
		if onDelta != nil {
			d.steps = []tokStep{ts}
			return onDelta(d)
		}
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			// A request still waiting for a slot stays in the engine's queue until one frees, and
			// is dropped there unrun; the handler need not wait for that.
			return genResult{}, ctx.Err()
		case ts := <-steps:
			if err := take(ts); err != nil {
				return genResult{}, err
			}
			continue
		case r := <-fin:
			for len(steps) > 0 {
				if err := take(<-steps); err != nil {
					return genResult{}, err
				}
			}
			switch {
			case stopped:
			case r.err != nil && ctx.Err() != nil:
				return genResult{}, ctx.Err()
			case r.err != nil:
				return genResult{}, fmt.Errorf("serve: generation: %w", r.err)
			default:
				res.finish = string(r.c.Finish)
				if len(r.c.Tokens) != len(res.steps) {
					return genResult{}, fmt.Errorf("serve: the engine reported %d tokens but completed %d", len(res.steps), len(r.c.Tokens))
				}
			}
			res.text = t.final()
			if onDelta != nil {
				if rest := t.flush(); rest != "" {
					if err := onDelta(delta{text: rest}); err != nil {
						return genResult{}, err
					}
				}
			}
			return res, nil
		}
	}
}

// textState follows a completion's text as tokens arrive: it finds stop strings and says how
// much of the text can be shown while streaming.
type textState struct {
	s       *Server
	stopIDs []int32
	stops   []string
	hold    []string
	maxPat  int
	buf     []byte // text so far (without a final stop token)
	shown   int    // bytes of buf already handed out
	held    int    // -1, or where a hold pattern starts: nothing from there is shown until the end
	cut     int    // -1, or where a stop string starts
}

func newTextState(s *Server, spec genSpec) *textState {
	t := &textState{s: s, stopIDs: spec.req.Stop, stops: spec.stopStrs, hold: spec.hold, held: -1, cut: -1}
	for _, p := range append(slices.Clone(spec.stopStrs), spec.hold...) {
		t.maxPat = max(t.maxPat, len(p))
	}
	return t
}

// add appends tok's text and returns what can now be shown, and whether a stop string was found.
func (t *textState) add(tok int32) (delta, bool) {
	if slices.Contains(t.stopIDs, tok) {
		return delta{}, false // the last token: its text is not part of the completion
	}
	from := max(0, len(t.buf)-t.maxPat+1)
	t.buf = append(t.buf, t.s.tok.Decode([]int32{tok})...)
	for _, st := range t.stops {
		if i := strings.Index(string(t.buf[from:]), st); i >= 0 && (t.cut < 0 || from+i < t.cut) {
			t.cut = from + i
		}
	}
	if t.cut >= 0 {
		t.buf = t.buf[:t.cut]
		end := len(t.buf)
		if t.held >= 0 {
			end = min(end, t.held)
		}
		return delta{text: t.show(end)}, true
	}
	if t.held < 0 {
		for _, h := range t.hold {
			if i := strings.Index(string(t.buf[from:]), h); i >= 0 && (t.held < 0 || from+i < t.held) {
				t.held = from + i
			}
		}
	}
	end := len(t.buf)
	if t.held >= 0 {
		end = t.held
	} else {
		// Hold back a tail that may still grow into a stop string or a hold pattern.
		keep := 0
		for _, p := range append(slices.Clone(t.stops), t.hold...) {
			for k := min(len(p)-1, end-t.shown); k > keep; k-- {
				if strings.HasSuffix(string(t.buf), p[:k]) {
					keep = k
					break
				}
			}
		}
		end -= keep
	}
	// Never show half a character: hold back a last rune whose bytes have not all come.
	if i := end - 1; i >= t.shown {
		for i > t.shown && !utf8.RuneStart(t.buf[i]) && end-i < utf8.UTFMax {
			i--
		}
		if utf8.RuneStart(t.buf[i]) && !utf8.FullRune(t.buf[i:end]) {
			end = i
		}
	}
	return delta{text: t.show(end)}, false
}

// show hands out buf[shown:end].
func (t *textState) show(end int) string {
	if end <= t.shown {
		return ""
	}
	out := string(t.buf[t.shown:end])
	t.shown = end
	return out
}

// final is the whole completion text.
func (t *textState) final() string { return string(t.buf) }

// flush hands out what was held back, for streams that end with no hold pattern in the text; a
// stream with one (a tool call) ends with what the caller makes of final.
func (t *textState) flush() string {
	if t.held >= 0 {
		return ""
	}
	return t.show(len(t.buf))
}

// runAll runs specs concurrently and returns their results in order; the first error wins.
func (s *Server) runAll(ctx context.Context, specs []genSpec) ([]genResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make([]genResult, len(specs))
	errs := make(chan error, len(specs))
	for i := range specs {
		go func() {
			r, err := s.run(ctx, specs[i], nil)
			out[i] = r
			if err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	var first error
	for range specs {
		if err := <-errs; err != nil && (first == nil || errors.Is(first, context.Canceled)) {
			first = err
		}
	}
	return out, first
}
