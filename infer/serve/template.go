package serve

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentrl/agentrl/chat"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/tool"
)

// A checkpoint whose tokenizer folder has a chat template of its own that is not agentrl's
// ChatML (a Hugging Face model's) is served with that template: the chat routes render the
// request's messages and tools with it, parse tool calls in its format and stop at its
// end-of-turn tokens. A ChatML template, or none, keeps the ChatML path (renderPrompt) and its
// exact tokens, the rule a run's chat template auto follows.

// chatTemplate is the template a server renders chats with.
type chatTemplate struct {
	plain *chat.Renderer // without tools
	tools *chat.Renderer // with tools (the folder's tool_use template where it has one)
	desc  string
}

// loadChatTemplate resolves tok's own chat template: nil when it has none or it renders as
// agentrl's ChatML and tok has the ChatML tokens.
func loadChatTemplate(tok *tokenizer.Tokenizer) (*chatTemplate, error) {
	dir, err := os.MkdirTemp("", "agentrl-serve-chat-")
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if files := tok.SourceFiles(); files == nil {
		if err := tok.Save(dir); err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
	} else {
		for _, name := range []string{tokenizer.ConfigFile, "chat_template.jinja"} {
			if b, ok := files[name]; ok {
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
					return nil, fmt.Errorf("serve: %w", err)
				}
			}
		}
	}
	tpl, err := chat.Load(dir, "", false)
	if err != nil {
		return nil, nil // no template of its own: agentrl's ChatML, as before templates were read
	}
	if chat.IsChatML(tpl) && tok.ChatML() == nil {
		return nil, nil
	}
	ct := &chatTemplate{}
	if ct.plain, err = chat.NewRenderer(tpl, tok, chat.RendererOptions{}); err != nil {
		return nil, fmt.Errorf("serve: the tokenizer's chat template: %w", err)
	}
	ct.tools = ct.plain
	if withTools, err := chat.Load(dir, "", true); err == nil && withTools.Source() != tpl.Source() {
		if ct.tools, err = chat.NewRenderer(withTools, tok, chat.RendererOptions{Format: ct.plain.Format()}); err != nil {
			return nil, fmt.Errorf("serve: the tokenizer's tool_use chat template: %w", err)
		}
	}
	format := "none"
	if f := ct.plain.Format(); f != nil {
		format = f.Name()
	}
	ct.desc = "the checkpoint's own chat template (tool calls: " + format + ")"
	return ct, nil
}

// format is the tool-call format completions are parsed with; Hermes where the template has
// none of its own.
func (ct *chatTemplate) format() tool.CallFormat {
	if f := ct.plain.Format(); f != nil {
		return f
	}
	return tool.Hermes
}

// templateMessages turns a chat request's messages into the template's messages, each user and
// tool content replaced by a sentinel (sentinel(i) for contents[i]); tools are the declared
// tools in OpenAI's function format, nil when none are given to the model.
func templateMessages(req *chatRequest, ts *toolSet, sentinel func(int) string) (msgs []chat.Message, contents []string, tools []json.RawMessage, err error) {
	callNames := map[string]string{}
	for i, m := range req.Messages {
		param := fmt.Sprintf("messages[%d]", i)
		text, err := contentText(m.Content, param+".content")
		if err != nil {
			return nil, nil, nil, err
		}
		switch m.Role {
		case "system", "developer":
			msgs = append(msgs, chat.Message{Role: "system", Content: text})
		case "user":
			msgs = append(msgs, chat.Message{Role: "user", Content: sentinel(len(contents))})
			contents = append(contents, text)
		case "assistant":
			am := chat.Message{Role: "assistant", Content: text}
			for k, tc := range m.ToolCalls {
				cp := fmt.Sprintf("%s.tool_calls[%d]", param, k)
				if _, err := renderCall(tc, cp); err != nil {
					return nil, nil, nil, err
				}
				args := strings.TrimSpace(tc.Function.Arguments)
				if args == "" {
					args = "{}"
				}
				am.ToolCalls = append(am.ToolCalls, chat.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: json.RawMessage(args)})
				if tc.ID != "" {
					callNames[tc.ID] = tc.Function.Name
				}
			}
			msgs = append(msgs, am)
		case "tool":
			name := m.Name
			if name == "" {
				name = callNames[m.ToolCallID]
			}
			msgs = append(msgs, chat.Message{Role: "tool", Content: sentinel(len(contents)), ToolCallID: m.ToolCallID, Name: name})
			contents = append(contents, text)
		default:
			return nil, nil, nil, badRequest(param+".role", "unknown role %q (system, developer, user, assistant, tool)", m.Role)
		}
	}
	for _, t := range ts.tools {
		name, _ := json.Marshal(t.name)
		var b bytes.Buffer
		b.WriteString(`{"type":"function","function":{"name":` + string(name))
		if t.desc != "" {
			desc, _ := json.Marshal(t.desc)
			b.WriteString(`,"description":` + string(desc))
		}
		b.WriteString(`,"parameters":` + string(t.schema) + `}}`)
		tools = append(tools, json.RawMessage(b.Bytes()))
	}
	return msgs, contents, tools, nil
}

