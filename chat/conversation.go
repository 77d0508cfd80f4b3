package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentrl/agentrl/tool"
)

// Tokenizer is what a Conversation needs of a tokenizer. Encode must not add special tokens of
// its own (no BOS: the template writes it), and must turn the text of a special token into that
// token; Decode must return the text of every id, special tokens included.
type Tokenizer interface {
	Encode(text string) []int32
	Decode(ids []int32) string
	// SpecialID returns the id of a special (added) token.
	SpecialID(token string) (int32, bool)
}

// ToolFormat returns the tool-call format called name (see tool.CallFormatNames), or an error
// listing the valid names.
func ToolFormat(name string) (tool.CallFormat, error) { return tool.CallFormatByName(name) }

// DetectToolFormat says which tool-call format the template writes, by rendering an assistant
// tool call and looking at what comes out: nil when the template does not render tool calls
// (the assistant's text is then kept as it is).
func DetectToolFormat(t *Template) tool.CallFormat {
	args := json.RawMessage(`{"probe_arg": 1}`)
	msgs := []Message{
		{Role: "user", Content: "probe"},
		{Role: "assistant", Content: "", ToolCalls: []ToolCall{{ID: "abcdefghi", Name: "probe_fn", Arguments: args}}},
		{Role: "tool", Content: "probe result", ToolCallID: "abcdefghi", Name: "probe_fn"},
	}
	tools := []json.RawMessage{json.RawMessage(`{"type": "function", "function": {"name": "probe_fn", "description": "probe", "parameters": {"type": "object", "properties": {"probe_arg": {"type": "integer"}}}}}`)}
	out, err := t.Apply(msgs, tools, false)
	if err != nil {
		return nil
	}
	switch {
	case strings.Contains(out, tool.OpenTag+"\n{\"name\": \"probe_fn\""), strings.Contains(out, tool.OpenTag+"{\"name\": \"probe_fn\""):
		return tool.Hermes
	case strings.Contains(out, tool.MistralTag):
		return tool.Mistral
	case strings.Contains(out, `{"name": "probe_fn", "parameters": `):
		return tool.Llama3JSON
	}
	return nil
}

// Renderer renders episodes of one model with its chat template, tokenizer, tools and
// tool-call format. NewConversation starts one episode; a Renderer is safe for concurrent use.
type Renderer struct {
	tpl    *Template
	tok    Tokenizer
	tools  []json.RawMessage
	vars   *Map
	format tool.CallFormat
	stop   []int32
}

// RendererOptions configure a Renderer.
type RendererOptions struct {
	// Tools are the tool schemas (OpenAI's function format) the template shows; nil for none.
	Tools []json.RawMessage
	// Format is the tool-call format of the model's completions; nil detects it from the
	// template (DetectToolFormat).
	Format tool.CallFormat
	// Vars are further template variables, as apply_chat_template's keyword arguments
	// (Qwen3's enable_thinking): a JSON object, its key order kept; nil for none. They may not
	// replace messages, tools or add_generation_prompt.
	Vars json.RawMessage
}

// NewRenderer checks the template against the tokenizer: it must render a short conversation,
// and the token that ends an assistant turn must be one of the tokenizer's special tokens.
func NewRenderer(tpl *Template, tok Tokenizer, opts RendererOptions) (*Renderer, error) {
	r := &Renderer{tpl: tpl, tok: tok, tools: opts.Tools, format: opts.Format}
	if len(opts.Vars) > 0 {
		v, err := ParseJSON(opts.Vars)
		if err != nil {
			return nil, fmt.Errorf("chat: template variables: %w", err)
		}
		m, ok := v.(*Map)
		if !ok {
			return nil, errors.New("chat: template variables must be a JSON object")
		}
		for _, k := range m.keys {
			if k == "messages" || k == "tools" || k == "add_generation_prompt" {
				return nil, fmt.Errorf("chat: template variable %q is set by the conversation", k)
			}
		}
		r.vars = m
	}
	if r.format == nil {
		r.format = DetectToolFormat(tpl)
	}
	stop, err := r.endOfTurn()
	if err != nil {
		return nil, err
	}
	r.stop = stop
	return r, nil
}

// apply renders msgs with the renderer's tools and variables.
func (r *Renderer) apply(msgs []Message, addGenerationPrompt bool) (string, error) {
	ctx, err := Context(msgs, r.tools, addGenerationPrompt)
	if err != nil {
		return "", err
	}
	if r.vars != nil {
		for _, k := range r.vars.keys {
			ctx.Set(k, r.vars.vals[k])
		}
	}
	return r.tpl.Render(ctx)
}

