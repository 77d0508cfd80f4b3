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
	f := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	if len(f) > 1 && (f[0] == "the" || f[0] == "a" || f[0] == "an") {
		f = f[1:]
	}
	return strings.Join(f, " ")
}
