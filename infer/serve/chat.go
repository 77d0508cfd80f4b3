package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/tool"
)

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Tools               []chatTool      `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Logprobs            bool            `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	User                string          `json:"user"`
	sampleParams
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCalls  []chatToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type chatToolCall struct {
	Index    *int   `json:"index,omitempty"` // streaming only
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
}

type chatResponse struct {
	ID             string       `json:"id"`
	Object         string       `json:"object"`
	Created        int64        `json:"created"`
	Model          string       `json:"model"`
	Choices        []chatChoice `json:"choices"`
	Usage          *usage       `json:"usage,omitempty"`
	PromptTokenIDs []int32      `json:"prompt_token_ids,omitempty"` // return_token_ids
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      *chatOut      `json:"message,omitempty"`
	Delta        *chatDelta    `json:"delta,omitempty"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
	TokenIDs     []int32       `json:"token_ids,omitempty"` // return_token_ids
}

type chatOut struct {
	Role      string         `json:"role"`
	Content   *string        `json:"content"`
	ToolCalls []chatToolCall `json:"tool_calls,omitempty"`
}

type chatDelta struct {
	Role      string         `json:"role,omitempty"`
	Content   *string        `json:"content,omitempty"`
	ToolCalls []chatToolCall `json:"tool_calls,omitempty"`
}

type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float32          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// chatPlan is a validated chat request.
type chatPlan struct {
	req    chatRequest
	prompt []int32
	tools  map[string]bool // the declared tools, when tool calls are parsed
	format tool.CallFormat // the format tool calls are parsed in; nil: Hermes, as ChatML writes them
	specs  []genSpec
}

// Bounds on a chat request.
const (
	maxMessages    = 4096
	maxTools       = 128
	maxToolCalls   = 16
	maxToolArgSize = 64 << 10
)

// parseChat validates a chat body and renders its prompt; the fuzz test drives it directly.
func (s *Server) parseChat(data []byte) (*chatPlan, error) {
	var req chatRequest
	if err := decodeBody(data, &req, false); err != nil {
		return nil, err
	}
	return s.planChatFormat(req, chatParams{"messages", "response_format", "max_completion_tokens"})
}

// chatParams name a request's messages, response format and completion bound in errors: the
// chat route's, or the Responses API's input, text.format and max_output_tokens.
type chatParams struct{ messages, format, maxTokens string }

// planChatFormat validates a chat request and renders its prompt.
func (s *Server) planChatFormat(creq chatRequest, names chatParams) (*chatPlan, error) {
	msgParam, formatParam := names.messages, names.format
	p := chatPlan{req: creq}
	req := &p.req
	if err := s.checkModel(req.Model); err != nil {
		return nil, err
	}
	var text string
	var lits [][2]int
	var ts *toolSet
	var err error
	if s.chatTpl == nil {
		msgs, t, err := renderMessages(req)
		if err != nil {
			return nil, err
		}
		ts = t
		text, lits = renderPrompt(msgs)
	} else {
		if ts, err = checkMessages(req); err != nil {
			return nil, err
		}
		if ts.force != "" && s.chatTpl.format() != tool.Hermes {
			return nil, unsupported("tool_choice", "a forced tool call is supported for Hermes-format models only; this model's chat template writes %s calls", s.chatTpl.format().Name())
		}
		if text, lits, err = s.renderTemplate(req, ts); err != nil {
			return nil, err
		}
		p.format = s.chatTpl.format()
	}
	p.tools = ts.declared
	if err := s.checkText(len(text), msgParam); err != nil {
		return nil, err
	}
	p.prompt = s.encodeChat(text, lits)
	if err := s.checkPrompt(p.prompt, msgParam); err != nil {
		return nil, err
	}
	n, err := req.n()
	if err != nil {
		return nil, err
	}
	top := 0
	if req.TopLogprobs != nil {
		if *req.TopLogprobs < 0 || *req.TopLogprobs > maxLogprobs {
			return nil, badRequest("top_logprobs", "top_logprobs must be in [0, %d], got %d", maxLogprobs, *req.TopLogprobs)
		}
		if !req.Logprobs && *req.TopLogprobs > 0 {
			return nil, badRequest("top_logprobs", "top_logprobs needs logprobs: true")
		}
		top = *req.TopLogprobs
	}
	sampling, err := req.sampling()
	if err != nil {
		return nil, err
	}
	strs, ids, err := req.stops(s.stopIDs, s.mcfg.Vocab)
	if err != nil {
		return nil, err
	}
	limit, param := req.MaxCompletionTokens, names.maxTokens
	if limit == nil {
		limit, param = req.MaxTokens, "max_tokens"
	}
	maxTok, err := s.maxTokens(limit, param, len(p.prompt), 0)
	if err != nil {
		return nil, err
	}
	r := infer.Request{Prompt: p.prompt, MaxTokens: maxTok, Sampling: sampling, Stop: ids}
	if err := s.checkRequest(r, msgParam); err != nil {
		return nil, err
	}
	grammar, err := s.grammarOf(ts, req.ResponseFormat, formatParam, ids)
	if err != nil {
		return nil, err
	}
	var hold []string
	if p.tools != nil {
		hold = holdFor(p.format)
	}
	seed := req.seed()
	for c := range n {
		r.Seed = seed + uint64(c)
		p.specs = append(p.specs, genSpec{req: r, stopStrs: strs, hold: hold, top: top, grammar: grammar})
	}
	return &p, nil
}

// grammarOf is the grammar a request's tools and response format hold its completion to: a
// forced tool call, JSON of a schema, or none (nil).
func (s *Server) grammarOf(ts *toolSet, format json.RawMessage, formatParam string, stops []int32) (*frame, error) {
	rf, err := responseFormat(format, formatParam)
	if err != nil {
		return nil, err
	}
	var g *frame
	if ts.force != "" {
		if rf != nil {
			return nil, unsupported(formatParam, "a forced tool call and a JSON %s cannot be asked for together", formatParam)
		}
		if g, err = s.toolCallGrammar(ts); err != nil {
			return nil, err
		}
	} else {
		g = rf
	}
	if g != nil && len(stops) == 0 {
		return nil, badRequest("ignore_eos", "constrained decoding (a forced tool call or a JSON format) ends with the end-of-turn token: ignore_eos cannot be used with it")
	}
	return g, nil
}

// functionTool is an OpenAI function as a tool.Tool, so that env.DescribeTools writes it into the
// system prompt exactly as training did. It is never called here: the client runs its tools.
type functionTool struct {
	name, desc string
	schema     json.RawMessage
}

func (f functionTool) Name() string            { return f.name }
func (f functionTool) Description() string     { return f.desc }
func (f functionTool) Schema() json.RawMessage { return f.schema }
func (f functionTool) Call(context.Context, json.RawMessage) (string, error) {
	return "", errors.New("serve: tools run at the client")
}

// toolSet is what a chat request's tools and tool_choice ask for.
type toolSet struct {
	declared map[string]bool // the declared tools, when tool calls are parsed (nil: none)
	tools    []functionTool  // the declared tools in order
	force    string          // "": the model may call a tool or answer; "required": it must call one; else the tool it must call
}

// parseTools reads tools and tool_choice (the chat form: "auto", "none", "required" or
// {"type": "function", "function": {"name"}}).
func parseTools(tools []chatTool, choice json.RawMessage) (*toolSet, error) {
	if len(tools) > maxTools {
		return nil, badRequest("tools", "at most %d tools, got %d", maxTools, len(tools))
	}
	mode, named := "auto", ""
	if len(choice) > 0 && !isNull(choice) {
		if json.Unmarshal(choice, &mode) == nil {
			if mode != "auto" && mode != "none" && mode != "required" {
				return nil, badRequest("tool_choice", `tool_choice must be "auto", "none", "required" or a function, got %q`, mode)
			}
		} else {
			var fn struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
				Name string `json:"name"` // the Responses API's form
			}
			if json.Unmarshal(choice, &fn) != nil || fn.Type != "function" || (fn.Function.Name == "") == (fn.Name == "") {
				return nil, badRequest("tool_choice", `tool_choice must be "auto", "none", "required" or {"type": "function", "function": {"name": NAME}}`)
			}
			mode, named = "named", fn.Function.Name+fn.Name
		}
	}
	if mode == "none" || len(tools) == 0 {
		if mode == "required" || mode == "named" {
			return nil, badRequest("tool_choice", "tool_choice %s needs tools", string(choice))
		}
		return &toolSet{}, nil
	}
	ts := &toolSet{declared: map[string]bool{}}
	for i, t := range tools {
		if t.Type != "function" {
			return nil, unsupported(fmt.Sprintf("tools[%d].type", i), "only function tools are supported, got %q", t.Type)
		}
		name := t.Function.Name
		if name == "" || len(name) > 64 || strings.ContainsAny(name, " \n\t\"<>\\") {
			return nil, badRequest(fmt.Sprintf("tools[%d].function.name", i), "a tool name must have 1 to 64 characters and no spaces, quotes, backslashes or angle brackets")
		}
		if ts.declared[name] {
			return nil, badRequest(fmt.Sprintf("tools[%d].function.name", i), "tool %q is declared twice", name)
		}
		ts.declared[name] = true
		schema := t.Function.Parameters
		if len(schema) == 0 || isNull(schema) {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		} else if !isObject(schema) {
			return nil, badRequest(fmt.Sprintf("tools[%d].function.parameters", i), "parameters must be a JSON schema object")
		}
		ts.tools = append(ts.tools, functionTool{name: name, desc: t.Function.Description, schema: schema})
	}
	switch mode {
	case "required":
		ts.force = "required"
	case "named":
		if !ts.declared[named] {
			return nil, badRequest("tool_choice", "tool_choice names %q, which is not among the tools", named)
		}
		ts.force = named
	}
	return ts, nil
}

// renderMessages turns OpenAI messages into the ChatML messages training renders: the tools'
// description appended to the system prompt (env.DescribeTools), assistant tool calls written as
// <tool_call>{"name":…,"arguments":…}</tool_call>, and each run of tool messages as one tool
// message of <tool_response>…</tool_response> lines. The user's and the tools' text is marked as
// literal (see encodeChat). It returns the tools to parse calls of (declared nil when there are
// none or tool_choice is "none").
func renderMessages(req *chatRequest) ([]promptMessage, *toolSet, error) {
	ts, err := checkMessages(req)
	if err != nil {
		return nil, nil, err
	}
	var out []promptMessage
	var toolRun strings.Builder
	var toolLits [][2]int
	flushTools := func() {
		if toolRun.Len() > 0 {
			out = append(out, promptMessage{Message: tokenizer.Message{Role: "tool", Content: toolRun.String()}, literal: toolLits})
			toolRun.Reset()
			toolLits = nil
		}
	}
	for i, m := range req.Messages {
		param := fmt.Sprintf("messages[%d]", i)
		text, err := contentText(m.Content, param+".content")
		if err != nil {
			return nil, nil, err
		}
		if m.Role != "tool" {
			flushTools()
		}
		switch m.Role {
		case "system", "developer":
			out = append(out, promptMessage{Message: tokenizer.Message{Role: "system", Content: text}})
		case "user":
			out = append(out, promptMessage{Message: tokenizer.Message{Role: "user", Content: text}, literal: [][2]int{{0, len(text)}}})
		case "assistant":
			var b strings.Builder
			b.WriteString(text)
			for k, tc := range m.ToolCalls {
				call, err := renderCall(tc, fmt.Sprintf("%s.tool_calls[%d]", param, k))
				if err != nil {
					return nil, nil, err
				}
				b.WriteString(call)
			}
			out = append(out, promptMessage{Message: tokenizer.Message{Role: "assistant", Content: b.String()}})
		case "tool":
			if toolRun.Len() > 0 {
				toolRun.WriteByte('\n')
			}
			toolRun.WriteString(tokenizer.ToolResponseOpen)
			toolLits = append(toolLits, [2]int{toolRun.Len(), toolRun.Len() + len(text)})
			toolRun.WriteString(text + tokenizer.ToolResponseClose)
		default:
			return nil, nil, badRequest(param+".role", "unknown role %q (system, developer, user, assistant, tool)", m.Role)
		}
	}
	flushTools()
	tools := make([]tool.Tool, len(ts.tools))
	for i, t := range ts.tools {
		tools[i] = t
	}
	if desc := env.DescribeTools(tools); desc != "" {
		if out[0].Role == "system" {
			if out[0].Content != "" {
				out[0].Content += "\n"
			}
			out[0].Content += desc
		} else {
			out = append([]promptMessage{{Message: tokenizer.Message{Role: "system", Content: desc}}}, out...)
		}
	}
	return out, ts, nil
}

// checkMessages bounds a request's messages and reads its tools.
func checkMessages(req *chatRequest) (*toolSet, error) {
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	if len(req.Messages) > maxMessages {
		return nil, badRequest("messages", "at most %d messages, got %d", maxMessages, len(req.Messages))
	}
	return parseTools(req.Tools, req.ToolChoice)
}

// holdFor is what streaming holds back from, for a tool-call format (nil: Hermes).
func holdFor(f tool.CallFormat) []string {
	switch {
	case f == nil || f == tool.Hermes:
		return []string{tool.OpenTag}
	case f == tool.Mistral:
		return []string{tool.MistralTag}
	default: // Llama 3.1's JSON call
		return []string{`{"`, "<|python_tag|>"}
	}
}

func isObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// contentText reads a message's content: a string, null, or a list of text parts.
func contentText(raw json.RawMessage, param string) (string, error) {
	if len(raw) == 0 || isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", badRequest(param, "content must be a string or a list of text parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", unsupported(param, "only text content parts are supported, got %q", p.Type)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// renderCall writes an assistant's tool call as the model writes one: compact JSON between the tags.
func renderCall(tc chatToolCall, param string) (string, error) {
	if tc.Type != "" && tc.Type != "function" {
		return "", unsupported(param+".type", "only function tool calls are supported, got %q", tc.Type)
	}
	if tc.Function.Name == "" {
		return "", badRequest(param+".function.name", "a tool call needs a function name")
	}
	args := strings.TrimSpace(tc.Function.Arguments)
	if args == "" {
		args = "{}"
	}
	var compact bytes.Buffer
	if !isObject(json.RawMessage(args)) || json.Compact(&compact, []byte(args)) != nil {
		return "", badRequest(param+".function.arguments", "arguments must be a JSON object, as a string")
	}
	name, _ := json.Marshal(tc.Function.Name)
	return tool.OpenTag + `{"name":` + string(name) + `,"arguments":` + compact.String() + `}` + tool.CloseTag, nil
}

// toolCalls splits a completion into its content and tool calls. ok is false when the text has
// no call, a malformed one, or one of a tool not declared: then it is all content.
func toolCalls(text string, declared map[string]bool, idPrefix string) (content string, calls []chatToolCall, ok bool) {
	return toolCallsIn(nil, text, declared, idPrefix)
}

// toolCallsIn is toolCalls for the tool-call format f (nil: Hermes).
func toolCallsIn(f tool.CallFormat, text string, declared map[string]bool, idPrefix string) (content string, calls []chatToolCall, ok bool) {
	if declared == nil {
		return text, nil, false
	}
	if f != nil && f != tool.Hermes {
		parsed := f.Parse(text, tool.ParseLimits{MaxCalls: maxToolCalls, MaxArgBytes: maxToolArgSize})
		if len(parsed) == 0 {
			return text, nil, false
		}
		for i, c := range parsed {
			if c.Err != nil || !declared[c.Name] {
				return text, nil, false
			}
			tc := chatToolCall{ID: fmt.Sprintf("%s-%d", idPrefix, i), Type: "function"}
			tc.Function.Name, tc.Function.Arguments = c.Name, string(c.Arguments)
			calls = append(calls, tc)
		}
		return f.Content(text), calls, true
	}
	parsed := tool.ParseCalls(text, tool.ParseLimits{MaxCalls: maxToolCalls, MaxArgBytes: maxToolArgSize})
	if len(parsed) == 0 {
		return text, nil, false
	}
	for i, c := range parsed {
		if c.Err != nil || !declared[c.Name] {
			return text, nil, false
		}
		tc := chatToolCall{ID: fmt.Sprintf("%s-%d", idPrefix, i), Type: "function"}
		tc.Function.Name, tc.Function.Arguments = c.Name, string(c.Arguments)
		calls = append(calls, tc)
	}
	// Every tag pairs up (the calls are well-formed): drop each <tool_call>…</tool_call> span.
	var b strings.Builder
	rest := text
	for {
		i := strings.Index(rest, tool.OpenTag)
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		j := strings.Index(rest[i:], tool.CloseTag)
		rest = rest[i+j+len(tool.CloseTag):]
	}
	return b.String(), calls, true
}

func (s *Server) chatLogprobsOf(steps []tokStep, top int, asIDs bool) *chatLogprobs {
	lp := &chatLogprobs{Content: []chatTokenLogprob{}}
	for _, st := range steps {
		e := chatTokenLogprob{Token: s.tokenString(st.tok, asIDs), Logprob: st.lp, Bytes: s.tokenBytes(st.tok), TopLogprobs: []chatTopLogprob{}}
		for _, c := range st.top {
			e.TopLogprobs = append(e.TopLogprobs, chatTopLogprob{Token: s.tokenString(c.Token, asIDs), Logprob: c.Logprob, Bytes: s.tokenBytes(c.Token)})
		}
		lp.Content = append(lp.Content, e)
	}
	return lp
}

func (s *Server) tokenBytes(id int32) []int {
	b := []byte(s.tok.Decode([]int32{id}))
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) error {
	p, err := parseBody(s, w, r, s.parseChat)
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
	s.met.promptTokens.Add(float64(len(p.prompt)))
	id, created := newID("chatcmpl"), time.Now().Unix()
	if p.req.Stream {
		s.streamChat(ctx, w, p, id, created)
		return nil
	}
	results, err := s.runAll(ctx, p.specs)
	if err != nil {
		return err
	}
	resp := chatResponse{ID: id, Object: "chat.completion", Created: created, Model: s.opts.ModelName,
		Usage: &usage{PromptTokens: len(p.prompt)}}
	if p.req.ReturnTokenIDs {
		resp.PromptTokenIDs = p.prompt
	}
	for i, res := range results {
		finish := res.finish
		msg := &chatOut{Role: "assistant"}
		content, calls, ok := toolCallsIn(p.format, res.text, p.tools, fmt.Sprintf("call_%s_%d", strings.TrimPrefix(id, "chatcmpl-"), i))
		if ok && finish == "stop" {
			msg.ToolCalls, finish = calls, "tool_calls"
		} else {
			content = res.text
		}
		if strings.TrimSpace(content) != "" || msg.ToolCalls == nil {
			msg.Content = &content
		}
		ch := chatChoice{Index: i, Message: msg, FinishReason: &finish}
		if p.req.Logprobs {
			ch.Logprobs = s.chatLogprobsOf(res.steps, p.specs[i].top, p.req.ReturnTokensAsTokenIDs)
		}
		if p.req.ReturnTokenIDs {
			ch.TokenIDs = tokensOf(res.steps)
		}
		resp.Choices = append(resp.Choices, ch)
		resp.Usage.CompletionTokens += len(res.steps)
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens + resp.Usage.CompletionTokens
	writeJSON(w, http.StatusOK, resp)
	return nil
}

func (s *Server) streamChat(ctx context.Context, w http.ResponseWriter, p *chatPlan, id string, created int64) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := startSSE(w)
	chunk := func(ch chatChoice, first bool) error {
		resp := chatResponse{ID: id, Object: "chat.completion.chunk", Created: created, Model: s.opts.ModelName, Choices: []chatChoice{ch}}
		if first && p.req.ReturnTokenIDs {
			resp.PromptTokenIDs = p.prompt
		}
		return out.send(resp)
	}
	text := func(s string) *string { return &s }
	var mu sync.Mutex
	var firstErr error
	completion := 0
	var wg sync.WaitGroup
	for i, spec := range p.specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := chunk(chatChoice{Index: i, Delta: &chatDelta{Role: "assistant", Content: text("")}}, true)
			shown := 0
			var res genResult
			if err == nil {
				res, err = s.run(ctx, spec, func(d delta) error {
					shown += len(d.text)
					ch := chatChoice{Index: i, Delta: &chatDelta{}}
					if d.text != "" {
						ch.Delta.Content = text(d.text)
					}
					if p.req.Logprobs && len(d.steps) > 0 {
						ch.Logprobs = s.chatLogprobsOf(d.steps, spec.top, p.req.ReturnTokensAsTokenIDs)
					}
					if p.req.ReturnTokenIDs {
						ch.TokenIDs = tokensOf(d.steps)
					}
					if ch.Delta.Content == nil && ch.Logprobs == nil && ch.TokenIDs == nil {
						return nil
					}
					return chunk(ch, false)
				})
			}
			if err == nil {
				err = s.finishChatStream(p, res, shown, i, fmt.Sprintf("call_%s_%d", strings.TrimPrefix(id, "chatcmpl-"), i), chunk)
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
		out.fail(firstErr)
		out.done()
		return
	}
	if p.req.StreamOpts != nil && p.req.StreamOpts.IncludeUsage {
		u := &usage{PromptTokens: len(p.prompt), CompletionTokens: completion, TotalTokens: len(p.prompt) + completion}
		_ = out.send(chatResponse{ID: id, Object: "chat.completion.chunk", Created: created, Model: s.opts.ModelName, Choices: []chatChoice{}, Usage: u})
	}
	out.done()
}

// finishChatStream sends what streaming held back (from the first tool-call tag on) as content
// or tool calls, then the finish reason.
func (s *Server) finishChatStream(p *chatPlan, res genResult, shown, index int, idPrefix string, chunk func(chatChoice, bool) error) error {
	finish := res.finish
	rest := res.text[min(shown, len(res.text)):]
	if rest != "" {
		content, calls, ok := toolCallsIn(p.format, res.text, p.tools, idPrefix)
		if ok && finish == "stop" {
			// The content shown is the text before the first call; what content follows the calls
			// comes now, then the calls.
			if after := content[min(shown, len(content)):]; strings.TrimSpace(after) != "" {
				if err := chunk(chatChoice{Index: index, Delta: &chatDelta{Content: &after}}, false); err != nil {
					return err
				}
			}
			for k := range calls {
				calls[k].Index = &k
			}
			if err := chunk(chatChoice{Index: index, Delta: &chatDelta{ToolCalls: calls}}, false); err != nil {
				return err
			}
			finish = "tool_calls"
		} else if err := chunk(chatChoice{Index: index, Delta: &chatDelta{Content: &rest}}, false); err != nil {
			return err
		}
	}
	return chunk(chatChoice{Index: index, Delta: &chatDelta{}, FinishReason: &finish}, false)
}
