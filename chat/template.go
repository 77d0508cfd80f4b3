package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Template is a parsed chat template with the special tokens of its tokenizer_config.json.
// Renders are safe for concurrent use (each has its own state) once SetSpecial and Now are set.
type Template struct {
	// Name is the template's name when tokenizer_config.json holds several ("default",
	// "tool_use", ...); "" for a single template.
	Name   string
	source string
	nodes  []node
	// specials holds bos_token, eos_token and the other special tokens, by name.
	specials map[string]string
	// Now is the clock strftime_now reads; nil means time.Now.
	Now func() time.Time
	// maxSteps bounds a render's work (nodes and expressions evaluated); 0 means maxSteps.
	maxSteps int
}

// Parse parses a chat template. A template that uses a tag, filter, test or syntax the engine
// does not implement is refused here with its line (a *SyntaxError).
func Parse(src string) (*Template, error) {
	nodes, err := parse(src)
	if err != nil {
		return nil, err
	}
	return &Template{source: src, nodes: nodes, specials: map[string]string{}}, nil
}

// Source returns the template text.
func (t *Template) Source() string { return t.source }

// SetSpecial sets a special token the template sees by name, e.g. SetSpecial("bos_token", "<s>").
func (t *Template) SetSpecial(name, token string) { t.specials[name] = token }

// Special returns a special token by name ("bos_token", "eos_token", ...).
func (t *Template) Special(name string) (string, bool) {
	s, ok := t.specials[name]
	return s, ok
}

// Message is one chat message as transformers' apply_chat_template receives it.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ReasoningContent is the assistant's reasoning where the template renders it separately
	// (Qwen3's <think> block); "" leaves it out.
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID links a tool message to the call it answers; Name is the tool's name.
	ToolCallID string `json:"tool_call_id,omitempty"`
	Name       string `json:"name,omitempty"`
}

// ToolCall is one call of an assistant message, in OpenAI's shape:
// {"id": ..., "type": "function", "function": {"name": ..., "arguments": {...}}}.
type ToolCall struct {
	ID   string `json:"id,omitempty"`
	Name string `json:"-"`
	// Arguments is a JSON object; its key order is kept into the render.
	Arguments json.RawMessage `json:"-"`
}

// MarshalJSON writes the OpenAI shape.
func (c ToolCall) MarshalJSON() ([]byte, error) {
	v, err := c.value()
	if err != nil {
		return nil, err
	}
	return v.MarshalJSON()
}

func (c ToolCall) value() (*Map, error) {
	fn := NewMap()
	fn.Set("name", c.Name)
	args := any(NewMap())
	if len(c.Arguments) > 0 {
		a, err := ParseJSON(c.Arguments)
		if err != nil {
			return nil, fmt.Errorf("chat: tool call %s: arguments: %w", c.Name, err)
		}
		args = a
	}
	fn.Set("arguments", args)
	m := NewMap()
	if c.ID != "" {
		m.Set("id", c.ID)
	}
	m.Set("type", "function")
	m.Set("function", fn)
	return m, nil
}

func (m Message) value() (*Map, error) {
	v := NewMap()
	v.Set("role", m.Role)
	v.Set("content", m.Content)
	if m.ReasoningContent != "" {
		v.Set("reasoning_content", m.ReasoningContent)
	}
	if len(m.ToolCalls) > 0 {
		l := make([]any, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			cv, err := c.value()
			if err != nil {
				return nil, err
			}
			l[i] = cv
		}
		v.Set("tool_calls", l)
	}
	if m.ToolCallID != "" {
		v.Set("tool_call_id", m.ToolCallID)
	}
	if m.Name != "" {
		v.Set("name", m.Name)
	}
	return v, nil
}

// Context builds the variables apply_chat_template gives a template: messages, tools (JSON
// schemas in OpenAI's function format, their key order kept; nil for none) and
// add_generation_prompt. Render adds the special tokens.
func Context(msgs []Message, tools []json.RawMessage, addGenerationPrompt bool) (*Map, error) {
	ctx := NewMap()
	l := make([]any, len(msgs))
	for i, m := range msgs {
		v, err := m.value()
		if err != nil {
			return nil, err
		}
		l[i] = v
	}
	ctx.Set("messages", l)
	if tools != nil {
		tl := make([]any, len(tools))
		for i, t := range tools {
			v, err := ParseJSON(t)
			if err != nil {
				return nil, fmt.Errorf("chat: tool %d: %w", i, err)
			}
			tl[i] = v
		}
		ctx.Set("tools", tl)
	}
	ctx.Set("add_generation_prompt", addGenerationPrompt)
	return ctx, nil
}

