package calc

import (
	"math/big"
	"regexp"
	"strings"
)

// numberRE matches a signed integer, decimal or fraction, with optional thousands separators:
// "-178,377", "2.5", "7/3", "7 / 3".
var numberRE = regexp.MustCompile(`-?\d+(?:,\d{3})*(?:\.\d+)?(?:\s*/\s*\d+)?`)

// maxAnswerBytes bounds the text of a number ParseAnswer will convert. Real answers have at most
// a few dozen digits; a megabyte of digits would cost seconds in math/big for nothing.
const maxAnswerBytes = 200

// ParseAnswer reads the agent's final answer: the last number in text, as an exact rational.
// It accepts integers, decimals and fractions ("Answer: 7/3"), so any exact spelling of the
// result counts. ok is false when text holds no number, or only an absurdly long one.
//
// It looks only at the tail of text: it finds the last digit by scanning back, then matches
// within the run of number characters that ends there, so a megabyte of output costs one pass
// of a byte loop, not a regular-expression scan.
func ParseAnswer(text string) (v *big.Rat, ok bool) {
	end := strings.LastIndexAny(text, "0123456789") + 1
	if end == 0 {
		return nil, false
	}
	start := end
	for start > 0 && end-start <= maxAnswerBytes && strings.IndexByte("0123456789.,/- \t\r\n\f", text[start-1]) >= 0 {
		start--
	}
	window := text[start:end]
	locs := numberRE.FindAllStringIndex(window, -1)
	if len(locs) == 0 {
		return nil, false
	}
	last := locs[len(locs)-1]
	if last[0] == 0 && start > 0 && end-start > maxAnswerBytes {
		return nil, false // the number runs on past the window: too long to be an answer
	}
	s := separators.Replace(window[last[0]:last[1]])
	v, ok = new(big.Rat).SetString(s)
	if !ok {
		return nil, false
	}
	return v, true
}

// separators are the thousands separators and spaces an answer's number may contain.
var separators = strings.NewReplacer(",", "", " ", "", "\t", "", "\n", "", "\r", "", "\f", "")
