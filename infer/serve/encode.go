package serve

import (
	"runtime"
	"sort"
	"strings"

	"github.com/agentrl/agentrl/tokenizer"
)

// Tokenizing costs memory in proportion to the text (tens of bytes per byte of text while byte
// pairs merge), so a request's text is bounded before it is tokenized, and so is the number of
// texts tokenized at once: one client sending many large prompts cannot grow the server.

// textBound is the most bytes of text that can encode to a prompt that fits this server's
// context: every token covers at most maxPiece bytes, so a longer text has more tokens than the
// context holds and is refused without being tokenized.
func (s *Server) textBound() int { return s.maxLen * s.maxPiece }

// checkText refuses a text of n bytes that cannot fit in the context, before tokenizing it.
func (s *Server) checkText(n int, param string) error {
	if n > s.textBound() {
		return badRequest(param, "the prompt has %d bytes of text; this model's context of %d tokens holds at most %d bytes (%d per token at most), leaving no room for a completion",
			n, s.maxLen, s.textBound(), s.maxPiece)
	}
	return nil
}

// longestPiece is the most bytes any one token decodes to.
func longestPiece(tok *tokenizer.Tokenizer) int {
	n := 1
	for id := range tok.VocabSize() {
		n = max(n, len(tok.Decode([]int32{int32(id)})))
	}
	for _, a := range tok.AddedTokens() {
		n = max(n, len(a))
	}
	return n
}

// tokenizeSlots is how many texts are tokenized at once, server-wide.
func tokenizeSlots() int { return max(2, runtime.GOMAXPROCS(0)) }

// tokenizing runs f holding one of the server's tokenizing slots.
func (s *Server) tokenizing(f func()) {
	s.tokenizeSem <- struct{}{}
	defer func() { <-s.tokenizeSem }()
	if s.encodeHook != nil {
		s.encodeHook()
	}
	f()
}

// encode tokenizes a text the caller has bounded with checkText.
func (s *Server) encode(text string) []int32 {
	var out []int32
	s.tokenizing(func() { out = s.tok.Encode(text) })
	return out
}

// promptMessage is a chat message as renderMessages writes it: its content, and the byte ranges
// of the content that a client's user or tool text fills.
type promptMessage struct {
	tokenizer.Message
	literal [][2]int
}

// addedToken is an added token's text and id, for the safe chat encoding.
type addedToken struct {
	text string
	id   int32
}

// addedTokens lists tok's added tokens, longest first (leftmost-longest matching).
func addedTokens(tok *tokenizer.Tokenizer) []addedToken {
	var out []addedToken
	for _, a := range tok.AddedTokens() {
		if id, ok := tok.SpecialID(a); ok && a != "" {
			out = append(out, addedToken{a, id})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].text) > len(out[j].text) })
	return out
}

// renderPrompt writes msgs as the ChatML template does, with the generation prompt, and returns
// the byte ranges of the text that client content fills (ordered, not overlapping).
func renderPrompt(msgs []promptMessage) (string, [][2]int) {
	var b strings.Builder
	var lits [][2]int
	for _, m := range msgs {
		b.WriteString(tokenizer.ImStart + m.Role + "\n")
		at := b.Len()
		for _, r := range m.literal {
			lits = append(lits, [2]int{at + r[0], at + r[1]})
		}
		b.WriteString(m.Content + tokenizer.ImEnd + "\n")
	}
	b.WriteString(tokenizer.ImStart + "assistant\n")
	return b.String(), lits
}

// encodeChat tokenizes a rendered chat prompt. By default added-token strings inside client
// content (the literal ranges) are plain text; those the template and the tool format write are
// control tokens. With Options.ChatSpecialTokens the whole text is encoded as Encode does. For a
// conversation whose content holds no added-token string both give the same tokens.
func (s *Server) encodeChat(text string, lits [][2]int) []int32 {
	if s.opts.ChatSpecialTokens || len(lits) == 0 {
		return s.encode(text)
	}
	out := make([]int32, 0, len(text)/3+4)
	s.tokenizing(func() {
		seg, r := 0, 0 // start of the plain text not yet encoded; the next literal range
		for i := 0; i < len(text); {
			if r < len(lits) && i >= lits[r][0] {
				i = max(i, lits[r][1])
				r++
				continue
			}
			limit := len(text)
			if r < len(lits) {
				limit = lits[r][0]
			}
			a, ok := s.addedAt(text[i:limit])
			if !ok {
				i++
				continue
			}
			out = s.tok.AppendEncodeLiteral(out, text[seg:i])
			out = append(out, a.id)
			i += len(a.text)
			seg = i
		}
		out = s.tok.AppendEncodeLiteral(out, text[seg:])
	})
	return out
}

// addedAt returns the longest added token that text starts with.
func (s *Server) addedAt(text string) (addedToken, bool) {
	if text == "" || !s.addedFirst[text[0]] {
		return addedToken{}, false
	}
	for _, a := range s.added {
		if strings.HasPrefix(text, a.text) {
			return a, true
		}
	}
	return addedToken{}, false
}
