package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Encode returns the token ids of text. Added tokens written in the text (ImEnd, ToolCallOpen,
// ...) become their ids; everything else is pre-tokenized and byte-pair encoded. It equals Hugging
// Face's encode(text, add_special_tokens=False) on the same tokenizer.json, and any byte string,
// valid UTF-8 or not, decodes back to itself.
func (t *Tokenizer) Encode(text string) []int32 {
	return t.AppendEncode(make([]int32, 0, len(text)/3+4), text)
}

// AppendEncode appends the ids of text to dst and returns the extended slice; with a reused dst
// and warm cache it does not allocate (for a native tokenizer).
func (t *Tokenizer) AppendEncode(dst []int32, text string) []int32 {
	if !t.native {
		return t.appendForeign(dst, text)
	}
	var sc *scratch // taken from the pool on the first cache miss only
	dst = t.appendSplit(dst, text, 0, &sc)
	if sc != nil {
		t.scratch.Put(sc)
	}
	return dst
}

func (t *Tokenizer) appendForeign(dst []int32, text string) []int32 {
	var sc *scratch
	dst = t.appendAdded(dst, text, 0, true, &sc)
	if sc != nil {
		t.scratch.Put(sc)
	}
	return dst
}

// appendSplit cuts text at the added tokens of matchers[level] and encodes the pieces between them
// with the next level. Hugging Face extracts non-normalized added tokens first and normalized ones
// from what remains, each with leftmost-longest matching; the levels reproduce that order.
func (t *Tokenizer) appendSplit(dst []int32, text string, level int, sc **scratch) []int32 {
	if level == len(t.matchers) {
		return t.appendPlain(dst, text, sc)
	}
	m := t.matchers[level]
	for i := 0; i < len(text); {
		start, end, ti, ok := m.find(text, i)
		if !ok {
			start, end = len(text), len(text)
		}
		if start > i {
			dst = t.appendSplit(dst, text[i:start], level+1, sc)
		}
		if ok {
			dst = append(dst, m.tokens[ti].id)
		}
		i = end
	}
	return dst
}

// appendPlain encodes text that holds no added token.
func (t *Tokenizer) appendPlain(dst []int32, text string, sc **scratch) []int32 {
	t.pre.forEachWord(text, func(word string) {
		dst = t.appendWord(dst, word, sc)
	})
	return dst
}

// appendAdded is Hugging Face's AddedVocabulary::find_matches followed by the rest of the
// pipeline: level 0 finds the non-normalized added tokens in the raw text, each text between them
// is normalized, level 1 finds the normalized added tokens in that, and what remains is
// pre-tokenized and encoded. first says text starts at offset 0 of the input.
func (t *Tokenizer) appendAdded(dst []int32, text string, level int, first bool, sc **scratch) []int32 {
	gap := func(start, end int) {
		seg := text[start:end]
		if level == 0 {
			if t.norm != nil {
				seg = t.norm.normalize(seg)
			}
			dst = t.appendAdded(dst, seg, 1, first && start == 0, sc)
			return
		}
		runSteps(t.steps, seg, first && start == 0, func(word string) {
			dst = t.appendWord(dst, word, sc)
		})
	}
	m := t.matchers[level]
	if len(m.tokens) == 0 {
		if text != "" {
			gap(0, len(text))
		}
		return dst
	}
	off := 0
	for pos := 0; pos < len(text); {
		start, end, ti, ok := m.find(text, pos)
		if !ok {
			break
		}
		pos = end
		a := &m.tokens[ti]
		if a.singleWord && (start > 0 && endsWithWord(text[:start]) || end < len(text) && startsWithWord(text[end:])) {
			continue
		}
		if a.lstrip {
			start = max(len(strings.TrimRightFunc(text[:start], unicode.IsSpace)), off)
		}
		if a.rstrip {
			end = len(text) - len(strings.TrimLeftFunc(text[end:], unicode.IsSpace))
		}
		if off < start {
			gap(off, start)
		}
		dst = append(dst, a.id)
		off = end
	}
	if off < len(text) {
		gap(off, len(text))
	}
	return dst
}

// isWordRune is \w of Rust's regex crate: alphabetic, marks, decimal digits, connector
// punctuation and the joiners.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.M, r) ||
		unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) || r == 0x200C || r == 0x200D
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && r != utf8.RuneError && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && r != utf8.RuneError && isWordRune(r)
}

