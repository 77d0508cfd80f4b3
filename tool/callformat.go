package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CallFormat is how a model family writes tool calls in its assistant text: the parser that
// finds them and the renderer that writes them back. Hermes is agentrl's own and Qwen2.5/3's;
// Llama3JSON is Llama 3.1/3.2's; Mistral is Mistral's [TOOL_CALLS].
//
// Parse never panics and runs in time linear in the text: a malformed call is a Call with Err
// set, which the tool wrapper shows to the policy as an error observation.
type CallFormat interface {
	// Name is the format's name in configuration.
	Name() string
	// HasCall reports whether text contains anything Parse would treat as a call attempt.
	HasCall(text string) bool
	// Parse finds every call attempt in text, in order; nil when there is none.
	Parse(text string, lim ParseLimits) []Call
	// Content returns the text outside the calls, trailing whitespace dropped: the message
	// content a chat template writes before them.
	Content(text string) string
	// Render writes well-formed calls as the format's chat template writes them.
	Render(calls []Call) (string, error)
}

// The formats, by name.
var (
	Hermes     CallFormat = hermesFormat{}
	Llama3JSON CallFormat = llama3Format{}
	Mistral    CallFormat = mistralFormat{}
)

var callFormats = []CallFormat{Hermes, Llama3JSON, Mistral}

// CallFormatNames lists the formats' names.
func CallFormatNames() []string {
	names := make([]string, len(callFormats))
	for i, f := range callFormats {
		names[i] = f.Name()
	}
	return names
}

// CallFormatByName returns the format called name, or an error listing the valid names.
func CallFormatByName(name string) (CallFormat, error) {
	for _, f := range callFormats {
		if f.Name() == name {
			return f, nil
		}
	}
	return nil, fmt.Errorf("tool: unknown tool-call format %q (valid: %s)", name, strings.Join(CallFormatNames(), ", "))
}

// hermesFormat is <tool_call>{"name": ..., "arguments": {...}}</tool_call>: ParseCalls.
type hermesFormat struct{}

func (hermesFormat) Name() string                              { return "hermes" }
func (hermesFormat) HasCall(text string) bool                  { return HasCall(text) }
func (hermesFormat) Parse(text string, lim ParseLimits) []Call { return ParseCalls(text, lim) }

func (hermesFormat) Content(text string) string {
	var b strings.Builder
	rest := text
	for {
		i := strings.Index(rest, OpenTag)
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		j := strings.Index(rest[i:], CloseTag)
		if j < 0 {
			break
		}
		rest = rest[i+j+len(CloseTag):]
	}
	return strings.TrimRightFunc(b.String(), unicode.IsSpace)
}

// Render writes Qwen's form: one "<tool_call>\n{...}\n</tool_call>" per call, joined by "\n",
// the JSON as Python's json.dumps writes it.
func (hermesFormat) Render(calls []Call) (string, error) {
	var b strings.Builder
	for i, c := range calls {
		args, err := pyJSON(c.Arguments)
		if err != nil {
			return "", fmt.Errorf("tool: call %s: %w", c.Name, err)
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(OpenTag + "\n{\"name\": ")
		b.WriteString(pyString(c.Name))
		b.WriteString(", \"arguments\": ")
		b.WriteString(args)
		b.WriteString("}\n" + CloseTag)
	}
	return b.String(), nil
}

// PythonTag is the special token before Llama 3.1's tool calls.
const PythonTag = "<|python_tag|>"

// llama3Format is Llama 3.1's JSON tool call: the whole turn is {"name": ..., "parameters":
// {...}}, possibly after <|python_tag|>, several separated by ";".
type llama3Format struct{}

func (llama3Format) Name() string { return "llama3" }

func (llama3Format) HasCall(text string) bool {
	t := strings.TrimSpace(text)
	if strings.HasPrefix(t, PythonTag) {
		return true
	}
	return strings.HasPrefix(t, "{") && strings.Contains(t, `"name"`)
}

func (f llama3Format) Parse(text string, lim ParseLimits) []Call {
	if !f.HasCall(text) {
		return nil
	}
	lim = lim.sane()
	body := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(text), PythonTag))
	if len(body)/lim.MaxCalls > lim.MaxArgBytes+1 {
		return []Call{{Raw: capRaw(body), Err: fmt.Errorf("%w: %d bytes, limit %d", ErrArgsTooLarge, len(body), lim.MaxArgBytes)}}
	}
	var calls []Call
	dec := json.NewDecoder(strings.NewReader(body))
	for {
		var raw json.RawMessage
		start := dec.InputOffset()
		err := dec.Decode(&raw)
		if err == io.EOF {
			break
		}
		if err != nil {
			calls = append(calls, Call{Raw: capRaw(body[start:]), Err: fmt.Errorf("%w: %s", ErrBadJSON, jsonProblem(err))})
			break
		}
		if len(calls) == lim.MaxCalls {
			calls = append(calls, Call{Err: fmt.Errorf("%w: at most %d per turn, the rest were ignored", ErrTooManyCalls, lim.MaxCalls)})
			break
		}
		calls = append(calls, parseObject(string(raw), lim.MaxArgBytes, true, "parameters", "arguments"))
		// Calls are separated by ";" (and whitespace); anything else is not a call.
		rest := body[dec.InputOffset():]
		trimmed := strings.TrimLeftFunc(rest, unicode.IsSpace)
		if trimmed == "" {
			break
		}
		if trimmed[0] != ';' {
			calls = append(calls, Call{Raw: capRaw(trimmed), Err: fmt.Errorf("%w: text after the call", ErrBadJSON)})
			break
		}
		body = strings.TrimPrefix(trimmed, ";")
		dec = json.NewDecoder(strings.NewReader(body))
	}
	return calls
}

