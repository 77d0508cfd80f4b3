package reward

import (
	"context"
	"fmt"
	"math/big"
	"regexp"
	"strings"
)

// rationalRE matches a signed integer, decimal or fraction, with optional thousands separators:
// "-178,377", "2.5", "7/3", "7 / 3".
var rationalRE = regexp.MustCompile(`-?\d+(?:,\d{3})*(?:\.\d+)?(?:\s*/\s*\d+)?`)

// maxRationalBytes bounds the text of a number LastRational will convert. Real answers have at
// most a few dozen digits; a megabyte of digits would cost seconds in math/big for nothing.
const maxRationalBytes = 200

// LastRational reads the last number in text as an exact rational. It accepts integers,
// decimals and fractions ("Answer: 7/3"), so any exact spelling of a result counts. ok is false
// when text holds no number, or only an absurdly long one.
//
// It looks only at the tail of text: it finds the last digit by scanning back, then matches
// within the run of number characters that ends there, so a megabyte of output costs one pass
// of a byte loop, not a regular-expression scan.
func LastRational(text string) (v *big.Rat, ok bool) {
	end := strings.LastIndexAny(text, "0123456789") + 1
	if end == 0 {
		return nil, false
	}
	start := end
	for start > 0 && end-start <= maxRationalBytes && strings.IndexByte("0123456789.,/- \t\r\n\f", text[start-1]) >= 0 {
		start--
	}
	window := text[start:end]
	locs := rationalRE.FindAllStringIndex(window, -1)
	if len(locs) == 0 {
		return nil, false
	}
	last := locs[len(locs)-1]
	if last[0] == 0 && start > 0 && end-start > maxRationalBytes {
		return nil, false // the number runs on past the window: too long to be an answer
	}
	s := separators.Replace(window[last[0]:last[1]])
	v, ok = new(big.Rat).SetString(s)
	if !ok {
		return nil, false
	}
	return v, true
}

// separators are the thousands separators and spaces a number may contain.
var separators = strings.NewReplacer(",", "", " ", "", "\t", "", "\n", "", "\r", "", "\f", "")

// ExactNumber scores 1 when the last number of the response (LastRational) equals the reference
// exactly, as rationals: "7/3", "14 / 6" and "2.3333…" are told apart, "2.5" and "5/2" are not.
// It is Numeric without rounding, for answers that are exact by construction (the calc
// environment's). A reference that is not a number is an error (a broken task).
type ExactNumber struct{}

// Score implements Scorer.
func (ExactNumber) Score(_ context.Context, s Sample) (float64, error) {
	want, ok := new(big.Rat).SetString(strings.TrimSpace(s.Answer))
	if !ok {
		return 0, fmt.Errorf("reward: exact number: reference answer %q is not a number", s.Answer)
	}
	return ExactNumber{}.Against(want, s.Response), nil
}

// Against scores response against a reference already held as a rational (what Score does after
// reading the reference's text).
func (ExactNumber) Against(want *big.Rat, response string) float64 {
	got, ok := LastRational(response)
	return b2f(ok && got.Cmp(want) == 0)
}