func (t *Tokenizer) appendWord(dst []int32, word string, sc **scratch) []int32 {
	if len(word) == 1 {
		if id := t.byteID[word[0]]; id >= 0 {
			return append(dst, id)
		}
	}
	cacheable := len(word) <= maxCachedWord && t.cache != nil // nil only in benchmarks of the merge loop
	if cacheable {
		if ids, ok := t.cache.get(word); ok {
			return append(dst, ids...)
		}
	}
	if *sc == nil {
		if v, ok := t.scratch.Get().(*scratch); ok {
			*sc = v
		} else {
			*sc = new(scratch)
		}
	}
	start := len(dst)
	dst = t.bpe(dst, word, *sc)
	if cacheable {
		t.cache.put(word, dst[start:])
	}
	return dst
}

// replacement is what Decode writes for an id outside the vocabulary.
const replacement = "\uFFFD"

// Decode returns the text of ids: for a byte-level tokenizer the exact bytes that were encoded, so
// a sequence cut inside a multi-byte character yields invalid UTF-8 rather than a lossy
// substitute. An id outside the vocabulary renders as U+FFFD; use DecodeStrict to have it
// reported instead. On valid UTF-8 it equals Hugging Face's decode(ids, skip_special_tokens=False),
// which substitutes U+FFFD for invalid sequences instead. An added token decodes to its own text.
func (t *Tokenizer) Decode(ids []int32) string { return t.decode(ids, false) }

// DecodeOptions are the options of DecodeWith.
type DecodeOptions struct {
	// SkipSpecialTokens leaves out added tokens marked special (Hugging Face's
	// skip_special_tokens=True).
	SkipSpecialTokens bool
}

// DecodeWith is DecodeStrict with options.
func (t *Tokenizer) DecodeWith(ids []int32, opts DecodeOptions) (string, error) {
	if err := t.checkIDs(ids); err != nil {
		return "", err
	}
	return t.decode(ids, opts.SkipSpecialTokens), nil
}

func (t *Tokenizer) decode(ids []int32, skipSpecial bool) string {
	if skipSpecial {
		kept := make([]int32, 0, len(ids))
		for _, id := range ids {
			if !t.valid(id) || !t.isSpecial(id) {
				kept = append(kept, id)
			}
		}
		ids = kept
	}
	if !t.decodeTable {
		tokens := make([]string, len(ids))
		for i, id := range ids {
			if t.valid(id) {
				tokens[i] = t.idToToken[id]
			} else {
				tokens[i] = replacement
			}
		}
		if t.dec == nil {
			return strings.Join(tokens, " ")
		}
		return strings.Join(t.dec.decode(tokens), "")
	}
	n := 0
	for _, id := range ids {
		if t.valid(id) {
			n += len(t.decoded[id])
		} else {
			n += len(replacement)
		}
	}
	var b strings.Builder
	b.Grow(n)
	for _, id := range ids {
		if t.valid(id) {
			b.WriteString(t.decoded[id])
		} else {
			b.WriteString(replacement)
		}
	}
	return b.String()
}

// DecodeStrict is Decode that fails on the first id outside the vocabulary.
func (t *Tokenizer) DecodeStrict(ids []int32) (string, error) {
	if err := t.checkIDs(ids); err != nil {
		return "", err
	}
	return t.Decode(ids), nil
}

func (t *Tokenizer) checkIDs(ids []int32) error {
	for i, id := range ids {
		if !t.valid(id) {
			return fmt.Errorf("tokenizer: token %d at position %d is not in the vocabulary (size %d)", id, i, t.size)
		}
	}
	return nil
}

func (t *Tokenizer) valid(id int32) bool {
	return id >= 0 && int(id) < t.size && t.used[id]
}

// EncodeOptions are the options of EncodeWith.
type EncodeOptions struct {
	// AddSpecialTokens adds what the tokenizer's post-processor adds around a sequence (Hugging
	// Face's add_special_tokens=True), such as Llama's beginning-of-text token.
	AddSpecialTokens bool
}

// EncodeWith is Encode with options, for text that must be valid UTF-8 (as every Hugging Face
// tokenizer requires): invalid UTF-8 is reported with its byte offset instead of being encoded.
func (t *Tokenizer) EncodeWith(text string, opts EncodeOptions) ([]int32, error) {
	if !utf8.ValidString(text) {
		at := 0
		for at < len(text) {
			r, n := utf8.DecodeRuneInString(text[at:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			at += n
		}
		return nil, fmt.Errorf("tokenizer: text is not valid UTF-8 (byte %d of %d)", at, len(text))
	}
	if !opts.AddSpecialTokens {
		return t.Encode(text), nil
	}
	out := make([]int32, 0, len(text)/3+4+len(t.template.prefix)+len(t.template.suffix))
	out = append(out, t.template.prefix...)
	out = t.AppendEncode(out, text)
	return append(out, t.template.suffix...), nil
}
