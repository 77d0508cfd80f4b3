package tool

import (
	"strings"
	"unicode"
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
	start := -1
	emit := func(end int) {
		if start < 0 {
			return
		}
		t := strings.ToLower(text[start:end])
		start = -1
		if a.Stopwords[t] {
			return
		}
		dst = append(dst, t)
	}
	for i, r := range text {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if start < 0 {
				start = i
			}
			continue
		}
		emit(i)
	}
	emit(len(text))
	return dst
}
