package reward

import (
	"context"
	"math/big"
	"strings"
	"testing"
)

// ratString is tool.FormatRat: an integer without its denominator.
func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	return r.String()
}

func TestLastRational(t *testing.T) {
	for _, tc := range []struct {
		text string
		want string // "" for no answer
	}{
		{"Answer: 178377", "178377"},
		{"Answer: -42", "-42"},
		{"Answer: 178,377", "178377"},
		{"Answer: 7/3", "7/3"},
		{"Answer: 14 / 6", "7/3"},
		{"Answer: 2.5", "5/2"},
		{"I think 12 then 13. Answer: 14.", "14"},
		{"The result is 99 - no wait, it is 100", "100"},
		{"answer 1,23", "23"},
		{"no number here", ""},
		{"", ""},
		{"Answer: 5/0", ""},
		{strings.Repeat("9", 1<<20), ""},
		{"x" + strings.Repeat("9", 201), ""},
		{"Answer: " + strings.Repeat("9", 150), strings.Repeat("9", 150)},
		{strings.Repeat("1 ", 300) + "7", "7"},
		{strings.Repeat("a", 1<<20) + " 5", "5"},
		{"\xff\xfe 12 \x00", "12"},
		{"7\f/\f3", "7/3"},
	} {
		got, ok := LastRational(tc.text)
		name := tc.text
		if len(name) > 40 {
			name = name[:40]
		}
		switch {
		case tc.want == "" && ok:
			t.Errorf("%q: parsed %v, want no answer", name, got)
		case tc.want != "" && (!ok || ratString(got) != tc.want):
			t.Errorf("%q: parsed %v (ok %v), want %s", name, got, ok, tc.want)
		}
	}
}

// FuzzLastRational checks that LastRational never panics and agrees with a plain regular-expression
// scan of the whole text whenever that finds a short last number.
func FuzzLastRational(f *testing.F) {
	for _, s := range []string{"Answer: 42", "7 / 3", "-1,234.5", "1 2 3", "x9", "a-b-1-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got, ok := LastRational(text)
		locs := rationalRE.FindAllStringIndex(text, -1)
		if len(locs) == 0 {
			if ok {
				t.Fatalf("%q: parsed %v from text without a number", text, got)
			}
			return
		}
		last := locs[len(locs)-1]
		if last[1]-last[0] > maxRationalBytes/2 {
			return
		}
		want, wok := new(big.Rat).SetString(strings.NewReplacer(",", "", " ", "", "\t", "", "\n", "", "\r", "", "\v", "", "\f", "").Replace(text[last[0]:last[1]]))
		if ok != wok || (ok && got.Cmp(want) != 0) {
			t.Fatalf("%q: got %v %v, full scan says %v %v", text, got, ok, want, wok)
		}
	})
}

func TestExactNumber(t *testing.T) {
	for _, tc := range []struct {
		resp, answer string
		want         float64
	}{
		{"Answer: 14 / 6", "7/3", 1},
		{"Answer: 2.5", "5/2", 1},
		{"Answer: 2.3333333333333335", "7/3", 0}, // exact, not within float rounding
		{"Answer: -178,377", "-178377", 1},
		{"no number", "4", 0},
	} {
		got, err := ExactNumber{}.Score(context.Background(), Sample{Response: tc.resp, Answer: tc.answer})
		if err != nil || got != tc.want {
			t.Errorf("%q vs %q: %v, %v; want %v", tc.resp, tc.answer, got, err, tc.want)
		}
	}
	if _, err := (ExactNumber{}).Score(context.Background(), Sample{Response: "1", Answer: "x"}); err == nil {
		t.Error("a reference that is not a number was accepted")
	}
}
