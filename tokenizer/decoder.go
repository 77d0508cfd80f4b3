package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// decoderStep is one of Hugging Face's decoders: it maps the list of token strings to a new list
// (decode_chain); the final list is concatenated.
type decoderStep interface {
	decode(tokens []string) []string
}

// byteLevelDecoder maps each token's byte-level characters back to bytes. Unlike Hugging Face,
// which then substitutes U+FFFD for invalid UTF-8, it keeps the exact bytes.
type byteLevelDec struct{}

func (byteLevelDec) decode(tokens []string) []string {
	var b strings.Builder
	for _, t := range tokens {
		raw, _ := rawFromByteLevel(t)
		b.WriteString(raw)
	}
	return []string{b.String()}
}

type replaceDec struct{ pattern, content string }

func (r replaceDec) decode(tokens []string) []string {
	for i, t := range tokens {
		tokens[i] = strings.ReplaceAll(t, r.pattern, r.content)
	}
	return tokens
}

// byteFallbackDec turns runs of <0xNN> tokens into their bytes. Hugging Face writes U+FFFD per
// byte when a run is not valid UTF-8; this keeps the bytes, so that Decode inverts Encode.
type byteFallbackDec struct{}

func byteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	var v byte
	for _, c := range []byte(t[3:5]) {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | (c - '0')
		case c >= 'A' && c <= 'F':
			v = v<<4 | (c - 'A' + 10)
		case c >= 'a' && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}

func (byteFallbackDec) decode(tokens []string) []string {
	out := tokens[:0:0]
	var pending []byte
	for _, t := range tokens {
		if b, ok := byteToken(t); ok {
			pending = append(pending, b)
			continue
		}
		if len(pending) > 0 {
			out = append(out, string(pending))
			pending = pending[:0]
		}
		out = append(out, t)
	}
	if len(pending) > 0 {
		out = append(out, string(pending))
	}
	return out
}

type fuseDec struct{}

func (fuseDec) decode(tokens []string) []string { return []string{strings.Join(tokens, "")} }

// stripDec removes up to start leading and stop trailing copies of a character from each token.
type stripDec struct {
	content     string
	start, stop int
}

func (p stripDec) decode(tokens []string) []string {
	for i, t := range tokens {
		for k := 0; k < p.start && strings.HasPrefix(t, p.content); k++ {
			t = t[len(p.content):]
		}
		for k := 0; k < p.stop && strings.HasSuffix(t, p.content); k++ {
			t = t[:len(t)-len(p.content)]
		}
		tokens[i] = t
	}
	return tokens
}

// metaspaceDec turns the replacement character back into spaces; in the first token, when the
// encoder prepends one, every replacement is dropped instead (as Hugging Face does).
type metaspaceDec struct {
	replacement string
	prepend     string
}

func (p metaspaceDec) decode(tokens []string) []string {
	for i, t := range tokens {
		with := " "
		if i == 0 && p.prepend != prependNever {
			with = ""
		}
		tokens[i] = strings.ReplaceAll(t, p.replacement, with)
	}
	return tokens
}

type seqDec []decoderStep

func (q seqDec) decode(tokens []string) []string {
	for _, d := range q {
		tokens = d.decode(tokens)
	}
	return tokens
}

// parseDecoderSteps converts a decoder. onlyByteLevel reports the plain ByteLevel decoder, which
// Decode runs from a per-id table.
func parseDecoderSteps(raw json.RawMessage, depth int) (d decoderStep, onlyByteLevel bool, err error) {
	if isNull(raw) {
		return nil, false, nil
	}
	if depth > 16 {
		return nil, false, fmt.Errorf("decoder Sequences nested too deeply")
	}
	typ, err := typeOf(raw)
	if err != nil {
		return nil, false, err
	}
	switch typ {
	case "ByteLevel":
		return byteLevelDec{}, depth == 0, checkKeys(raw, "ByteLevel", "type", "add_prefix_space", "trim_offsets", "use_regex")
	case "ByteFallback":
		return byteFallbackDec{}, false, checkKeys(raw, typ, "type")
	case "Fuse":
		return fuseDec{}, false, checkKeys(raw, typ, "type")
	case "Replace":
		if err := checkKeys(raw, typ, "type", "pattern", "content"); err != nil {
			return nil, false, err
		}
		var r struct {
			Pattern json.RawMessage `json:"pattern"`
			Content string          `json:"content"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, false, err
		}
		p, err := parsePattern(r.Pattern)
		if err != nil {
			return nil, false, err
		}
		if p.String == nil || *p.String == "" {
			return nil, false, fmt.Errorf("type Replace: only a non-empty String pattern is supported in a decoder")
		}
		return replaceDec{*p.String, r.Content}, false, nil
	case "Strip":
		if err := checkKeys(raw, typ, "type", "content", "start", "stop"); err != nil {
			return nil, false, err
		}
		var s struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, false, err
		}
		if len([]rune(s.Content)) != 1 || s.Start < 0 || s.Stop < 0 {
			return nil, false, fmt.Errorf("type Strip: content must be one character and start, stop non-negative")
		}
		return stripDec{s.Content, s.Start, s.Stop}, false, nil
	case "Metaspace":
		if err := checkKeys(raw, typ, "type", "replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"); err != nil {
			return nil, false, err
		}
		m, err := parseMetaspace(raw)
		if err != nil {
			return nil, false, err
		}
		return metaspaceDec{m.replacement, m.prepend}, false, nil
	case "Sequence":
		if err := checkKeys(raw, typ, "type", "decoders"); err != nil {
			return nil, false, err
		}
		var s struct {
			List []json.RawMessage `json:"decoders"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, false, err
		}
		var out seqDec
		for i, r := range s.List {
			sub, _, err := parseDecoderSteps(r, depth+1)
			if err != nil {
				return nil, false, fmt.Errorf("type Sequence[%d]: %w", i, err)
			}
			if sub != nil {
				out = append(out, sub)
			}
		}
		if len(out) == 1 {
			if _, ok := out[0].(byteLevelDec); ok && depth == 0 {
				return out[0], true, nil
			}
		}
		return out, false, nil
	case "":
		return nil, false, fmt.Errorf("decoder without a type")
	}
	return nil, false, fmt.Errorf("type %q is not supported (ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace, Sequence)", typ)
}