func (llama3Format) Content(text string) string {
	if (llama3Format{}).HasCall(text) {
		return ""
	}
	return strings.TrimRightFunc(text, unicode.IsSpace)
}

// Render writes {"name": "...", "parameters": {...}} per call, joined by "; ".
func (llama3Format) Render(calls []Call) (string, error) {
	parts := make([]string, len(calls))
	for i, c := range calls {
		args, err := pyJSON(c.Arguments)
		if err != nil {
			return "", fmt.Errorf("tool: call %s: %w", c.Name, err)
		}
		parts[i] = `{"name": ` + pyString(c.Name) + `, "parameters": ` + args + `}`
	}
	return strings.Join(parts, "; "), nil
}

// MistralTag is the special token before Mistral's tool calls.
const MistralTag = "[TOOL_CALLS]"

// mistralFormat is [TOOL_CALLS] [{"name": ..., "arguments": {...}, "id": ...}, ...].
type mistralFormat struct{}

func (mistralFormat) Name() string             { return "mistral" }
func (mistralFormat) HasCall(text string) bool { return strings.Contains(text, MistralTag) }

func (f mistralFormat) Parse(text string, lim ParseLimits) []Call {
	i := strings.Index(text, MistralTag)
	if i < 0 {
		return nil
	}
	lim = lim.sane()
	body := strings.TrimSpace(text[i+len(MistralTag):])
	if len(body)/lim.MaxCalls > lim.MaxArgBytes+64 {
		return []Call{{Raw: capRaw(body), Err: fmt.Errorf("%w: %d bytes, limit %d", ErrArgsTooLarge, len(body), lim.MaxArgBytes)}}
	}
	dec := json.NewDecoder(strings.NewReader(body))
	var list []json.RawMessage
	if err := dec.Decode(&list); err != nil {
		return []Call{{Raw: capRaw(body), Err: fmt.Errorf("%w: %s calls must be a JSON array of objects: %s", ErrBadJSON, MistralTag, jsonProblem(err))}}
	}
	var calls []Call
	if len(list) == 0 {
		return []Call{{Raw: capRaw(body), Err: fmt.Errorf("%w: empty %s list", ErrNoName, MistralTag)}}
	}
	for _, raw := range list {
		if len(calls) == lim.MaxCalls {
			calls = append(calls, Call{Err: fmt.Errorf("%w: at most %d per turn, the rest were ignored", ErrTooManyCalls, lim.MaxCalls)})
			break
		}
		calls = append(calls, parseObject(string(raw), lim.MaxArgBytes, true, "arguments", "parameters"))
	}
	if rest := strings.TrimSpace(body[dec.InputOffset():]); rest != "" && rest != "</s>" {
		calls = append(calls, Call{Raw: capRaw(rest), Err: fmt.Errorf("%w: text after the %s list", ErrBadJSON, MistralTag)})
	}
	return calls
}

func (mistralFormat) Content(text string) string {
	if i := strings.Index(text, MistralTag); i >= 0 {
		text = text[:i]
	}
	return strings.TrimRightFunc(text, unicode.IsSpace)
}

// Render writes [TOOL_CALLS] [{"name": ..., "arguments": ..., "id": ...}, ...] as Mistral's
// template does (the id only where the call has one).
func (mistralFormat) Render(calls []Call) (string, error) {
	parts := make([]string, len(calls))
	for i, c := range calls {
		args, err := pyJSON(c.Arguments)
		if err != nil {
			return "", fmt.Errorf("tool: call %s: %w", c.Name, err)
		}
		parts[i] = `{"name": ` + pyString(c.Name) + `, "arguments": ` + args
		if c.ID != "" {
			parts[i] += `, "id": ` + pyString(c.ID)
		}
		parts[i] += "}"
	}
	return MistralTag + " [" + strings.Join(parts, ", ") + "]", nil
}