// Format returns the tool-call format assistant turns are parsed with (nil: none).
func (r *Renderer) Format() tool.CallFormat { return r.format }

// endOfTurn finds the special token the template writes right after an assistant message's
// content, and the eos token when it is a special token too.
func (r *Renderer) endOfTurn() ([]int32, error) {
	const probe = "Probe-Reply-7"
	out, err := r.apply([]Message{{Role: "user", Content: "probe"}, {Role: "assistant", Content: probe}}, false)
	if err != nil {
		return nil, fmt.Errorf("chat: the template does not render a user and an assistant message: %w", err)
	}
	i := strings.LastIndex(out, probe)
	if i < 0 {
		return nil, errors.New("chat: the template does not write the assistant's content")
	}
	after := out[i+len(probe):]
	var stop []int32
	for n := min(len(after), 64); n > 0; n-- {
		if id, ok := r.tok.SpecialID(after[:n]); ok {
			stop = append(stop, id)
			break
		}
	}
	if eos, ok := r.tpl.Special("eos_token"); ok {
		if id, ok := r.tok.SpecialID(eos); ok && !containsID(stop, id) {
			stop = append(stop, id)
		}
	}
	// Llama 3.1 ends a turn that awaits a tool's result with <|eom_id|> where its template
	// writes one.
	if strings.Contains(r.tpl.Source(), eomID) {
		if id, ok := r.tok.SpecialID(eomID); ok && !containsID(stop, id) {
			stop = append(stop, id)
		}
	}
	if len(stop) == 0 {
		return nil, fmt.Errorf("chat: no special token ends an assistant turn (the template writes %q after it)", capText(after, 40))
	}
	return stop, nil
}

func containsID(l []int32, id int32) bool {
	for _, x := range l {
		if x == id {
			return true
		}
	}
	return false
}

func capText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

const eomID = "<|eom_id|>"

// Stop returns the tokens that end an assistant turn: the template's end-of-turn token, then
// the eos token when it differs, then Llama 3.1's <|eom_id|> when the template writes it.
func (r *Renderer) Stop() []int32 { return append([]int32(nil), r.stop...) }

// WithTools returns the renderer with tools (OpenAI's function format; nil for none) as the
// template's tools variable in place of its own: its template, tokenizer, variables, tool-call
// format and stop tokens are shared.
func (r *Renderer) WithTools(tools []json.RawMessage) *Renderer {
	c := *r
	c.tools = tools
	return &c
}

// Tools returns the tool schemas the template is given (nil: none).
func (r *Renderer) Tools() []json.RawMessage { return r.tools }

// NewConversation starts an episode.
func (r *Renderer) NewConversation() *Conversation { return &Conversation{r: r} }

// Conversation renders one episode turn by turn into tokens: it keeps the message list and the
// text the policy has been given (with its completions), and for each new observation returns
// only the tokens of the difference between the template's render with and without it. It
// implements the rollout loop's Conversation.
type Conversation struct {
	r    *Renderer
	msgs []Message
	text string // everything the policy was given and sampled, as text
	// Splits counts the turns at which the template was not prefix-stable.
	Splits int
}

// Start returns the episode's opening tokens: the optional system message (omitted when system
// is ""), the user message and the generation prompt; sysLen is how many of the tokens belong to
// the system message (0 when none).
func (c *Conversation) Start(system, user string) ([]int32, int, error) {
	c.msgs = c.msgs[:0]
	if system != "" {
		c.msgs = append(c.msgs, Message{Role: "system", Content: system})
	}
	c.msgs = append(c.msgs, Message{Role: "user", Content: user})
	text, err := c.r.apply(c.msgs, true)
	if err != nil {
		return nil, 0, fmt.Errorf("chat: rendering the prompt: %w", err)
	}
	c.text = text
	toks := c.r.tok.Encode(text)
	sysLen := 0
	if system != "" {
		sysLen = c.systemTokens(text, toks)
	}
	return toks, sysLen, nil
}

// systemTokens counts the tokens of toks that end within the system message's render.
func (c *Conversation) systemTokens(text string, toks []int32) int {
	sys, err := c.r.apply(c.msgs[:1], false)
	if err != nil {
		return 0
	}
	common := 0
	for common < len(sys) && common < len(text) && sys[common] == text[common] {
		common++
	}
	n, end := 0, 0
	for i := range toks {
		end += len(c.r.tok.Decode(toks[i : i+1]))
		if end > common {
			break
		}
		n = i + 1
	}
	return n
}

