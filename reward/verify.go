package reward

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Sample is what a text reward scores.
type Sample struct {
	Prompt   string
	Response string // the policy's final text
	Answer   string // the reference answer, when the task has one
}

// Scorer scores one sample. Implementations are safe for concurrent use.
type Scorer interface {
	Score(ctx context.Context, s Sample) (float64, error)
}

// Extractor pulls the answer out of a response; ok is false when there is none.
type Extractor func(response string) (answer string, ok bool)

// Boxed extracts the contents of the last \boxed{…}, braces balanced.
func Boxed(response string) (string, bool) {
	i := strings.LastIndex(response, `\boxed{`)
	if i < 0 {
		return "", false
	}
	start := i + len(`\boxed{`)
	depth := 1
	for j := start; j < len(response); j++ {
		switch response[j] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return response[start:j], true
			}
		}
	}
	return "", false
}

// Tagged returns an Extractor for the contents of the last <tag>…</tag>.
func Tagged(tag string) Extractor {
	open, closing := "<"+tag+">", "</"+tag+">"
	return func(response string) (string, bool) {
		j := strings.LastIndex(response, closing)
		if j < 0 {
			return "", false
		}
		i := strings.LastIndex(response[:j], open)
		if i < 0 {
			return "", false
		}
		return response[i+len(open) : j], true
	}
}

var numberRE = regexp.MustCompile(`[-+]?\$?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?:/\d+)?%?`)

// LastNumber extracts the last number-looking token of the response.
func LastNumber(response string) (string, bool) {
	all := numberRE.FindAllString(response, -1)
	if len(all) == 0 {
		return "", false
	}
	return all[len(all)-1], true
}

func extract(e Extractor, response string) (string, bool) {
	if e == nil {
		return response, true
	}
	return e(response)
}

// Normalize lowercases, removes punctuation and the articles a/an/the, and collapses whitespace
// (the SQuAD answer normalisation), so "The Eiffel  Tower." equals "eiffel tower".
func Normalize(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsPunct(r) || unicode.IsSymbol(r) {
			return ' '
		}
		return unicode.ToLower(r)
	}, s)
	words := strings.Fields(s)
	out := words[:0]
	for _, w := range words {
		if w != "a" && w != "an" && w != "the" {
			out = append(out, w)
		}
	}
	return strings.Join(out, " ")
}