// Apply renders msgs as transformers' apply_chat_template(msgs, tools=tools,
// add_generation_prompt=addGenerationPrompt, tokenize=False) does.
func (t *Template) Apply(msgs []Message, tools []json.RawMessage, addGenerationPrompt bool) (string, error) {
	ctx, err := Context(msgs, tools, addGenerationPrompt)
	if err != nil {
		return "", err
	}
	return t.Render(ctx)
}

// Render renders the template with the variables of ctx (see Context) over the special tokens
// and the helpers transformers defines (raise_exception, strftime_now).
func (t *Template) Render(ctx *Map) (string, error) {
	now := t.Now
	if now == nil {
		now = time.Now
	}
	root := &scope{vars: globals(now)}
	for k, v := range t.specials {
		root.vars[k] = v
	}
	if ctx != nil {
		for _, k := range ctx.keys {
			root.vars[k] = ctx.vals[k]
		}
	}
	st := &state{root: root, maxSteps: t.maxSteps}
	if st.maxSteps <= 0 {
		st.maxSteps = maxSteps
	}
	top := &scope{vars: map[string]any{}, parent: root}
	st.root = top
	err := st.exec(t.nodes, top)
	if err == errBreak || err == errContinue {
		err = errors.New("chat template: break or continue outside a loop")
	}
	if err != nil {
		return "", err
	}
	return st.out.String(), nil
}

// Load reads the chat template of a Hugging Face tokenizer folder: chat_template.jinja when
// present, else tokenizer_config.json's chat_template (a string, or a list of named templates:
// name picks one; "" picks "tool_use" when withTools and the list has it, else "default", as
// transformers does), with the special tokens of tokenizer_config.json.
func Load(dir, name string, withTools bool) (*Template, error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var cfg map[string]json.RawMessage
	if err == nil {
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, fmt.Errorf("chat: %s: %w", cfgPath, err)
		}
	}
	var src string
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		src = string(b)
		if name != "" {
			return nil, fmt.Errorf("chat: %s has a single chat_template.jinja; no template named %q", dir, name)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	} else {
		if cfg == nil {
			return nil, fmt.Errorf("chat: %s has neither tokenizer_config.json nor chat_template.jinja", dir)
		}
		if src, name, err = pickTemplate(cfg["chat_template"], name, withTools); err != nil {
			return nil, fmt.Errorf("chat: %s: %w", cfgPath, err)
		}
	}
	t, err := Parse(src)
	if err != nil {
		return nil, fmt.Errorf("chat: %s: %w", dir, err)
	}
	t.Name = name
	for _, k := range []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"} {
		tok, ok, err := specialToken(cfg[k])
		if err != nil {
			return nil, fmt.Errorf("chat: %s: %s: %w", cfgPath, k, err)
		}
		if ok {
			t.specials[k] = tok
		}
	}
	return t, nil
}

// pickTemplate chooses among tokenizer_config.json's templates.
func pickTemplate(raw json.RawMessage, name string, withTools bool) (string, string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", "", errors.New("no chat_template")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if name != "" {
			return "", "", fmt.Errorf("a single chat_template; no template named %q", name)
		}
		return s, "", nil
	}
	var list []struct {
		Name     *string `json:"name"`
		Template *string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", "", errors.New("chat_template must be a string or a list of {name, template}")
	}
	byName := map[string]string{}
	var names []string
	for i, e := range list {
		if e.Name == nil || e.Template == nil {
			return "", "", fmt.Errorf("chat_template entry %d needs a name and a template", i)
		}
		byName[*e.Name] = *e.Template
		names = append(names, *e.Name)
	}
	switch {
	case name != "":
	case withTools && byName["tool_use"] != "":
		name = "tool_use"
	default:
		name = "default"
	}
	src, ok := byName[name]
	if !ok {
		return "", "", fmt.Errorf("no chat template named %q (have %s)", name, strings.Join(names, ", "))
	}
	return src, name, nil
}

// specialToken reads a special token given as a string or as an added-token object.
func specialToken(raw json.RawMessage) (string, bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", false, errors.New("must be a string or an object with content")
	}
	return *obj.Content, true, nil
}

// LoadFile reads and parses a chat template file (a .jinja file), without special tokens.
func LoadFile(path string) (*Template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("chat: %s: %w", path, err)
	}
	return t, nil
}
