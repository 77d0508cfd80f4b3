package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestTrainHandComputed(t *testing.T) {
	// Words: "abab" and " ab". Round 1: (a,b) occurs 3 times. Round 2: (Ġ,ab) and (ab,ab) both
	// occur once; the tie goes to the smaller left id (the space byte). Round 3: (ab,ab).
	tok, err := Train([]string{"abab ab"}, TrainOptions{VocabSize: len(chatSpecials) + 256 + 3, MinFrequency: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"a", "b"}, {"Ġ", "ab"}, {"ab", "ab"}}
	if !slices.Equal(tok.mergeList, want) {
		t.Fatalf("merges %q, want %q", tok.mergeList, want)
	}
	if got, want := tok.Encode("abab ab"), []int32{265, 264}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if tok.VocabSize() != 266 {
		t.Errorf("VocabSize %d, want 266", tok.VocabSize())
	}
}

func TestTrainIDLayout(t *testing.T) {
	tok, err := Train([]string{"hello"}, TrainOptions{VocabSize: 300, ExtraTokens: []string{"<extra>"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range chatSpecials {
		if id, ok := tok.SpecialID(s.content); !ok || id != int32(i) {
			t.Errorf("SpecialID(%q) = %d, %v; want %d", s.content, id, ok, i)
		}
	}
	if id, _ := tok.SpecialID("<extra>"); id != int32(len(chatSpecials)) {
		t.Errorf("extra token id %d, want %d", id, len(chatSpecials))
	}
	k := len(chatSpecials) + 1
	for b := 0; b < 256; b++ {
		if got := tok.Encode(string([]byte{byte(b)})); len(got) != 1 || got[0] != int32(k+b) {
			t.Fatalf("byte %d encodes to %v, want [%d]", b, got, k+b)
		}
	}
}

func TestTrainDeterministic(t *testing.T) {
	corpus := genCorpus(3, 800)
	a, err := Train(corpus, DefaultTrainOptions(700))
	if err != nil {
		t.Fatal(err)
	}
	shuffled := slices.Clone(corpus)
	rng := rand.New(rand.NewPCG(5, 6))
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for run := 0; run < 2; run++ {
		b, err := Train(shuffled, DefaultTrainOptions(700))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.mergeList, b.mergeList) {
			t.Fatalf("run %d: merges differ between identical trainings", run)
		}
	}
	if a.VocabSize() != 700 {
		t.Errorf("VocabSize %d, want 700", a.VocabSize())
	}
}

func TestTrainRespectsPreTokenization(t *testing.T) {
	corpus := genCorpus(4, 800)
	for _, individual := range []bool{true, false} {
		opts := DefaultTrainOptions(800)
		opts.IndividualDigits = individual
		tok, err := Train(corpus, opts)
		if err != nil {
			t.Fatal(err)
		}
		digitTokens := 0
		for _, m := range tok.mergeList {
			merged := m[0] + m[1]
			if strings.ContainsAny(merged, "0123456789") {
				digitTokens++
			}
			if strings.Contains(merged, "|>") || strings.Contains(merged, "<|") {
				t.Errorf("merge %q spans an added token, which must be cut out before counting", m)
			}
		}
		if individual && digitTokens > 0 {
			t.Errorf("IndividualDigits: %d merged tokens contain digits", digitTokens)
		}
		if !individual && digitTokens == 0 {
			t.Errorf("grouped digits: no merged token contains digits on a corpus full of numbers")
		}
	}
}

func TestTrainMinFrequency(t *testing.T) {
	tests := []struct {
		corpus     []string
		minFreq    int
		wantMerges int
	}{
		{[]string{"ab"}, 0, 0}, // 0 means 2
		{[]string{"ab"}, 1, 1},
		{[]string{"ab ab"}, 0, 1}, // "ab" twice, then "Ġab" only once: stops
		{[]string{"ab ab"}, 1, 2},
		{[]string{"ab ab ab"}, 3, 1},
	}
	for _, tt := range tests {
		tok, err := Train(tt.corpus, TrainOptions{VocabSize: 1000, MinFrequency: tt.minFreq})
		if err != nil {
			t.Fatal(err)
		}
		if tok.NumMerges() != tt.wantMerges {
			t.Errorf("Train(%q, MinFrequency %d): %d merges %q, want %d", tt.corpus, tt.minFreq, tok.NumMerges(), tok.mergeList, tt.wantMerges)
		}
	}
}

func TestTrainOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		opts TrainOptions
		want string // substring of the error; "" means valid
	}{
		{"default", DefaultTrainOptions(1000), ""},
		{"zero", TrainOptions{}, "VocabSize 0 is below 263"},
		{"too small", TrainOptions{VocabSize: 262}, "below 263"},
		{"too large", TrainOptions{VocabSize: 1 << 25}, "exceeds"},
		{"negative min", TrainOptions{VocabSize: 300, MinFrequency: -1}, "negative"},
		{"empty extra", TrainOptions{VocabSize: 300, ExtraTokens: []string{""}}, "empty"},
		{"byte extra", TrainOptions{VocabSize: 300, ExtraTokens: []string{"é"}}, "collide"},
		{"dup extra", TrainOptions{VocabSize: 300, ExtraTokens: []string{"<x>", "<x>"}}, "twice"},
		{"chat extra", TrainOptions{VocabSize: 300, ExtraTokens: []string{ImEnd}}, "twice"},
	}
	for _, tt := range tests {
		err := tt.opts.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: unexpected error %v", tt.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.want)
		}
		if _, err := Train(nil, tt.opts); err == nil {
			t.Errorf("%s: Train accepted invalid options", tt.name)
		}
	}
}