// NormalizeName is the normalisation for names (the search environment's answers): lower case,
// every run of characters that are neither letters nor decimal digits folded into one space, and
// a leading a/an/the dropped when another word follows, so "The Miravo." equals "Miravo".
//
// It differs from Normalize on purpose: an article inside a name stays ("Bank of the West"), a
// name that is only an article stays ("The"), and marks, control and format characters and
// non-decimal numerals (é's combining accent, ², ½) separate words instead of being kept.
// It allocates only its result.
func NormalizeName(s string) string {
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

// ExactMatch scores 1 when the extracted answer equals the reference after normalisation, else 0.
type ExactMatch struct {
	Extract   Extractor           // nil: the whole response
	Normalize func(string) string // nil: Normalize (SQuAD); NormalizeName for names
}

// Score implements Scorer.
func (e ExactMatch) Score(_ context.Context, s Sample) (float64, error) {
	got, ok := extract(e.Extract, s.Response)
	if !ok {
		return 0, nil
	}
	norm := e.Normalize
	if norm == nil {
		norm = Normalize
	}
	return b2f(norm(got) == norm(s.Answer)), nil
}

// Numeric scores 1 when the extracted number is within max(AbsTol, RelTol·|reference|) of the
// reference number. Numbers may carry thousands separators, a leading $, a trailing %, exponents
// or be fractions like 3/4. A reference that is not a number is an error (a broken task).
type Numeric struct {
	Extract        Extractor // nil: LastNumber
	AbsTol, RelTol float64
}

// Score implements Scorer.
func (n Numeric) Score(_ context.Context, s Sample) (float64, error) {
	want, err := ParseNumber(s.Answer)
	if err != nil {
		return 0, fmt.Errorf("reward: numeric: reference answer: %w", err)
	}
	ex := n.Extract
	if ex == nil {
		ex = LastNumber
	}
	text, ok := ex(s.Response)
	if !ok {
		return 0, nil
	}
	got, err := ParseNumber(text)
	if err != nil {
		return 0, nil // an unparseable answer is a wrong answer
	}
	return b2f(math.Abs(got-want) <= math.Max(n.AbsTol, n.RelTol*math.Abs(want))), nil
}

// ParseNumber reads "1,234.5", "$3", "50%" (0.5), "3/4", "-2e3".
func ParseNumber(s string) (float64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimPrefix(strings.ReplaceAll(t, ",", ""), "$")
	t = strings.Replace(t, "-$", "-", 1)
	scale := 1.0
	if strings.HasSuffix(t, "%") {
		t, scale = strings.TrimSuffix(t, "%"), 0.01
	}
	if num, den, ok := strings.Cut(t, "/"); ok {
		a, err1 := strconv.ParseFloat(strings.TrimSpace(num), 64)
		b, err2 := strconv.ParseFloat(strings.TrimSpace(den), 64)
		if err1 != nil || err2 != nil || b == 0 {
			return 0, fmt.Errorf("not a number: %q", s)
		}
		return a / b * scale, nil
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("not a number: %q", s)
	}
	return v * scale, nil
}

// SetMatch compares Sep-separated items as sets after Normalize (order and duplicates ignored).
// It scores 1 for equal sets, else 0, or the F1 of the two sets with Partial.
type SetMatch struct {
	Extract Extractor // nil: the whole response
	Sep     string    // item separator; "" means ","
	Partial bool
}

// Score implements Scorer.
func (m SetMatch) Score(_ context.Context, s Sample) (float64, error) {
	text, ok := extract(m.Extract, s.Response)
	if !ok {
		return 0, nil
	}
	sep := m.Sep
	if sep == "" {
		sep = ","
	}
	got, want := itemSet(text, sep), itemSet(s.Answer, sep)
	common := 0
	for k := range got {
		if want[k] {
			common++
		}
	}
	if !m.Partial {
		return b2f(common == len(got) && common == len(want)), nil
	}
	if common == 0 {
		return b2f(len(got) == 0 && len(want) == 0), nil
	}
	p, r := float64(common)/float64(len(got)), float64(common)/float64(len(want))
	return 2 * p * r / (p + r), nil
}

func itemSet(s, sep string) map[string]bool {
	out := map[string]bool{}
	for _, it := range strings.Split(s, sep) {
		if n := Normalize(it); n != "" {
			out[n] = true
		}
	}
	return out
}

// Format scores 1 when the response matches Pattern (anchor it to demand the whole layout,
// e.g. `(?s)^<think>.*</think>\s*<answer>.*</answer>$`), else 0.
type Format struct {
	Pattern *regexp.Regexp
}

// Score implements Scorer.
func (f Format) Score(_ context.Context, s Sample) (float64, error) {
	if f.Pattern == nil {
		return 0, fmt.Errorf("reward: format: no pattern")
	}
	return b2f(f.Pattern.MatchString(s.Response)), nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Solved reports whether an outcome score means the task is solved: every grader scores on
// [0, 1], and only a full score solves (the environments' success flag, the one rule for all).
func Solved(score float64) bool { return score >= 1 }

// AnswerLine extracts the answer of a final turn: the rest of the line after the last "Answer:"
// (any case), or the whole turn when it has none. It always finds one.
func AnswerLine(response string) (string, bool) {
	if i := lastIndexASCIIFold(response, "answer:"); i >= 0 {
		rest := response[i+len("answer:"):]
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
			rest = rest[:nl]
		}
		return rest, true
	}
	return response, true
}

// lastIndexASCIIFold is the last index of marker (lower-case ASCII) in s, matching either case
// of its letters. It reads s's own bytes: the offsets of a strings.ToLower copy differ from s's
// wherever lowering changes a character's length (invalid UTF-8 becomes a 3-byte U+FFFD), and
// no other character lowers to an ASCII letter of "answer:".
func lastIndexASCIIFold(s, marker string) int {
	for i := len(s) - len(marker); i >= 0; i-- {
		j := 0
		for ; j < len(marker); j++ {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != marker[j] {
				break
			}
		}
		if j == len(marker) {
			return i
		}
	}
	return -1
}

// Cases grades a program by its test cases: 1 when all of them pass, else 0, or the fraction
// passed with Partial. A program that ran no case scores 0.
type Cases struct {
	Partial bool
}

// Grade scores passed of total cases.
func (c Cases) Grade(passed, total int) float64 {
	switch {
	case total <= 0 || passed <= 0:
		return 0
	case passed >= total:
		return 1
	case c.Partial:
		return float64(passed) / float64(total)
	}
	return 0
}