// Next is called after each assistant completion (its sampled ids, ending with a stop token
// when the model emitted one). It adds the assistant message — parsed into tool calls with the
// model's format when the template renders them — and the observation from role, and returns
// the tokens to append after the completion: the render of the conversation with the new
// message (and the generation prompt unless final) past the text the policy already has. When
// that text is no longer a prefix of the new render (the template rewrote history, as Qwen3
// drops earlier <think> blocks), split is true and toks is the complete new context instead.
func (c *Conversation) Next(completion []int32, role, observation string, final bool) ([]int32, bool, error) {
	if c.msgs == nil && c.text == "" {
		return nil, false, errors.New("chat: Next before Start")
	}
	content := completion
	if n := len(content); n > 0 && containsID(c.r.stop, content[n-1]) {
		content = content[:n-1]
	}
	said := c.r.tok.Decode(content)
	base := c.text + c.r.tok.Decode(completion)

	var candidates []Message
	var callID string
	if f := c.r.format; f != nil && f.HasCall(said) {
		if calls := f.Parse(said, tool.ParseLimits{}); len(calls) > 0 {
			m := Message{Role: "assistant", Content: f.Content(said)}
			ok := true
			for _, tc := range calls {
				if tc.Err != nil {
					ok = false
					break
				}
				m.ToolCalls = append(m.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
			}
			if ok {
				candidates = append(candidates, m)
				if len(calls) == 1 {
					callID = calls[0].ID
				}
			}
		}
	}
	candidates = append(candidates, Message{Role: "assistant", Content: said})

	var firstOut string
	var firstMsgs []Message
	var firstErr error
	for _, a := range candidates {
		obs := Message{Role: role, Content: observation}
		if role == "tool" && len(a.ToolCalls) > 0 {
			obs.ToolCallID = callID
		}
		msgs := append(append(append([]Message(nil), c.msgs...), a), obs)
		out, err := c.r.apply(msgs, !final)
		if err != nil {
			if firstErr == nil && firstMsgs == nil {
				firstErr = err
			}
			continue
		}
		if firstMsgs == nil {
			firstOut, firstMsgs = out, msgs
		}
		if strings.HasPrefix(out, base) {
			c.msgs, c.text = msgs, out
			return c.r.tok.Encode(out[len(base):]), false, nil
		}
	}
	if firstMsgs == nil {
		return nil, false, fmt.Errorf("chat: rendering the %s observation: %w", role, firstErr)
	}
	c.msgs, c.text = firstMsgs, firstOut
	c.Splits++
	return c.r.tok.Encode(firstOut), true, nil
}

// Stop returns the token ids that end an assistant turn.
func (c *Conversation) Stop() []int32 { return c.r.Stop() }

// Messages returns the conversation so far.
func (c *Conversation) Messages() []Message { return append([]Message(nil), c.msgs...) }

// Text returns the text of the context so far: what the policy was given and sampled.
func (c *Conversation) Text() string { return c.text }

// Turn is one assistant completion (as text, without the stop token) and the observation that
// answers it, for Replay.
type Turn struct {
	Completion  string
	Role        string
	Observation string
}

// Replay runs an episode of the given turns through a new Conversation, each completion
// encoded and ended with the first stop token as a sampled one would be, and returns the turns
// at which the template is not prefix-stable (Next reports a split). A run calls it at start
// with each environment's turn shapes (an expert's demonstrations, say) to say which templates
// split where.
func (r *Renderer) Replay(system, user string, turns []Turn) ([]int, error) {
	c := r.NewConversation()
	if _, _, err := c.Start(system, user); err != nil {
		return nil, err
	}
	var splits []int
	for i, t := range turns {
		comp := append(r.tok.Encode(t.Completion), r.stop[0])
		_, split, err := c.Next(comp, t.Role, t.Observation, i == len(turns)-1)
		if err != nil {
			return nil, fmt.Errorf("chat: turn %d: %w", i, err)
		}
		if split {
			splits = append(splits, i)
		}
	}
	return splits, nil
}

// LoadRenderer is Load (the template of a Hugging Face tokenizer folder, the tool_use one when
// tools are given) followed by NewRenderer.
func LoadRenderer(dir string, tok Tokenizer, opts RendererOptions) (*Renderer, error) {
	tpl, err := Load(dir, "", opts.Tools != nil)
	if err != nil {
		return nil, err
	}
	return NewRenderer(tpl, tok, opts)
}
