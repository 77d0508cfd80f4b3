package tool

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Analyzer turns text into index terms. It lowercases, splits on every rune that is neither a
// letter nor a digit, and drops the terms in Stopwords. It does no stemming: "founder" and
// "founded" are different terms, which keeps ranking predictable and hand-checkable.
type Analyzer struct {
	// Stopwords are dropped from documents and queries (lowercase). Nil keeps every term.
	Stopwords map[string]bool
}

// EnglishStopwords is a short list of English function words. It is a convenience for
// NewAnalyzerWithStopwords; the zero Analyzer uses no stopwords.
var EnglishStopwords = []string{
	"a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "is", "it", "of",
	"on", "or", "that", "the", "this", "to", "was", "were", "what", "which", "who", "with",
}

// NewAnalyzerWithStopwords returns an Analyzer that drops words (matched case-insensitively).
func NewAnalyzerWithStopwords(words []string) Analyzer {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[strings.ToLower(w)] = true
	}
	return Analyzer{Stopwords: m}
}

// Terms appends the terms of text to dst and returns it.
func (a Analyzer) Terms(dst []string, text string) []string {
	for i := 0; ; {
		start, end, ok := nextWord(text, i)
		if !ok {
			return dst
		}
		i = end
		if t := strings.ToLower(text[start:end]); !a.Stopwords[t] {
			dst = append(dst, t)
		}
	}
}

// nextWord returns the bounds of the first word of text at or after byte i: a maximal run of
// letters and digits (bytes that are not valid UTF-8 separate words). ok is false when none is
// left.
func nextWord(text string, i int) (start, end int, ok bool) {
	start = -1
	for i < len(text) {
		r, size := rune(text[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(text[i:])
		}
		if isWordRune(r) {
			if start < 0 {
				start = i
			}
		} else if start >= 0 {
			return start, i, true
		}
		i += size
	}
	if start >= 0 {
		return start, len(text), true
	}
	return 0, 0, false
}

func isWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r)
}

// appendLower appends strings.ToLower(word) to dst without allocating; word is one word from
// nextWord, so valid UTF-8, and lowering it rune by rune is exactly what ToLower does.
func appendLower(dst []byte, word string) []byte {
	for i := 0; i < len(word); {
		c := word[i]
		if c < utf8.RuneSelf {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(word[i:])
		dst = utf8.AppendRune(dst, unicode.ToLower(r))
		i += size
	}
	return dst
}
