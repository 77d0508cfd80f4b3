package calc

import (
	"math/big"
	"regexp"
	"strings"
)

// numberRE matches a signed integer, decimal or fraction, with optional thousands separators:
// "-178,377", "2.5", "7/3", "7 / 3".
var numberRE = regexp.MustCompile(`-?\d+(?:,\d{3})*(?:\.\d+)?(?:\s*/\s*\d+)?`)

// maxAnswerDigits bounds the length of a number ParseAnswer will convert. Real answers have at
// most a few dozen digits; a megabyte of digits would cost seconds in math/big for nothing.
const maxAnswerDigits = 200

// ParseAnswer reads the agent's final answer: the last number in text, as an exact rational.
// It accepts integers, decimals and fractions ("Answer: 7/3"), so any exact spelling of the
// result counts. ok is false when text holds no number, or only an absurdly long one.
func ParseAnswer(text string) (v *big.Rat, ok bool) {
	locs := numberRE.FindAllStringIndex(text, -1)
	if len(locs) == 0 {
		return nil, false
	}
	last := locs[len(locs)-1]
	s := text[last[0]:last[1]]
	if len(s) > maxAnswerDigits {
		return nil, false
	}
	s = strings.NewReplacer(",", "", " ", "", "\t", "", "\n", "", "\r", "").Replace(s)
	v, ok = new(big.Rat).SetString(s)
	if !ok {
		return nil, false
	}
	return v, true
}
