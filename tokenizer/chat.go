package tokenizer

import "strings"

// chatMLTemplate is the standard ChatML Jinja template saved in tokenizer_config.json. Each
// message renders as "<|im_start|>{role}\n{content}<|im_end|>\n"; add_generation_prompt appends
// "<|im_start|>assistant\n". RenderChat implements exactly this template, and the Encode* pieces
// below are cut from its output.
const chatMLTemplate = `{%- for message in messages %}
    {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}`

// Message is one chat message. Roles used by the agent loop are system, user, assistant and tool.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// RenderChat renders messages as the ChatML template does.
func RenderChat(msgs []Message, addGenerationPrompt bool) string {
	var b strings.Builder
	for _, m := range msgs {
		writeMessage(&b, m.Role, m.Content)
	}
	if addGenerationPrompt {
		writeGenerationPrompt(&b)
	}
	return b.String()
}

func writeMessage(b *strings.Builder, role, content string) {
	b.WriteString(ImStart)
	b.WriteString(role)
	b.WriteByte('\n')
	b.WriteString(content)
	b.WriteString(ImEnd)
	b.WriteByte('\n')
}

func writeGenerationPrompt(b *strings.Builder) {
	b.WriteString(ImStart)
	b.WriteString("assistant\n")
}

// EncodeChat encodes RenderChat(msgs, addGenerationPrompt); nil without the ChatML tokens (see
// ChatML).
func (t *Tokenizer) EncodeChat(msgs []Message, addGenerationPrompt bool) []int32 {
	if t.imEnd < 0 {
		return nil
	}
	return t.Encode(RenderChat(msgs, addGenerationPrompt))
}

// EndOfTurn is the id of ImEnd, the token that ends every message and so every completion; -1
// without the ChatML tokens (see ChatML).
func (t *Tokenizer) EndOfTurn() int32 { return t.imEnd }

// EncodePrompt encodes the start of an episode: an optional system message (omitted when system
// is ""), the user message, and the generation prompt that opens the assistant's turn.
//
// A trajectory is EncodePrompt, then each completion (ending with EndOfTurn), then
// EncodeObservation after each completion but the last observation, which uses EncodeFinal. Its
// decoded text is exactly what the chat template renders for the same conversation. Its tokens
// equal encoding that text in one piece except where a completion starts with two or more
// whitespace characters, which one-piece encoding would join with the preceding newline; the
// trajectory keeps the tokens actually sampled.
//
// As in Hugging Face's encode, added-token strings inside system or user (or observation)
// content become those tokens.
//
// Without the ChatML tokens (see ChatML) it, EncodeObservation and EncodeFinal return nil.
func (t *Tokenizer) EncodePrompt(system, user string) []int32 {
	if t.imEnd < 0 {
		return nil
	}
	var b strings.Builder
	if system != "" {
		writeMessage(&b, "system", system)
	}
	writeMessage(&b, "user", user)
	writeGenerationPrompt(&b)
	return t.Encode(b.String())
}

// EncodeObservation encodes what follows an assistant completion that ended with EndOfTurn: the
// newline the template puts after ImEnd, the observation message from role (usually "tool" or
// "user"), and the generation prompt for the next assistant turn.
func (t *Tokenizer) EncodeObservation(role, content string) []int32 {
	if t.imEnd < 0 {
		return nil
	}
	var b strings.Builder
	b.WriteByte('\n')
	writeMessage(&b, role, content)
	writeGenerationPrompt(&b)
	return t.Encode(b.String())
}

// EncodeFinal is EncodeObservation without the generation prompt, for an episode's last
// observation.
func (t *Tokenizer) EncodeFinal(role, content string) []int32 {
	if t.imEnd < 0 {
		return nil
	}
	var b strings.Builder
	b.WriteByte('\n')
	writeMessage(&b, role, content)
	return t.Encode(b.String())
}

// ChatTemplate returns the Jinja chat template of tokenizer_config.json.
func (t *Tokenizer) ChatTemplate() string { return t.config.template }
