package chat

import "strings"

// lastMarker stands for a message's content in the probe renders of LastMessage.
const lastMarker = "Zq7-last-message-7qZ"

// LastMessage returns the content of the last user or tool message of text, a context this
// renderer wrote that ends with that message (and the generation prompt, if any): what a
// scripted agent playing the policy reads as its observation. It learns how the template wraps
// such a message by rendering a probe conversation with a marker in its place: the text the
// template writes before the content (the header) and after it (the end of the message and the
// generation prompt). ok is false when text does not end as the template ends such a message.
// Content the template transforms (Llama 3's trim, a JSON-quoted tool result) comes back as it
// was rendered.
func (r *Renderer) LastMessage(text string) (content string, ok bool) {
	best, bestLen := -1, 0
	for _, role := range []string{"tool", "user"} {
		for _, gen := range []bool{true, false} {
			header, trailer, found := r.wrapper(role, gen)
			if !found || !strings.HasSuffix(text, trailer) {
				continue
			}
			body := text[:len(text)-len(trailer)]
			i := strings.LastIndex(body, header)
			if i < 0 {
				continue
			}
			// The latest header wins; at the same place, the longer one (Qwen3's tool header
			// is its user header followed by <tool_response>).
			if i > best || i == best && len(header) > bestLen {
				best, bestLen = i, len(header)
				content, ok = body[i+len(header):], true
			}
		}
	}
	return content, ok
}

// wrapper returns what the template writes before and after the content of a message of role
// that follows an assistant turn, with or without the generation prompt after it.
func (r *Renderer) wrapper(role string, gen bool) (header, trailer string, ok bool) {
	const reply = "Probe-Reply-7"
	before := []Message{{Role: "user", Content: "probe"}, {Role: "assistant", Content: reply}}
	out, err := r.apply(append(before, Message{Role: role, Content: lastMarker}), gen)
	if err != nil {
		return "", "", false
	}
	i := strings.LastIndex(out, lastMarker)
	j := strings.LastIndex(out[:max(i, 0)], reply)
	if i < 0 || j < 0 {
		return "", "", false
	}
	// The header is what follows the assistant's turn and its end-of-turn token, without the
	// whitespace between messages (absent before the first message of a context).
	header = out[j+len(reply) : i]
	for _, id := range r.stop {
		header = strings.TrimPrefix(header, r.tok.Decode([]int32{id}))
	}
	header = strings.TrimLeft(header, " \n")
	trailer = out[i+len(lastMarker):]
	if header == "" {
		return "", "", false
	}
	return header, trailer, true
}
