package pipeline

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/agentrl/agentrl/chat"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/tool"
)

// ChatRendering is how a run renders its episodes' chat: agentrl's ChatML through the tokenizer
// (Renderer nil, NewConversation nil: the loop's default path) or a model's own chat template.
type ChatRendering struct {
	Renderer *chat.Renderer
	// NewConversation is the Conversation factory of Renderer (nil with it).
	NewConversation func() rollout.Conversation
	// Describe says what was chosen, for the run's output.
	Describe string
}

// NewChatRendering resolves the chat block cc for the policy tokenizer tok, whose files are in
// dir (a run's tokenizer folder or a checkpoint): template auto takes the folder's own chat
// template (chat_template.jinja, or tokenizer_config.json's) unless it renders the loop's
// messages exactly as agentrl's ChatML does and the tokenizer has the ChatML tokens, in which
// case the loop's ChatML path is kept (bit-identical to runs without a chat block); chatml keeps
// it always; a name picks one of tokenizer_config.json's named templates; a path reads a .jinja
// file (with the folder's special tokens). The template's tools variable stays empty: the
// environments describe their tools in the system prompt.
func NewChatRendering(cc config.ChatConfig, dir string, tok *tokenizer.Tokenizer) (ChatRendering, error) {
	chatML := func(why string) (ChatRendering, error) {
		if err := tok.ChatML(); err != nil {
			return ChatRendering{}, fmt.Errorf("chat: %s, but %w; set chat.template to the model's template", why, err)
		}
		return ChatRendering{Describe: "chat: agentrl's ChatML (" + why + ")"}, nil
	}
	var tpl *chat.Template
	var err error
	var from string
	switch t := cc.Template; {
	case t == config.ChatChatML:
		return chatML("chat.template chatml")
	case t == "" || t == config.ChatAuto:
		tpl, err = chat.Load(dir, "", false)
		if err != nil {
			if tok.ChatML() == nil {
				return chatML(fmt.Sprintf("the tokenizer folder has no chat template of its own: %v", err))
			}
			return ChatRendering{}, fmt.Errorf("chat: template auto: %w", err)
		}
		if isChatML(tpl) && tok.ChatML() == nil {
			return chatML("the tokenizer's template is ChatML")
		}
		from = "the tokenizer's own template"
	case config.TemplateIsPath(t):
		if tpl, err = chat.LoadFile(t); err != nil {
			return ChatRendering{}, err
		}
		// The folder's special tokens (bos_token, eos_token, …) where it has a config.
		if own, err := chat.Load(dir, "", false); err == nil {
			for _, k := range specialNames {
				if v, ok := own.Special(k); ok {
					tpl.SetSpecial(k, v)
				}
			}
		}
		from = t
	default:
		if tpl, err = chat.Load(dir, t, false); err != nil {
			return ChatRendering{}, err
		}
		from = "the tokenizer's template " + t
	}
	opts := chat.RendererOptions{}
	if cc.ToolFormat != "" && cc.ToolFormat != config.ChatAuto {
		if opts.Format, err = chat.ToolFormat(cc.ToolFormat); err != nil {
			return ChatRendering{}, err
		}
	}
	if opts.Vars, err = cc.VarsJSON(); err != nil {
		return ChatRendering{}, err
	}
	rd, err := chat.NewRenderer(tpl, tok, opts)
	if err != nil {
		return ChatRendering{}, fmt.Errorf("chat: %s: %w", from, err)
	}
	format := "none (the assistant's text is kept as written)"
	if f := rd.Format(); f != nil {
		format = f.Name()
	}
	desc := fmt.Sprintf("chat: %s (tool calls: %s", from, format)
	if len(opts.Vars) > 0 {
		desc += ", variables " + string(opts.Vars)
	}
	desc += ")"
	return ChatRendering{
		Renderer:        rd,
		NewConversation: func() rollout.Conversation { return rd.NewConversation() },
		Describe:        desc,
	}, nil
}

