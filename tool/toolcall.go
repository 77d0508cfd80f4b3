package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The tags that delimit a tool call in the model's assistant text.
const (
	OpenTag  = "<tool_call>"
	CloseTag = "</tool_call>"
)

// Default parse limits, used where a ParseLimits field is zero.
const (
	DefaultMaxCalls    = 4
	DefaultMaxArgBytes = 8 << 10
)

// Errors a malformed tool call wraps. The wrapper shows the message to the model; tests and
// callers match the kind with errors.Is.
var (
	ErrUnterminated  = errors.New("unterminated <tool_call>")
	ErrNested        = errors.New("nested <tool_call>")
	ErrUnmatched     = errors.New("</tool_call> without <tool_call>")
	ErrBadJSON       = errors.New("tool call is not a JSON object")
	ErrNoName        = errors.New("tool call has no name")
	ErrArgsNotObject = errors.New("arguments must be a JSON object")
	ErrArgsTooLarge  = errors.New("tool call too large")
	ErrTooManyCalls  = errors.New("too many tool calls")
	ErrUnknownTool   = errors.New("unknown tool")
)

// ParseLimits bounds what ParseCalls accepts from one assistant turn. Zero fields take the
// defaults above; negative fields are invalid.
type ParseLimits struct {
	// MaxCalls is how many calls one turn may make; tags past it yield one ErrTooManyCalls.
	MaxCalls int
	// MaxArgBytes bounds the bytes between the tags, checked before any JSON decoding so a
	// JSON bomb costs a length check, not a parse.
	MaxArgBytes int
}

// Validate reports negative limits.
func (l ParseLimits) Validate() error {
	if l.MaxCalls < 0 || l.MaxArgBytes < 0 {
		return fmt.Errorf("tool: parse limits must not be negative: %+v", l)
	}
	return nil
}

func (l ParseLimits) withDefaults() ParseLimits {
	if l.MaxCalls == 0 {
		l.MaxCalls = DefaultMaxCalls
	}
	if l.MaxArgBytes == 0 {
		l.MaxArgBytes = DefaultMaxArgBytes
	}
	return l
}

// Call is one tool-call attempt found in an assistant turn, in the order written. Either Err is
// nil and Name and Arguments hold a well-formed call, or Err says why the attempt is malformed
// (Name is filled when it could be read, Raw always holds what was written, capped).
type Call struct {
	// ID is the call's id where the format writes one (Mistral's); "" otherwise.
	ID        string
	Name      string
	Arguments json.RawMessage // a JSON object; "{}" when the call gave none
	Raw       string          // the text between the tags, capped at the argument limit
	Err       error
}

// maxRawKept caps Call.Raw of rejected calls so a 1 MiB action is not copied into the trajectory.
const maxRawKept = 256

// HasCall reports whether text contains anything ParseCalls would treat as a call attempt.
// A turn without one is the agent's answer.
func HasCall(text string) bool {
	return strings.Contains(text, OpenTag) || strings.Contains(text, CloseTag)
}

// ParseCalls finds every tool-call attempt in text. Each well-formed
// <tool_call>{"name": ..., "arguments": {...}}</tool_call> becomes a Call; every malformed one
// (bad JSON, missing name, non-object arguments, oversized body, unterminated or nested tags, a
// stray close tag, calls past the limit) becomes a Call with Err set. It never panics and runs in
// time linear in len(text). ParseCalls does not know which tools exist: the caller checks names.
// It returns nil when text has no tags at all. Negative limits are treated as their defaults;
// callers that take limits from configuration call Validate first.
func ParseCalls(text string, lim ParseLimits) []Call {
	if !HasCall(text) {
		return nil
	}
	if lim.Validate() != nil {
		lim = ParseLimits{}
	}
	lim = lim.withDefaults()
	var calls []Call
	attempts := 0
	add := func(c Call) bool {
		attempts++
		if attempts > lim.MaxCalls {
			calls = append(calls, Call{Err: fmt.Errorf("%w: at most %d per turn, the rest were ignored", ErrTooManyCalls, lim.MaxCalls)})
			return false
		}
		calls = append(calls, c)
		return true
	}
	for pos := 0; pos < len(text); {
		open := indexFrom(text, OpenTag, pos)
		closeAt := indexFrom(text, CloseTag, pos)
		switch {
		case open < 0 && closeAt < 0:
			return calls
		case closeAt >= 0 && (open < 0 || closeAt < open):
			if !add(Call{Raw: capRaw(text[pos:closeAt]), Err: ErrUnmatched}) {
				return calls
			}
			pos = closeAt + len(CloseTag)
			continue
		}
		body := open + len(OpenTag)
		end, nested := matchClose(text, body)
		if end < 0 {
			add(Call{Raw: capRaw(text[body:]), Err: fmt.Errorf("%w: no %s before the end of the turn", ErrUnterminated, CloseTag)})
			return calls
		}
		var c Call
		if nested {
			c = Call{Raw: capRaw(text[body:end]), Err: fmt.Errorf("%w: a call may not contain another %s", ErrNested, OpenTag)}
			end = skipNested(text, body)
		} else {
			c = parseBody(text[body:end], lim.MaxArgBytes)
		}
		if !add(c) {
			return calls
		}
		pos = end + len(CloseTag)
	}
	return calls
}

// matchClose returns the index of the first close tag at or after from, and whether an open tag
// comes before it.
func matchClose(text string, from int) (end int, nested bool) {
	end = indexFrom(text, CloseTag, from)
	if end < 0 {
		return -1, false
	}
	open := indexFrom(text, OpenTag, from)
	return end, open >= 0 && open < end
}

// skipNested returns the index of the close tag that balances the open tag whose body starts at
// from, counting depth, or the last close tag seen when the text ends unbalanced.
func skipNested(text string, from int) int {
	depth, pos, last := 1, from, -1
	for depth > 0 {
		open := indexFrom(text, OpenTag, pos)
		closeAt := indexFrom(text, CloseTag, pos)
		if closeAt < 0 {
			return last
		}
		if open >= 0 && open < closeAt {
			depth++
			pos = open + len(OpenTag)
			continue
		}
		depth--
		last = closeAt
		pos = closeAt + len(CloseTag)
	}
	return last
}

func indexFrom(s, sub string, from int) int {
	i := strings.Index(s[from:], sub)
	if i < 0 {
		return -1
	}
	return from + i
}

// parseBody decodes the JSON between the tags (its "id", if any, is not read).
func parseBody(body string, maxBytes int) Call {
	return parseObject(body, maxBytes, false, "arguments")
}

func isObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// kindOf names the JSON type of raw for an error message.
func kindOf(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || !json.Valid(t) {
		return "invalid JSON"
	}
	switch t[0] {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case '{':
		return "an object"
	default:
		return "a number"
	}
}

// jsonProblem shortens encoding/json's message, which names Go types the model has never seen.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	switch {
	case err == nil:
		return "got null"
	case errors.As(err, &syn):
		return fmt.Sprintf("syntax error at byte %d", syn.Offset)
	default:
		var ut *json.UnmarshalTypeError
		if errors.As(err, &ut) {
			return "got " + ut.Value
		}
		return "invalid JSON"
	}
}

// capRaw keeps at most maxRawKept bytes of a rejected call, cut on a rune boundary.
func capRaw(s string) string {
	if len(s) <= maxRawKept {
		return s
	}
	cut := maxRawKept
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
