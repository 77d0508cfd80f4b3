package tokenizer

import (
	"slices"
	"testing"
)

func preWords(p preTokenizer, s string) []string {
	var out []string
	p.forEachWord(s, func(w string) { out = append(out, w) })
	return out
}

func TestPreTokenizeGPT2(t *testing.T) {
	gpt2 := preTokenizer{useRegex: true}
	tests := []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"it's they're I'll we've I'm he'd don't", []string{"it", "'s", " they", "'re", " I", "'ll", " we", "'ve", " I", "'m", " he", "'d", " don", "'t"}},
		{"IT'S", []string{"IT", "'", "S"}},
		{"'sat", []string{"'s", "at"}},
		{" 's", []string{" '", "s"}},
		{"!!'s", []string{"!!'", "s"}},
		{"a  b", []string{"a", " ", " b"}},
		{"a   b", []string{"a", "  ", " b"}},
		{"a\n\nb", []string{"a", "\n", "\n", "b"}},
		{"a \nb", []string{"a", " ", "\n", "b"}},
		{"a  ", []string{"a", "  "}},
		{"  ", []string{"  "}},
		{" 123 x45", []string{" 123", " x", "45"}},
		{"x.y", []string{"x", ".", "y"}},
		{" ...", []string{" ..."}},
		{"naïve café", []string{"naïve", " café"}},
		{"日本 語", []string{"日本", " 語"}},
		{"a\u3000b", []string{"a", "\u3000", "b"}},
		{"a\u00a0b", []string{"a", "\u00a0", "b"}},
		{"½x", []string{"½", "x"}},
		{"😀😀 😀", []string{"😀😀", " 😀"}},
		{"a\xffb", []string{"a", "\xff", "b"}},
		{"\xff\xfe x", []string{"\xff\xfe", " x"}},
	}
	for _, tt := range tests {
		if got := preWords(gpt2, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("preWords(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestPreTokenizeDigits(t *testing.T) {
	tests := []struct {
		p    preTokenizer
		in   string
		want []string
	}{
		{preTokenizer{digits: digitsIndividual, useRegex: true}, "x 123+45", []string{"x", " ", "1", "2", "3", "+", "4", "5"}},
		{preTokenizer{digits: digitsIndividual, useRegex: true}, "²3", []string{"²", "3"}},
		{preTokenizer{digits: digitsContiguous, useRegex: true}, "x 123+45", []string{"x", " ", "123", "+", "45"}},
		{preTokenizer{digits: digitsIndividual, useRegex: true, addPrefixSpace: true}, "a12", []string{" a", " 1", " 2"}},
		{preTokenizer{digits: digitsIndividual}, "ab 12 c", []string{"ab ", "1", "2", " c"}},
	}
	for _, tt := range tests {
		if got := preWords(tt.p, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("%+v preWords(%q) = %q, want %q", tt.p, tt.in, got, tt.want)
		}
	}
}

func TestAddedMatcherLeftmostLongest(t *testing.T) {
	m := newAddedMatcher([]addedToken{{id: 1, content: "<a>"}, {id: 2, content: "<a>b"}, {id: 3, content: "b<"}})
	tests := []struct {
		in             string
		start, end, id int
		ok             bool
	}{
		{"xx<a>by", 2, 6, 2, true},
		{"xx<a>c", 2, 5, 1, true},
		{"b<a>", 0, 2, 3, true},
		{"none", 0, 0, 0, false},
	}
	for _, tt := range tests {
		s, e, ti, ok := m.find(tt.in, 0)
		id := -1
		if ok {
			id = int(m.tokens[ti].id)
		}
		if ok != tt.ok || (ok && (s != tt.start || e != tt.end || int(id) != tt.id)) {
			t.Errorf("find(%q) = %d %d %d %v, want %d %d %d %v", tt.in, s, e, id, ok, tt.start, tt.end, tt.id, tt.ok)
		}
	}
}
