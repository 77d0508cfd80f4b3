package tokenizer

import (
	"fmt"
	"strings"
)

// Encode returns the token ids of text. Added tokens written in the text (ImEnd, ToolCallOpen,
// ...) become their ids; everything else is pre-tokenized and byte-pair encoded. It equals Hugging
// Face's encode(text, add_special_tokens=False) on the same tokenizer.json, and any byte string,
// valid UTF-8 or not, decodes back to itself.
func (t *Tokenizer) Encode(text string) []int32 {
	return t.AppendEncode(make([]int32, 0, len(text)/3+4), text)
}

// AppendEncode appends the ids of text to dst and returns the extended slice; with a reused dst
// and warm cache it does not allocate.
func (t *Tokenizer) AppendEncode(dst []int32, text string) []int32 {
	var sc *scratch // taken from the pool on the first cache miss only
	dst = t.appendSplit(dst, text, 0, &sc)
	if sc != nil {
		t.scratch.Put(sc)
	}
	return dst
}

// AppendEncodeLiteral appends the ids of text read as plain text: added-token strings in it are
// byte-pair encoded like any other text instead of becoming their ids (Hugging Face's
// split_special_tokens). For text without an added-token string it equals AppendEncode.
func (t *Tokenizer) AppendEncodeLiteral(dst []int32, text string) []int32 {
	var sc *scratch
	dst = t.appendPlain(dst, text, &sc)
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
		start, end, id, ok := m.find(text, i)
		if !ok {
			start, end = len(text), len(text)
		}
		if start > i {
			dst = t.appendSplit(dst, text[i:start], level+1, sc)
		}
		if ok {
			dst = append(dst, id)
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

// Decode returns the text of ids: the exact bytes that were encoded, so a sequence cut inside a
// multi-byte character yields invalid UTF-8 rather than a lossy substitute. An id outside the
// vocabulary renders as U+FFFD; use DecodeStrict to have it reported instead. On valid UTF-8 it
// equals Hugging Face's decode(ids, skip_special_tokens=False), which substitutes U+FFFD for
// invalid sequences instead. An added token decodes to its own text.
func (t *Tokenizer) Decode(ids []int32) string {
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
	for i, id := range ids {
		if !t.valid(id) {
			return "", fmt.Errorf("tokenizer: token %d at position %d is not in the vocabulary (size %d)", id, i, t.size)
		}
	}
	return t.Decode(ids), nil
}

func (t *Tokenizer) valid(id int32) bool {
	return id >= 0 && int(id) < t.size && t.used[id]
}
