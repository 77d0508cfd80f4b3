package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normalizer is one of Hugging Face's normalizers. Offsets are not tracked: this package returns
// ids, not alignments.
type normalizer interface {
	normalize(s string) string
}

// unicodeNorm is NFC, NFD, NFKC or NFKD. Invalid UTF-8 bytes pass through unchanged.
type unicodeNorm struct{ form norm.Form }

func (n unicodeNorm) normalize(s string) string {
	if n.form.IsNormalString(s) {
		return s
	}
	return n.form.String(s)
}

type seqNorm []normalizer

func (q seqNorm) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

// replaceNorm is Replace: every match of a literal string or a regex becomes content.
type replaceNorm struct {
	lit     string
	re      *splitPattern // non-nil for a Regex pattern
	content string
}

func (r replaceNorm) normalize(s string) string {
	if r.re == nil {
		return strings.ReplaceAll(s, r.lit, r.content)
	}
	var b strings.Builder
	prev, matched := 0, false
	r.re.forEachMatch(s, func(start, end int) {
		b.WriteString(s[prev:start])
		b.WriteString(r.content)
		prev, matched = end, true
	})
	if !matched {
		return s
	}
	b.WriteString(s[prev:])
	return b.String()
}

// prependNorm is Prepend: the text, when not empty, gets a prefix.
type prependNorm string

func (p prependNorm) normalize(s string) string {
	if s == "" {
		return s
	}
	return string(p) + s
}

// stripNorm is Strip: whitespace (Rust's char::is_whitespace) removed at either end.
type stripNorm struct{ left, right bool }

func (p stripNorm) normalize(s string) string {
	if p.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if p.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

// lowercaseNorm is Lowercase: Rust's char::to_lowercase, the full mapping, in which only U+0130
// (İ) has a two-character lowercase.
type lowercaseNorm struct{}

func (lowercaseNorm) normalize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteByte(s[i])
		case r == 'İ':
			b.WriteString("i\u0307")
		default:
			b.WriteRune(unicode.ToLower(r))
		}
		i += n
	}
	return b.String()
}

// stripAccentsNorm is StripAccents: combining marks (category M) removed (meant to follow NFD or
// NFKD).
type stripAccentsNorm struct{}

func (stripAccentsNorm) normalize(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.Is(unicode.M, r) {
			return -1
		}
		return r
	}, s)
}

// hfPattern is the pattern of Split and Replace: {"String": "..."} or {"Regex": "..."}.
type hfPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

func parsePattern(raw json.RawMessage) (hfPattern, error) {
	var p hfPattern
	if err := checkKeys(raw, "pattern", "String", "Regex"); err != nil {
		return p, err
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return p, fmt.Errorf("pattern: %w", err)
	}
	if (p.String == nil) == (p.Regex == nil) {
		return p, fmt.Errorf("pattern: exactly one of String and Regex must be given")
	}
	return p, nil
}

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	typ, err := typeOf(raw)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "NFC", "NFD", "NFKC", "NFKD":
		if err := checkKeys(raw, typ, "type"); err != nil {
			return nil, err
		}
		form := map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}[typ]
		return unicodeNorm{form}, nil
	case "Lowercase":
		return lowercaseNorm{}, checkKeys(raw, typ, "type")
	case "StripAccents":
		return stripAccentsNorm{}, checkKeys(raw, typ, "type")
	case "Strip":
		if err := checkKeys(raw, typ, "type", "strip_left", "strip_right"); err != nil {
			return nil, err
		}
		var s struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("type Strip: %w", err)
		}
		return stripNorm{s.Left, s.Right}, nil
	case "Prepend":
		if err := checkKeys(raw, typ, "type", "prepend"); err != nil {
			return nil, err
		}
		var p struct {
			Prepend string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("type Prepend: %w", err)
		}
		return prependNorm(p.Prepend), nil
	case "Replace":
		if err := checkKeys(raw, typ, "type", "pattern", "content"); err != nil {
			return nil, err
		}
		var r struct {
			Pattern json.RawMessage `json:"pattern"`
			Content string          `json:"content"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("type Replace: %w", err)
		}
		p, err := parsePattern(r.Pattern)
		if err != nil {
			return nil, fmt.Errorf("type Replace: %w", err)
		}
		if p.String != nil {
			if *p.String == "" {
				return nil, fmt.Errorf("type Replace: empty String pattern")
			}
			return replaceNorm{lit: *p.String, content: r.Content}, nil
		}
		re, err := compileSplitPattern(*p.Regex, false)
		if err != nil {
			return nil, fmt.Errorf("type Replace: %w", err)
		}
		return replaceNorm{re: re, content: r.Content}, nil
	case "Sequence":
		if err := checkKeys(raw, typ, "type", "normalizers"); err != nil {
			return nil, err
		}
		var s struct {
			List []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("type Sequence: %w", err)
		}
		var out seqNorm
		for i, n := range s.List {
			sub, err := parseNormalizer(n)
			if err != nil {
				return nil, fmt.Errorf("type Sequence[%d]: %w", i, err)
			}
			out = append(out, sub)
		}
		return out, nil
	case "":
		return nil, fmt.Errorf("normalizer without a type")
	}
	return nil, fmt.Errorf("type %q is not supported (NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Strip, Prepend, Replace, Sequence)", typ)
}
