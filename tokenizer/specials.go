package tokenizer

import (
	"sort"
	"strings"
)

// The chat format's added tokens. Train always includes them, in this order, as ids 0..6.
const (
	EndOfText         = "<|endoftext|>" // end of a document; also the padding token
	ImStart           = "<|im_start|>"  // opens a ChatML message: ImStart + role + "\n"
	ImEnd             = "<|im_end|>"    // closes a message; the end-of-turn (stop) token
	ToolCallOpen      = "<tool_call>"
	ToolCallClose     = "</tool_call>"
	ToolResponseOpen  = "<tool_response>"
	ToolResponseClose = "</tool_response>"
)

// chatSpecials lists the added tokens Train creates, in id order. The tool-call tags are added as
// non-special tokens (like Qwen's), so Hugging Face's decode(skip_special_tokens=True) keeps them
// and tool calls stay parseable; Encode treats both kinds the same way.
var chatSpecials = []struct {
	content string
	special bool
}{
	{EndOfText, true},
	{ImStart, true},
	{ImEnd, true},
	{ToolCallOpen, false},
	{ToolCallClose, false},
	{ToolResponseOpen, false},
	{ToolResponseClose, false},
}

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	id         int32
	content    string
	special    bool
	normalized bool // matched in a second pass, after the non-normalized tokens (see AppendEncode)
	singleWord bool // matched only where no word character touches it
	lstrip     bool // takes the whitespace before it
	rstrip     bool // takes the whitespace after it
	// match is the text searched for: content, or for a normalized token the content normalized.
	match string
}

// addedMatcher finds added tokens in text with leftmost-longest semantics, as Hugging Face's
// AddedVocabulary does (an Aho-Corasick automaton with MatchKind::LeftmostLongest).
type addedMatcher struct {
	byFirst   [256][]int // indices into tokens, longest first, keyed by first byte
	tokens    []addedToken
	onlyFirst int // the single first byte shared by all tokens, or -1 if they differ
}

func newAddedMatcher(tokens []addedToken) *addedMatcher {
	m := &addedMatcher{tokens: tokens, onlyFirst: -1}
	for i := range tokens {
		if tokens[i].match == "" {
			tokens[i].match = tokens[i].content
		}
	}
	order := make([]int, len(tokens))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		return len(tokens[order[a]].match) > len(tokens[order[b]].match)
	})
	firsts := 0
	for _, i := range order {
		c := tokens[i].match[0]
		if m.byFirst[c] == nil {
			firsts++
			m.onlyFirst = int(c)
		}
		m.byFirst[c] = append(m.byFirst[c], i)
	}
	if firsts != 1 {
		m.onlyFirst = -1
	}
	return m
}

// find returns the leftmost, then longest, added token in s[from:]: its start, end and index in
// m.tokens. ok is false when there is none.
func (m *addedMatcher) find(s string, from int) (start, end, index int, ok bool) {
	if len(m.tokens) == 0 {
		return 0, 0, 0, false
	}
	for i := from; i < len(s); i++ {
		if m.onlyFirst >= 0 {
			k := strings.IndexByte(s[i:], byte(m.onlyFirst))
			if k < 0 {
				return 0, 0, 0, false
			}
			i += k
		}
		for _, ti := range m.byFirst[s[i]] {
			if t := m.tokens[ti].match; strings.HasPrefix(s[i:], t) {
				return i, i + len(t), ti, true
			}
		}
	}
	return 0, 0, 0, false
}
