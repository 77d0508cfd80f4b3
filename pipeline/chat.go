package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
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

// NewChatRendering resolves the chat block cc for the policy tokenizer tok, read from the files
// it was loaded from (a Hugging Face tokenizer's, byte for byte) or that it writes (agentrl's):
// template auto takes the folder's own chat
// template (chat_template.jinja, or tokenizer_config.json's) unless it renders the loop's
// messages exactly as agentrl's ChatML does and the tokenizer has the ChatML tokens, in which
// case the loop's ChatML path is kept (bit-identical to runs without a chat block); chatml keeps
// it always; a name picks one of tokenizer_config.json's named templates; a path reads a .jinja
// file (with the folder's special tokens). tools (OpenAI's function format) become the template's
// tools variable; nil leaves it out, as for Hermes-format models, whose environments describe
// their tools in the system prompt.
func NewChatRendering(cc config.ChatConfig, tok *tokenizer.Tokenizer, tools []json.RawMessage) (ChatRendering, error) {
	dir, err := os.MkdirTemp("", "agentrl-chat-")
	if err != nil {
		return ChatRendering{}, fmt.Errorf("chat: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := writeChatFiles(dir, tok); err != nil {
		return ChatRendering{}, err
	}
	chatML := func(why string) (ChatRendering, error) {
		if err := tok.ChatML(); err != nil {
			return ChatRendering{}, fmt.Errorf("chat: %s, but %w; set chat.template to the model's template", why, err)
		}
		return ChatRendering{Describe: "chat: agentrl's ChatML (" + why + ")"}, nil
	}
	var tpl *chat.Template
	var from string
	switch t := cc.Template; {
	case t == config.ChatChatML:
		return chatML("chat.template chatml")
	case t == "" || t == config.ChatAuto:
		tpl, err = chat.Load(dir, "", tools != nil)
		if err != nil {
			if tok.ChatML() == nil {
				return chatML(fmt.Sprintf("the tokenizer folder has no chat template of its own: %v", err))
			}
			return ChatRendering{}, fmt.Errorf("chat: template auto: %w", err)
		}
		if chat.IsChatML(tpl) && tok.ChatML() == nil {
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
		if tpl, err = chat.Load(dir, t, tools != nil); err != nil {
			return ChatRendering{}, err
		}
		from = "the tokenizer's template " + t
	}
	opts := chat.RendererOptions{Tools: tools}
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
	if len(tools) > 0 {
		desc += fmt.Sprintf(", %d tools in the template", len(tools))
	}
	desc += ")"
	return ChatRendering{
		Renderer:        rd,
		NewConversation: func() rollout.Conversation { return rd.NewConversation() },
		Describe:        desc,
	}, nil
}

// writeChatFiles writes the files of tok that hold its chat template and special tokens into
// dir: a Hugging Face tokenizer's tokenizer_config.json and chat_template.jinja as it was loaded
// from them, or the files an agentrl tokenizer saves.
func writeChatFiles(dir string, tok *tokenizer.Tokenizer) error {
	files := tok.SourceFiles()
	if files == nil {
		return tok.Save(dir)
	}
	for _, name := range []string{tokenizer.ConfigFile, "chat_template.jinja"} {
		if b, ok := files[name]; ok {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				return fmt.Errorf("chat: %w", err)
			}
		}
	}
	return nil
}

// specialNames are the special tokens a template may read by name.
var specialNames = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// setupChat resolves the run's chat block once its tokenizer is known (fresh, from init or
// from a checkpoint) and sets Options.NewConversation, unless the caller set one. It refuses a
// template whose tool-call format is not Hermes for environments that have tools: their tool
// wrapper parses and answers Hermes calls.
func (r *Run) setupChat() error {
	if r.opts.NewConversation != nil {
		return nil
	}
	cc := r.Cfg.ChatSettings()
	cr, err := NewChatRendering(cc, r.tok, nil)
	if err != nil {
		return err
	}
	if cr.Renderer != nil {
		if f := cr.Renderer.Format(); f != nil {
			// The template renders tool calls: it shows the tools, and the environments' tool
			// wrappers parse the model's format and answer with bare results for the template
			// to wrap as tool messages.
			tools, err := r.envTools()
			if err != nil {
				return err
			}
			if tools != nil {
				if cr, err = NewChatRendering(cc, r.tok, tools); err != nil {
					return err
				}
				r.toolFormat, r.chatTools = f, tools
			}
		}
	}
	r.chat = cr
	if cr.Renderer == nil {
		if r.Cfg.Chat != nil {
			r.printf("%s\n", cr.Describe)
		}
		return nil
	}
	r.printf("%s\n", cr.Describe)
	r.opts.NewConversation = cr.NewConversation
	return nil
}

// envTools returns the tool schemas the run's environments share, for the template's tools
// variable (nil when none has tools). Environments with different tools (or some with and some
// without) are refused: one chat rendering serves the whole run.
func (r *Run) envTools() ([]json.RawMessage, error) {
	var tools []json.RawMessage
	var first string
	for i, name := range r.Cfg.EnvNames() {
		newEnv := r.opts.Envs.New
		if f := r.mcp.Factory(); f != nil {
			newEnv = f
		}
		e, err := newEnv(name)
		if err != nil {
			return nil, fmt.Errorf("chat: env %s: %w", name, err)
		}
		schemas, err := env.ToolSchemas(env.ToolsOf(e))
		if c, ok := e.(env.Closer); ok {
			_ = c.Close()
		}
		if err != nil {
			return nil, err
		}
		if i == 0 {
			tools, first = schemas, name
			continue
		}
		a, _ := json.Marshal(tools)
		b, _ := json.Marshal(schemas)
		if !bytes.Equal(a, b) {
			return nil, fmt.Errorf("chat: envs %s and %s have different tools; a template that is given the tools (a tool-call format other than hermes) renders one tool list per run", first, name)
		}
	}
	if len(tools) == 0 {
		return nil, nil
	}
	return tools, nil
}

// withToolFormat makes e's tool wrapper speak the template's tool-call format when the run's
// template is given the tools (env.SetToolFormat); e is unchanged otherwise.
func (r *Run) withToolFormat(e env.Env) env.Env {
	if r.toolFormat != nil && e != nil {
		env.SetToolFormat(e, r.toolFormat)
	}
	return e
}

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
// settings of a run without one are the rollout settings alone), and the tools the template is
// given (Tools) with the format the environments' tool wrappers then speak (ToolFormat). A worker
// resolves the chat block against the tokenizer of the checkpoint it fetches, as the
// learner did.
type workerSettings struct {
	rollout.Config
	Chat       *config.ChatConfig `json:"chat,omitempty"`
	Tools      []json.RawMessage  `json:"chat_tools,omitempty"`
	ToolFormat string             `json:"chat_tool_format,omitempty"`
}

// workerSettings returns what the learner publishes for its workers.
func (r *Run) workerSettings() workerSettings {
	ws := workerSettings{Config: r.Cfg.Rollout.Config, Chat: r.Cfg.Chat, Tools: r.chatTools}
	if r.toolFormat != nil {
		ws.ToolFormat = r.toolFormat.Name()
	}
	return ws
}

// workerChat is a worker's chat rendering and the format its environments' tool wrappers speak
// (nil: their own), from what the learner published.
func workerChat(ws workerSettings, tok *tokenizer.Tokenizer) (ChatRendering, tool.CallFormat, error) {
	cfg := config.Config{Chat: ws.Chat}
	cr, err := NewChatRendering(cfg.ChatSettings(), tok, ws.Tools)
	if err != nil || ws.ToolFormat == "" {
		return cr, nil, err
	}
	f, err := tool.CallFormatByName(ws.ToolFormat)
	return cr, f, err
}

// judgeChat is the chat rendering of a judge model with tokenizer tok: its own
// template unless it is ChatML (nil).
func judgeChat(tok *tokenizer.Tokenizer) (func() rollout.Conversation, error) {
	cr, err := NewChatRendering(config.ChatConfig{Template: config.ChatAuto, ToolFormat: config.ChatAuto}, tok, nil)
	if err != nil {
		return nil, fmt.Errorf("judge: %w", err)
	}
	return cr.NewConversation, nil
}

// prompt is the judge's chat prompt for a rubric (the user message) and its stop tokens.
func (g *textGen) prompt(rubric string) (ids, stop []int32, err error) {
	if g.conv == nil {
		return g.tok.EncodePrompt("", rubric), []int32{g.tok.EndOfTurn()}, nil
	}
	c := g.conv()
	ids, _, err = c.Start("", rubric)
	return ids, c.Stop(), err
}

// CheckpointChat is the chat rendering for evaluating a checkpoint (its tokenizer tok) on one environment
// (agentrl eval): the checkpoint's own template unless it is ChatML, with the environment's tools
// in the template and its tool wrapper speaking the template's format when the template renders
// tool calls.
// It returns the Conversation factory (nil: ChatML), the environment factory to use, and a line
// saying what was chosen ("" for ChatML).
func CheckpointChat(tok *tokenizer.Tokenizer, envName string, newEnv rollout.EnvFactory) (func() rollout.Conversation, rollout.EnvFactory, string, error) {
	cc := config.ChatConfig{Template: config.ChatAuto, ToolFormat: config.ChatAuto}
	cr, err := NewChatRendering(cc, tok, nil)
	if err != nil || cr.Renderer == nil {
		return nil, newEnv, "", err
	}
	f := cr.Renderer.Format()
	if f == nil {
		return cr.NewConversation, newEnv, cr.Describe, nil
	}
	e, err := newEnv(envName)
	if err != nil {
		return nil, nil, "", err
	}
	tools, err := env.ToolSchemas(env.ToolsOf(e))
	if c, ok := e.(env.Closer); ok {
		_ = c.Close()
	}
	if err != nil || len(tools) == 0 {
		return cr.NewConversation, newEnv, cr.Describe, err
	}
	if cr, err = NewChatRendering(cc, tok, tools); err != nil {
		return nil, nil, "", err
	}
	return cr.NewConversation, func(name string) (env.Env, error) {
		e, err := newEnv(name)
		if e != nil {
			env.SetToolFormat(e, f)
		}
		return e, err
	}, cr.Describe, nil
}
