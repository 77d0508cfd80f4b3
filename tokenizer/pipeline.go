package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// preStep is one pre-tokenizer of a loaded tokenizer.json. split calls emit with each piece of s
// in order; first says the piece starts at offset 0 of the original text (Metaspace's
// prepend_scheme "first" depends on it).
type preStep interface {
	split(s string, first bool, emit func(piece string, first bool))
}

// runSteps applies steps[0], then the rest to each of its pieces, and calls fn with every word.
func runSteps(steps []preStep, s string, first bool, fn func(word string)) {
	if len(steps) == 0 {
		fn(s)
		return
	}
	rest := steps[1:]
	steps[0].split(s, first, func(piece string, f bool) { runSteps(rest, piece, f, fn) })
}

// splitStep is the Split pre-tokenizer.
type splitStep struct {
	pattern  *splitPattern
	behavior splitBehavior
	invert   bool
}

func (p *splitStep) split(s string, first bool, emit func(string, bool)) {
	if p.pattern.wordEnd != nil && p.behavior == splitIsolated && !p.invert {
		for i := 0; i < len(s); {
			e := p.pattern.wordEnd(s, i)
			emit(s[i:e], first && i == 0)
			i = e
		}
		return
	}
	for _, sp := range splitSpans(s, p.pattern, p.behavior, p.invert, nil) {
		emit(s[sp.start:sp.end], first && sp.start == 0)
	}
}

// byteLevelStep is the ByteLevel pre-tokenizer: an optional leading space and, with use_regex,
// the GPT-2 pattern. The mapping of bytes to the byte-level alphabet is done by the model, which
// works on raw bytes (Tokenizer.byteLevel).
type byteLevelStep struct {
	addPrefixSpace bool
	useRegex       bool
}

func (p *byteLevelStep) split(s string, first bool, emit func(string, bool)) {
	if p.addPrefixSpace && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	if !p.useRegex {
		emit(s, first)
		return
	}
	for i := 0; i < len(s); {
		e := gpt2WordEnd(s, i)
		emit(s[i:e], first && i == 0)
		i = e
	}
}

// digitsStep is the Digits pre-tokenizer: runs of numeric characters (Rust's char::is_numeric),
// or each one alone, are separated from the rest.
type digitsStep struct{ individual bool }

func (p *digitsStep) split(s string, first bool, emit func(string, bool)) {
	pt := preTokenizer{digits: digitsContiguous}
	if p.individual {
		pt.digits = digitsIndividual
	}
	for i := 0; i < len(s); {
		e := pt.pieceEnd(s, i)
		emit(s[i:e], first && i == 0)
		i = e
	}
}

// Metaspace prepend schemes.
const (
	prependAlways = "always"
	prependFirst  = "first"
	prependNever  = "never"
)

// metaspaceStep is the Metaspace pre-tokenizer: spaces become the replacement character, a
// replacement is prepended per the scheme, and with split each replacement starts a new piece.
type metaspaceStep struct {
	replacement string
	prepend     string
	split_      bool
}

func (p *metaspaceStep) split(s string, first bool, emit func(string, bool)) {
	s = strings.ReplaceAll(s, " ", p.replacement)
	if !strings.HasPrefix(s, p.replacement) && (p.prepend == prependAlways || p.prepend == prependFirst && first) {
		s = p.replacement + s
	}
	if !p.split_ {
		emit(s, first)
		return
	}
	// MergedWithNext on the replacement character: each piece starts at a replacement.
	start := 0
	for i := 0; i < len(s); {
		k := strings.Index(s[i:], p.replacement)
		if k < 0 {
			break
		}
		at := i + k
		if at > start {
			emit(s[start:at], first && start == 0)
			start = at
		}
		i = at + len(p.replacement)
	}
	if start < len(s) {
		emit(s[start:], first && start == 0)
	}
}

// parsePreSteps converts a pre_tokenizer to steps. byteLevel reports a ByteLevel step, which must
// be the last (it changes the alphabet the model sees).
func parsePreSteps(raw json.RawMessage) (steps []preStep, byteLevel bool, err error) {
	if isNull(raw) {
		return nil, false, nil
	}
	var flat []json.RawMessage
	if err := flattenSequence(raw, &flat, 0); err != nil {
		return nil, false, err
	}
	for i, r := range flat {
		if byteLevel {
			return nil, false, fmt.Errorf("a pre-tokenizer after ByteLevel is not supported")
		}
		typ, _ := typeOf(r)
		step, err := parsePreStep(typ, r)
		if err != nil {
			return nil, false, fmt.Errorf("%s (step %d): %w", typ, i, err)
		}
		if bl, ok := step.(*byteLevelStep); ok {
			byteLevel = true
			if !bl.addPrefixSpace && !bl.useRegex {
				continue // the identity on raw bytes
			}
		}
		steps = append(steps, step)
	}
	return steps, byteLevel, nil
}