// specialNames are the special tokens a template may read by name.
var specialNames = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// isChatML reports whether tpl renders the messages the agent loop writes — a system prompt or
// none, user, assistant (with a <think> block and a tool call in its text), tool, and a further
// user turn, with and without the generation prompt — exactly as tokenizer.RenderChat does, so
// that the loop's ChatML path gives the same tokens.
func isChatML(tpl *chat.Template) bool {
	convs := [][]tokenizer.Message{
		{{Role: "user", Content: "u1"}},
		{{Role: "system", Content: "s"}, {Role: "user", Content: "u1"}},
		{{Role: "system", Content: "s"}, {Role: "user", Content: "u1"},
			{Role: "assistant", Content: "<think>\nr\n</think>\n\na " + tool.OpenTag + `{"name": "f", "arguments": {}}` + tool.CloseTag},
			{Role: "tool", Content: "<tool_response>t</tool_response>"},
			{Role: "assistant", Content: "b"}, {Role: "user", Content: "u2"}},
	}
	for _, conv := range convs {
		msgs := make([]chat.Message, len(conv))
		for i, m := range conv {
			msgs[i] = chat.Message{Role: m.Role, Content: m.Content}
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

// setupChat resolves the run's chat block once its tokenizer is known (fresh, from init or
// from a checkpoint) and sets Options.NewConversation, unless the caller set one. It refuses a
// template whose tool-call format is not Hermes for environments that have tools: their tool
// wrapper parses and answers Hermes calls.
func (r *Run) setupChat(ctx context.Context, dir string) error {
	if r.opts.NewConversation != nil {
		return nil
	}
	cr, err := NewChatRendering(r.Cfg.ChatSettings(), dir, r.tok)
	if err != nil {
		return err
	}
	r.chat = cr
	if cr.Renderer == nil {
		if r.Cfg.Chat != nil {
			r.printf("%s\n", cr.Describe)
		}
		return nil
	}
	r.printf("%s\n", cr.Describe)
	if f := cr.Renderer.Format(); f != nil && f != tool.Hermes {
		for _, name := range r.Cfg.EnvNames() {
			if err := r.checkNoTools(ctx, name, f); err != nil {
				return err
			}
		}
	}
	r.opts.NewConversation = cr.NewConversation
	return nil
}

func (r *Run) checkNoTools(_ context.Context, name string, f tool.CallFormat) error {
	e, err := r.envFactory()(name)
	if err != nil {
		return fmt.Errorf("chat: env %s: %w", name, err)
	}
	if c, ok := e.(env.Closer); ok {
		defer func() { _ = c.Close() }()
	}
	if len(env.ToolsOf(e)) > 0 {
		return fmt.Errorf("chat: the template's tool-call format is %s, but env %s has tools, whose wrapper parses and answers calls in the hermes format; set chat.tool_format hermes if the model writes <tool_call> blocks, or train it on an environment without tools", f.Name(), name)
	}
	return nil
}

// tokenizerDir is the run's tokenizer folder (saved when the run starts).
func (r *Run) tokenizerDir() string { return filepath.Join(r.Dir, "tokenizer") }

// encodePrompt is the tokens of an episode's opening (system prompt, first observation,
// generation prompt) as the run renders them.
func (r *Run) encodePrompt(system, user string) ([]int32, error) {
	if r.opts.NewConversation == nil {
		return r.tok.EncodePrompt(system, user), nil
	}
	toks, _, err := r.opts.NewConversation().Start(system, user)
	return toks, err
}

// demoChat is how a supervised phase renders its demonstrations: through the run's chat
// template (its Conversation, and its LastMessage for the expert to read its observations), or
// agentrl's ChatML (nil, nil) when the run has no template of its own, including when a caller
// set Options.NewConversation, which the expert could not read.
func (r *Run) demoChat() (func() rollout.Conversation, func(string) (string, bool)) {
	if r.chat.Renderer == nil {
		return nil, nil
	}
	return r.chat.NewConversation, r.chat.Renderer.LastMessage
}

// workerSettings are what a learner publishes for its workers (dist.Conn.PutRolloutSettings):
// the rollout settings, and the chat block when the run has one (omitted otherwise, so the
// settings of a run without one are the rollout settings alone). A worker resolves the chat
// block against the tokenizer files of the checkpoint it fetches, as the learner did.
type workerSettings struct {
	rollout.Config
	Chat *config.ChatConfig `json:"chat,omitempty"`
}
