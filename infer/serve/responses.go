package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// The Responses API (POST /v1/responses), as the OpenAI Agents SDK calls it by default: input as a
// string or a list of items (messages, function calls and their outputs), instructions, function
// tools and tool_choice, structured output (text.format), streaming as named events, and
// previous_response_id over the responses this server keeps in memory (Options.ResponseStore;
// the oldest are evicted first, and an unknown or evicted id is a 404). A request renders to the
// same ChatML prompt as the equivalent chat completion and generates one completion.

// responsesRequest is the body of POST /v1/responses.
type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Tools              []responseTool  `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	PreviousResponseID *string         `json:"previous_response_id"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	Stream             bool            `json:"stream"`
	Store              *bool           `json:"store"`
	Text               *struct {
		Format json.RawMessage `json:"format"`
	} `json:"text"`
	Metadata   map[string]string `json:"metadata"`
	User       string            `json:"user"`
	Truncation string            `json:"truncation"`
	Reasoning  json.RawMessage   `json:"reasoning"`
	Background bool              `json:"background"`
}

type responseTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// inputItem is one item of input: a message, a function call, or a function call's output.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

type responseObject struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"`
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"`
	Error              *responseError     `json:"error"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	Model              string             `json:"model"`
	Output             []outputItem       `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Store              bool               `json:"store"`
	Temperature        *float64           `json:"temperature"`
	TopP               *float64           `json:"top_p"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              []responseTool     `json:"tools"`
	Text               json.RawMessage    `json:"text"`
	Truncation         string             `json:"truncation"`
	Metadata           map[string]string  `json:"metadata"`
	Usage              *responseUsage     `json:"usage"`
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// outputItem is a message or a function call of a response's output.
type outputItem struct {
	Type      string       `json:"type"`
	ID        string       `json:"id"`
	Status    string       `json:"status"`
	Role      string       `json:"role,omitempty"`
	Content   []outputPart `json:"content,omitempty"`
	CallID    string       `json:"call_id,omitempty"`
	Name      string       `json:"name,omitempty"`
	Arguments *string      `json:"arguments,omitempty"`
}

type outputPart struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

// responsePlan is a validated Responses request.
type responsePlan struct {
	req   responsesRequest
	chat  *chatPlan
	input []chatMessage // what the request adds to the conversation (stored with the output)
}

// Bounds on a Responses request.
const maxInputItems = 4096

func hexID(prefix string) string {
	return fmt.Sprintf("%s_%016x%016x", prefix, rand.Uint64(), rand.Uint64())
}

// parseResponses validates a Responses body and renders its prompt; the fuzz test drives it.
func (s *Server) parseResponses(data []byte) (*responsePlan, error) {
	p := &responsePlan{}
	req := &p.req
	if err := decodeBody(data, req, false); err != nil {
		return nil, err
	}
	if req.Background {
		return nil, unsupported("background", "background responses are not supported")
	}
	if len(req.Reasoning) > 0 && !isNull(req.Reasoning) {
		var settings map[string]json.RawMessage
		if json.Unmarshal(req.Reasoning, &settings) != nil {
			return nil, badRequest("reasoning", "reasoning must be an object")
		}
		for k, v := range settings {
			if !isNull(v) {
				return nil, unsupported("reasoning."+k, "reasoning settings are not supported: the model does not reason in a separate channel")
			}
		}
	}
	switch req.Truncation {
	case "", "disabled":
	case "auto":
		return nil, unsupported("truncation", `truncation "auto" is not supported: a conversation longer than the context is refused, never cut`)
	default:
		return nil, badRequest("truncation", `truncation must be "disabled" (or "auto", which is not supported), got %q`, req.Truncation)
	}
	input, err := parseInput(req.Input)
	if err != nil {
		return nil, err
	}
	p.input = input
	var msgs []chatMessage
	if req.Instructions != nil && *req.Instructions != "" {
		// Instructions are not carried to responses that continue this one, as OpenAI's are not.
		msgs = append(msgs, chatMessage{Role: "system", Content: mustMarshal(*req.Instructions)})
	}
	if req.PreviousResponseID != nil && *req.PreviousResponseID != "" {
		hist, err := s.responses.history(*req.PreviousResponseID)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, hist...)
	}
	msgs = append(msgs, input...)
	creq := chatRequest{Model: req.Model, Messages: msgs, ToolChoice: req.ToolChoice, ParallelToolCalls: req.ParallelToolCalls,
		MaxCompletionTokens: req.MaxOutputTokens, User: req.User}
	creq.Temperature, creq.TopP, creq.Stream = req.Temperature, req.TopP, req.Stream
	if req.Text != nil {
		creq.ResponseFormat = req.Text.Format
	}
	for i, t := range req.Tools {
		if t.Type != "function" {
			return nil, unsupported(fmt.Sprintf("tools[%d].type", i), "only function tools are supported, got %q", t.Type)
		}
		var ct chatTool
		ct.Type = "function"
		ct.Function.Name, ct.Function.Description, ct.Function.Parameters, ct.Function.Strict = t.Name, t.Description, t.Parameters, t.Strict
		creq.Tools = append(creq.Tools, ct)
	}
	if p.chat, err = s.planChatFormat(creq, chatParams{"input", "text.format", "max_output_tokens"}); err != nil {
		return nil, err
	}
	return p, nil
}

// parseInput reads input: a string (one user message) or a list of items.
func parseInput(raw json.RawMessage) ([]chatMessage, error) {
	if len(raw) == 0 || isNull(raw) {
		return nil, badRequest("input", "input is required: a string or a list of items")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return []chatMessage{{Role: "user", Content: mustMarshal(text)}}, nil
	}
	var items []inputItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("input", "input must be a string or a list of items: %v", err)
	}
	if len(items) == 0 || len(items) > maxInputItems {
		return nil, badRequest("input", "input must hold 1 to %d items, got %d", maxInputItems, len(items))
	}
	var out []chatMessage
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "", "message":
			text, err := inputText(it.Content, param+".content")
			if err != nil {
				return nil, err
			}
			switch it.Role {
			case "user", "system", "developer", "assistant":
			default:
				return nil, badRequest(param+".role", "unknown role %q (user, system, developer, assistant)", it.Role)
			}
			out = append(out, chatMessage{Role: it.Role, Content: mustMarshal(text)})
		case "function_call":
			if it.Name == "" {
				return nil, badRequest(param+".name", "a function call needs its name")
			}
			var tc chatToolCall
			tc.ID, tc.Type = it.CallID, "function"
			tc.Function.Name, tc.Function.Arguments = it.Name, it.Arguments
			// Calls that follow an assistant message (or each other) are that turn's.
			if n := len(out); n > 0 && out[n-1].Role == "assistant" {
				out[n-1].ToolCalls = append(out[n-1].ToolCalls, tc)
			} else {
				out = append(out, chatMessage{Role: "assistant", ToolCalls: []chatToolCall{tc}})
			}
		case "function_call_output":
			text, err := inputText(it.Output, param+".output")
			if err != nil {
				return nil, err
			}
			out = append(out, chatMessage{Role: "tool", ToolCallID: it.CallID, Content: mustMarshal(text)})
		default:
			return nil, unsupported(param+".type", "input items of type %q are not supported (message, function_call, function_call_output)", it.Type)
		}
	}
	return out, nil
}

// inputText reads a message's content or a call's output: a string or a list of text parts.
func inputText(raw json.RawMessage, param string) (string, error) {
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
		switch {
		case p.Text == nil:
			return "", unsupported(param, "only text content parts are supported, got %q", p.Type)
		case p.Type == "input_text" || p.Type == "output_text" || p.Type == "text":
			b.WriteString(*p.Text)
		default:
			return "", unsupported(param, "only text content parts are supported, got %q", p.Type)
		}
	}
	return b.String(), nil
}

// responseOutput is the output of a finished generation: the message (the text before and
// after any calls) and the function calls parsed from the completion.
func (s *Server) responseOutput(p *responsePlan, res genResult) ([]outputItem, []chatToolCall, string) {
	var items []outputItem
	content, calls, ok := toolCallsIn(p.chat.format, res.text, p.chat.tools, "")
	if !ok || res.finish != "stop" {
		content, calls = res.text, nil
	}
	if strings.TrimSpace(content) != "" || len(calls) == 0 {
		items = append(items, outputItem{Type: "message", ID: hexID("msg"), Status: "completed", Role: "assistant",
			Content: []outputPart{{Type: "output_text", Text: content, Annotations: []any{}}}})
	}
	for i := range calls {
		calls[i].ID = hexID("call")
		args := calls[i].Function.Arguments
		items = append(items, outputItem{Type: "function_call", ID: hexID("fc"), Status: "completed", CallID: calls[i].ID,
			Name: calls[i].Function.Name, Arguments: &args})
	}
	return items, calls, content
}

// responseObject is the response object of p, in progress until finishResponse completes it.
func (s *Server) responseObject(p *responsePlan, id string, created int64) *responseObject {
	req := &p.req
	o := &responseObject{ID: id, Object: "response", CreatedAt: created, Status: "in_progress", Instructions: req.Instructions,
		MaxOutputTokens: req.MaxOutputTokens, Model: s.opts.ModelName, Output: []outputItem{}, ParallelToolCalls: true,
		PreviousResponseID: req.PreviousResponseID, Store: req.Store == nil || *req.Store, Temperature: req.Temperature, TopP: req.TopP,
		ToolChoice: req.ToolChoice, Tools: req.Tools, Truncation: "disabled", Metadata: req.Metadata, Text: json.RawMessage(`{"format":{"type":"text"}}`)}
	if o.Temperature == nil {
		one := 1.0
		o.Temperature = &one
	}
	if o.TopP == nil {
		one := 1.0
		o.TopP = &one
	}
	if len(o.ToolChoice) == 0 || isNull(o.ToolChoice) {
		o.ToolChoice = json.RawMessage(`"auto"`)
	}
	if o.Tools == nil {
		o.Tools = []responseTool{}
	}
	if req.ParallelToolCalls != nil {
		o.ParallelToolCalls = *req.ParallelToolCalls
	}
	if req.Text != nil && len(req.Text.Format) > 0 && !isNull(req.Text.Format) {
		o.Text, _ = json.Marshal(map[string]json.RawMessage{"format": req.Text.Format})
	}
	if o.Metadata == nil {
		o.Metadata = map[string]string{}
	}
	return o
}

// finish completes o with res's output and usage, and stores the exchange for
// previous_response_id.
func (s *Server) finishResponse(p *responsePlan, o *responseObject, res genResult, items []outputItem, calls []chatToolCall, content string) {
	o.Output = items
	o.Status = "completed"
	if res.finish == "length" {
		o.Status = "incomplete"
		o.IncompleteDetails = &incompleteDetails{Reason: "max_output_tokens"}
	}
	u := &responseUsage{InputTokens: len(p.chat.prompt), OutputTokens: len(res.steps)}
	u.TotalTokens = u.InputTokens + u.OutputTokens
	o.Usage = u
	if o.Store {
		out := chatMessage{Role: "assistant", Content: mustMarshal(content), ToolCalls: calls}
		s.responses.put(o.ID, deref(p.req.PreviousResponseID), append(p.input, out))
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) error {
	p, err := parseBody(s, w, r, s.parseResponses)
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
	s.met.promptTokens.Add(float64(len(p.chat.prompt)))
	o := s.responseObject(p, hexID("resp"), time.Now().Unix())
	if p.req.Stream {
		s.streamResponse(ctx, w, p, o)
		return nil
	}
	res, err := s.run(ctx, p.chat.specs[0], nil)
	if err != nil {
		return err
	}
	items, calls, content := s.responseOutput(p, res)
	s.finishResponse(p, o, res, items, calls, content)
	writeJSON(w, http.StatusOK, o)
	return nil
}

// streamResponse streams the Responses API's events: response.created and .in_progress, the
// message's text as it comes (output_item.added, content_part.added, output_text.delta …), each
// function call (output_item.added, function_call_arguments.delta and .done, output_item.done),
// then response.completed (or .incomplete when max_output_tokens cut it).
func (s *Server) streamResponse(ctx context.Context, w http.ResponseWriter, p *responsePlan, o *responseObject) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := startSSE(w)
	seq := 0
	send := func(typ string, fields map[string]any) error {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		return out.event(typ, fields)
	}
	snapshot := func() responseObject { c := *o; return c }
	if err := send("response.created", map[string]any{"response": snapshot()}); err != nil {
		return
	}
	if err := send("response.in_progress", map[string]any{"response": snapshot()}); err != nil {
		return
	}
	msgID := hexID("msg")
	opened := false
	var shownText strings.Builder
	open := func() error {
		if opened {
			return nil
		}
		opened = true
		item := outputItem{Type: "message", ID: msgID, Status: "in_progress", Role: "assistant", Content: []outputPart{}}
		if err := send("response.output_item.added", map[string]any{"output_index": 0, "item": item}); err != nil {
			return err
		}
		return send("response.content_part.added", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0,
			"part": outputPart{Type: "output_text", Text: "", Annotations: []any{}}})
	}
	emitText := func(text string) error {
		if err := open(); err != nil {
			return err
		}
		shownText.WriteString(text)
		return send("response.output_text.delta", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "delta": text, "logprobs": []any{}})
	}
	res, err := s.run(ctx, p.chat.specs[0], func(d delta) error {
		if d.text == "" {
			return nil
		}
		return emitText(d.text)
	})
	if err != nil {
		ae := toAPIError(err)
		o.Status, o.Error = "failed", &responseError{Code: ae.code, Message: ae.message}
		_ = send("error", map[string]any{"code": ae.code, "message": ae.message, "param": nil})
		_ = send("response.failed", map[string]any{"response": snapshot()})
		return
	}
	items, calls, content := s.responseOutput(p, res)
	if opened && (len(items) == 0 || items[0].Type != "message") {
		// Text was shown before the calls (only spaces): the message it opened stays.
		items = append([]outputItem{{Type: "message", Status: "completed", Role: "assistant"}}, items...)
	}
	if len(items) > 0 && items[0].Type == "message" {
		items[0].ID = msgID
		// What the stream held back (a tool-call tag that did not parse, or text after the calls).
		if rest, ok := strings.CutPrefix(content, shownText.String()); ok && rest != "" {
			if err := emitText(rest); err != nil {
				return
			}
		} else if !ok {
			content = shownText.String() // the content is what was shown (only spaces before calls)
		}
		if err := open(); err != nil {
			return
		}
		part := outputPart{Type: "output_text", Text: content, Annotations: []any{}}
		items[0].Content = []outputPart{part}
		if send("response.output_text.done", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "text": content, "logprobs": []any{}}) != nil ||
			send("response.content_part.done", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "part": part}) != nil ||
			send("response.output_item.done", map[string]any{"output_index": 0, "item": items[0]}) != nil {
			return
		}
	}
	for i, it := range items {
		if it.Type != "function_call" {
			continue
		}
		added := it
		empty := ""
		added.Status, added.Arguments = "in_progress", &empty
		if send("response.output_item.added", map[string]any{"output_index": i, "item": added}) != nil ||
			send("response.function_call_arguments.delta", map[string]any{"item_id": it.ID, "output_index": i, "delta": *it.Arguments}) != nil ||
			send("response.function_call_arguments.done", map[string]any{"item_id": it.ID, "output_index": i, "name": it.Name, "arguments": *it.Arguments}) != nil ||
			send("response.output_item.done", map[string]any{"output_index": i, "item": it}) != nil {
			return
		}
	}
	s.finishResponse(p, o, res, items, calls, content)
	typ := "response.completed"
	if o.Status == "incomplete" {
		typ = "response.incomplete"
	}
	_ = send(typ, map[string]any{"response": snapshot()})
}
