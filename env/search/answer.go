package search

import (
	"strings"
	"unicode"
)

// answerText extracts the answer from a final turn: the rest of the line after the last
// "Answer:" (any case), or the whole turn when it has none.
func answerText(action string) string {
	lower := strings.ToLower(action)
	if i := strings.LastIndex(lower, "answer:"); i >= 0 {
		rest := action[i+len("answer:"):]
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
			rest = rest[:nl]
		}
		return rest
	}
	return action
}

// normalize makes answers comparable: lower case, punctuation and repeated spaces folded into
// single spaces, a leading article dropped ("The Miravo." matches "Miravo").
func normalize(s string) string {
	s = strings.ToLower(s)
	sep := func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }
	n := 0
	for range strings.FieldsFuncSeq(s, sep) {
		n++
	}
	var b strings.Builder
	b.Grow(len(s))
	i := 0
	for f := range strings.FieldsFuncSeq(s, sep) {
		i++
		if i == 1 && n > 1 && (f == "the" || f == "a" || f == "an") {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f)
	}
	return b.String()
}