// sane applies the defaults to limits, treating invalid ones as zero, as ParseCalls does.
func (l ParseLimits) sane() ParseLimits {
	if l.Validate() != nil {
		l = ParseLimits{}
	}
	return l.withDefaults()
}

// parseObject reads one JSON call object whose arguments are under the first of argKeys it
// holds; withID reads its "id" too (which must then be a string).
func parseObject(raw string, maxBytes int, withID bool, argKeys ...string) Call {
	raw = strings.TrimSpace(raw)
	if len(raw) > maxBytes {
		return Call{Raw: capRaw(raw), Err: fmt.Errorf("%w: %d bytes, limit %d", ErrArgsTooLarge, len(raw), maxBytes)}
	}
	c := Call{Raw: raw}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &obj); err != nil || obj == nil {
		c.Err = fmt.Errorf("%w: %s", ErrBadJSON, jsonProblem(err))
		return c
	}
	nameJSON, ok := obj["name"]
	if !ok {
		c.Err = ErrNoName
		return c
	}
	if err := json.Unmarshal(nameJSON, &c.Name); err != nil || strings.TrimSpace(c.Name) == "" {
		c.Name = ""
		c.Err = fmt.Errorf("%w: name must be a non-empty string", ErrNoName)
		return c
	}
	if idJSON, ok := obj["id"]; withID && ok {
		if json.Unmarshal(idJSON, &c.ID) != nil {
			c.Err = fmt.Errorf("%w: id must be a string", ErrBadJSON)
			return c
		}
	}
	var args json.RawMessage
	found := false
	for _, k := range argKeys {
		if args, found = obj[k]; found {
			break
		}
	}
	if !found || bytes.Equal(args, []byte("null")) {
		c.Arguments = json.RawMessage("{}")
		return c
	}
	// Some chat formats send arguments as a string holding the JSON object; accept that too.
	var s string
	if json.Unmarshal(args, &s) == nil {
		args = json.RawMessage(s)
	}
	if !isObject(args) {
		c.Err = fmt.Errorf("%w, got %s", ErrArgsNotObject, kindOf(args))
		return c
	}
	c.Arguments = args
	return c
}

// pyJSON rewrites a JSON value as Python's json.dumps writes it (ensure_ascii off, ", " and
// ": " separators, key order kept, numbers as written); empty means "{}".
func pyJSON(raw json.RawMessage) (string, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return "{}", nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b strings.Builder
	if err := pyValue(&b, dec, 0); err != nil {
		return "", err
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", errors.New("arguments: trailing data after JSON")
	}
	return b.String(), nil
}

func pyValue(b *strings.Builder, dec *json.Decoder, depth int) error {
	if depth > 200 {
		return errors.New("arguments nested too deeply")
	}
	t, err := dec.Token()
	if err != nil {
		return fmt.Errorf("arguments: %w", err)
	}
	switch t := t.(type) {
	case json.Delim:
		closer := map[json.Delim]string{'{': "}", '[': "]"}[t]
		b.WriteString(t.String())
		for i := 0; dec.More(); i++ {
			if i > 0 {
				b.WriteString(", ")
			}
			if t == '{' {
				k, err := dec.Token()
				if err != nil {
					return fmt.Errorf("arguments: %w", err)
				}
				b.WriteString(pyString(k.(string)))
				b.WriteString(": ")
			}
			if err := pyValue(b, dec, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return fmt.Errorf("arguments: %w", err)
		}
		b.WriteString(closer)
	case string:
		b.WriteString(pyString(t))
	case json.Number:
		b.WriteString(t.String())
	case bool:
		b.WriteString(map[bool]string{true: "true", false: "false"}[t])
	case nil:
		b.WriteString("null")
	}
	return nil
}

// pyString quotes s as json.dumps(s, ensure_ascii=False) does.
func pyString(s string) string {
	var b strings.Builder
	WritePyJSONString(&b, s, false)
	return b.String()
}

// WritePyJSONString writes s quoted as Python's json.dumps(s, ensure_ascii=ensureASCII) does:
// the short escapes, \u escapes for the other control characters and, with ensureASCII, for
// every rune past '~' (as a surrogate pair past U+FFFF). Chat templates' tojson writes strings
// with it too.
func WritePyJSONString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			fmt.Fprintf(b, `\u%04x`, r)
		case ensureASCII && r > 0x7e:
			if r > 0xffff {
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			} else {
				fmt.Fprintf(b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}
