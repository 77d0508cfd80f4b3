package config

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/agentrl/agentrl/tool"
)

// ChatConfig chooses how the run renders its episodes' chat (the `chat` block; absent means
// template auto and tool_format auto).
type ChatConfig struct {
	// Template is "auto" (the policy tokenizer's own chat template when it is not agentrl's
	// ChatML, else agentrl's ChatML), "chatml" (agentrl's ChatML through the tokenizer, whatever
	// template the tokenizer folder holds), the name of one of tokenizer_config.json's named
	// templates ("default", "tool_use", …), or the path of a .jinja file.
	Template string `yaml:"template" json:"template"`
	// ToolFormat is the tool-call format of the model's completions: "auto" (what the template
	// writes for a call, chat.DetectToolFormat) or one of tool.CallFormatNames.
	ToolFormat string `yaml:"tool_format" json:"tool_format"`
	// Vars are further template variables, as apply_chat_template's keyword arguments
	// (enable_thinking: false); they may not replace messages, tools or add_generation_prompt.
	Vars map[string]any `yaml:"vars,omitempty" json:"vars,omitempty"`
}

// Chat template choices other than a name or a path.
const (
	ChatAuto   = "auto"
	ChatChatML = "chatml"
)

// ChatSettings returns the run's chat block with its defaults: template and tool_format auto
// where absent or empty.
func (c *Config) ChatSettings() ChatConfig {
	var cc ChatConfig
	if c.Chat != nil {
		cc = *c.Chat
	}
	if cc.Template == "" {
		cc.Template = ChatAuto
	}
	if cc.ToolFormat == "" {
		cc.ToolFormat = ChatAuto
	}
	return cc
}

// TemplateIsPath reports whether template names a .jinja file rather than one of the tokenizer
// folder's named templates: it contains a path separator or ends in ".jinja".
func TemplateIsPath(template string) bool {
	return strings.ContainsAny(template, `/\`) || strings.HasSuffix(template, ".jinja")
}

// VarsJSON returns Vars as a JSON object (keys sorted), or nil when there are none.
func (cc ChatConfig) VarsJSON() (json.RawMessage, error) {
	if len(cc.Vars) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(cc.Vars)
	if err != nil {
		return nil, fmt.Errorf("chat.vars: %w", err)
	}
	return b, nil
}

// validate checks the chat block: the template is auto, chatml, a name or an existing .jinja
// file; the tool format is auto or a known one (empty means auto); chatml takes no tool format and no variables
// (agentrl's ChatML has none to set).
func (cc ChatConfig) validate() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("chat: "+format, a...)) }
	switch t := cc.Template; {
	case t == "" || t == ChatAuto || t == ChatChatML:
	case TemplateIsPath(t):
		if st, err := os.Stat(t); err != nil {
			bad("template: %v", err)
		} else if st.IsDir() {
			bad("template %s is a directory; name a .jinja file", t)
		}
	}
	formats := tool.CallFormatNames()
	switch f := cc.ToolFormat; {
	case f == "" || f == ChatAuto:
	case !slices.Contains(formats, f):
		bad("tool_format %q must be auto or one of %s", f, strings.Join(formats, ", "))
	}
	if cc.Template == ChatChatML {
		if cc.ToolFormat != "" && cc.ToolFormat != ChatAuto && cc.ToolFormat != "hermes" {
			bad("tool_format %s does nothing with template chatml (agentrl's ChatML calls tools in the hermes format)", cc.ToolFormat)
		}
		if len(cc.Vars) > 0 {
			bad("vars do nothing with template chatml (agentrl's ChatML has no variables)")
		}
	}
	for k := range cc.Vars {
		if k == "messages" || k == "tools" || k == "add_generation_prompt" {
			bad("vars: %q is set by the conversation", k)
		}
	}
	if _, err := cc.VarsJSON(); err != nil {
		errs = append(errs, err)
	}
	return errs
}
