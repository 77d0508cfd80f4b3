package chat

import (
	"encoding/json"

	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/tool"
)

// IsChatML reports whether tpl renders the messages the agent loop writes — a system prompt or
// none, user, assistant (with a <think> block and a tool call in its text), tool, and a further
// user turn, with and without the generation prompt — exactly as tokenizer.RenderChat does, so
// that agentrl's ChatML path gives the same tokens.
func IsChatML(tpl *Template) bool {
	convs := [][]tokenizer.Message{
		{{Role: "user", Content: "u1"}},
		{{Role: "system", Content: "s"}, {Role: "user", Content: "u1"}},
		{{Role: "system", Content: "s"}, {Role: "user", Content: "u1"},
			{Role: "assistant", Content: "<think>\nr\n</think>\n\na " + tool.OpenTag + `{"name": "f", "arguments": {}}` + tool.CloseTag},
			{Role: "tool", Content: "<tool_response>t</tool_response>"},
			{Role: "assistant", Content: "b"}, {Role: "user", Content: "u2"}},
	}
	for _, conv := range convs {
		msgs := make([]Message, len(conv))
		for i, m := range conv {
			msgs[i] = Message{Role: m.Role, Content: m.Content}
		}
		for _, gen := range []bool{true, false} {
			out, err := tpl.Apply(msgs, nil, gen)
			if err != nil || out != tokenizer.RenderChat(conv, gen) {
				return false
			}
		}
	}
	return true
}

// Render renders msgs with the given tools (OpenAI's function format, key order kept; nil for
// none) in place of the renderer's own, with its variables, and the generation prompt when
// addGenerationPrompt is set.
func (r *Renderer) Render(msgs []Message, tools []json.RawMessage, addGenerationPrompt bool) (string, error) {
	ctx, err := Context(msgs, tools, addGenerationPrompt)
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