// renderTemplate renders a chat request with the server's template and the generation prompt.
// It returns the text and the byte ranges that the client's user and tool content fill (as the
// template wrote it: as given, trimmed, or as a JSON string's body), which encodeChat encodes as
// plain text. The content is found by rendering with a random sentinel in place of each one and
// matching that render against the real one.
func (s *Server) renderTemplate(req *chatRequest, ts *toolSet) (string, [][2]int, error) {
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	// Letters and digits only, so that no filter (trim, tojson, escaping) changes a sentinel.
	prefix := "AgentrlContent" + hex.EncodeToString(nonce[:]) + "N"
	sentinel := func(i int) string { return prefix + strconv.Itoa(i) + "E" }
	msgs, contents, tools, err := templateMessages(req, ts, sentinel)
	if err != nil {
		return "", nil, err
	}
	rd := s.chatTpl.plain
	if tools != nil {
		rd = s.chatTpl.tools
	}
	marked, err := rd.Render(msgs, tools, true)
	if err != nil {
		return "", nil, unsupported("messages", "the model's chat template cannot render these messages: %v", err)
	}
	real := slicesClone(msgs)
	k := 0
	for i := range real {
		if real[i].Role == "user" || real[i].Role == "tool" {
			real[i].Content = contents[k]
			k++
		}
	}
	text, err := rd.Render(real, tools, true)
	if err != nil {
		return "", nil, unsupported("messages", "the model's chat template cannot render these messages: %v", err)
	}
	if s.opts.ChatSpecialTokens {
		return text, nil, nil
	}
	var lits [][2]int
	pos := 0 // in text
	for {
		i := strings.Index(marked, prefix)
		if i < 0 {
			if text[pos:] != marked {
				return "", nil, errPlacement
			}
			return text, lits, nil
		}
		if !strings.HasPrefix(text[pos:], marked[:i]) {
			return "", nil, errPlacement
		}
		pos += i
		marked = marked[i+len(prefix):]
		end := strings.IndexByte(marked, 'E')
		n, err := strconv.Atoi(marked[:max(end, 0)])
		if end < 0 || err != nil || n < 0 || n >= len(contents) {
			return "", nil, errPlacement
		}
		marked = marked[end+1:]
		c, ok := placeContent(text[pos:], contents[n])
		if !ok {
			return "", nil, errPlacement
		}
		if c > 0 {
			lits = append(lits, [2]int{pos, pos + c})
		}
		pos += c
	}
}

// errPlacement refuses a conversation whose content the template changes in a way the safe
// encoding cannot follow.
var errPlacement = unsupported("messages", "the model's chat template rewrites message content in a way the safe chat encoding cannot place; start the server with --chat-special-tokens to encode the rendered text as a whole")

// placeContent returns how many bytes at the start of text are content as the template wrote it:
// as given, trimmed of surrounding whitespace, or as the body of a JSON string.
func placeContent(text, content string) (int, bool) {
	for _, c := range []string{content, strings.TrimSpace(content), jsonBody(content), jsonBody(strings.TrimSpace(content))} {
		if strings.HasPrefix(text, c) {
			return len(c), true
		}
	}
	return 0, false
}

// jsonBody is s as a JSON string without its quotes, as Python's json.dumps writes it with
// ensure_ascii off (tojson).
func jsonBody(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}

func slicesClone(m []chat.Message) []chat.Message { return append([]chat.Message(nil), m...) }