func flattenSequence(raw json.RawMessage, out *[]json.RawMessage, depth int) error {
	if depth > 16 {
		return fmt.Errorf("pre-tokenizer Sequences nested too deeply")
	}
	typ, err := typeOf(raw)
	if err != nil {
		return err
	}
	if typ != "Sequence" {
		*out = append(*out, raw)
		return nil
	}
	if err := checkKeys(raw, "Sequence", "type", "pretokenizers"); err != nil {
		return err
	}
	var seq struct {
		Pre []json.RawMessage `json:"pretokenizers"`
	}
	if err := json.Unmarshal(raw, &seq); err != nil {
		return fmt.Errorf("type Sequence: %w", err)
	}
	for _, p := range seq.Pre {
		if err := flattenSequence(p, out, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func parsePreStep(typ string, raw json.RawMessage) (preStep, error) {
	switch typ {
	case "ByteLevel":
		var p preTokenizer
		if err := p.parseByteLevel(raw); err != nil {
			return nil, err
		}
		return &byteLevelStep{addPrefixSpace: p.addPrefixSpace, useRegex: p.useRegex}, nil
	case "Digits":
		if err := checkKeys(raw, "Digits", "type", "individual_digits"); err != nil {
			return nil, err
		}
		var d struct {
			Individual bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, err
		}
		return &digitsStep{individual: d.Individual}, nil
	case "Split":
		if err := checkKeys(raw, "Split", "type", "pattern", "behavior", "invert"); err != nil {
			return nil, err
		}
		var sp struct {
			Pattern  json.RawMessage `json:"pattern"`
			Behavior string          `json:"behavior"`
			Invert   bool            `json:"invert"`
		}
		if err := json.Unmarshal(raw, &sp); err != nil {
			return nil, err
		}
		b, ok := splitBehaviors[sp.Behavior]
		if !ok {
			return nil, fmt.Errorf("behavior %q is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous", sp.Behavior)
		}
		pat, err := parsePattern(sp.Pattern)
		if err != nil {
			return nil, err
		}
		var p *splitPattern
		if pat.String != nil {
			p, err = compileSplitPattern(*pat.String, true)
		} else {
			p, err = compileSplitPattern(*pat.Regex, false)
		}
		if err != nil {
			return nil, err
		}
		return &splitStep{pattern: p, behavior: b, invert: sp.Invert}, nil
	case "Metaspace":
		if err := checkKeys(raw, "Metaspace", "type", "replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"); err != nil {
			return nil, err
		}
		return parseMetaspace(raw)
	case "":
		return nil, fmt.Errorf("pre-tokenizer without a type")
	}
	return nil, fmt.Errorf("type %q is not supported (ByteLevel, Split, Digits, Metaspace, Sequence)", typ)
}

func parseMetaspace(raw json.RawMessage) (*metaspaceStep, error) {
	var m struct {
		Replacement    string  `json:"replacement"`
		PrependScheme  *string `json:"prepend_scheme"`
		Split          *bool   `json:"split"`
		AddPrefixSpace *bool   `json:"add_prefix_space"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if utf8.RuneCountInString(m.Replacement) != 1 {
		return nil, fmt.Errorf("replacement %q is not one character", m.Replacement)
	}
	p := &metaspaceStep{replacement: m.Replacement, prepend: prependAlways, split_: true}
	if m.Split != nil {
		p.split_ = *m.Split
	}
	switch {
	case m.PrependScheme != nil:
		switch *m.PrependScheme {
		case prependAlways, prependFirst, prependNever:
			p.prepend = *m.PrependScheme
		default:
			return nil, fmt.Errorf("prepend_scheme %q is not one of always, first, never", *m.PrependScheme)
		}
	case m.AddPrefixSpace != nil && !*m.AddPrefixSpace:
		p.prepend = prependNever
	}
	return p, nil
}
