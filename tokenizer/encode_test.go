package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func TestDecodeInvalidIDs(t *testing.T) {
	tok := testTokenizer(t)
	hi := tok.Encode("hi")
	tests := []struct {
		ids    []int32
		want   string
		strict string // substring of DecodeStrict's error; "" means no error
	}{
		{hi, "hi", ""},
		{nil, "", ""},
		{append(slices.Clone(hi), -1), "hi\uFFFD", "token -1 at position"},
		{[]int32{int32(tok.VocabSize())}, "\uFFFD", "not in the vocabulary"},
		{[]int32{tok.EndOfTurn()}, ImEnd, ""},
	}
	for _, tt := range tests {
		if got := tok.Decode(tt.ids); got != tt.want {
			t.Errorf("Decode(%v) = %q, want %q", tt.ids, got, tt.want)
		}
		got, err := tok.DecodeStrict(tt.ids)
		switch {
		case tt.strict == "" && (err != nil || got != tt.want):
			t.Errorf("DecodeStrict(%v) = %q, %v; want %q", tt.ids, got, err, tt.want)
		case tt.strict != "" && (err == nil || !strings.Contains(err.Error(), tt.strict)):
			t.Errorf("DecodeStrict(%v) error %v, want one containing %q", tt.ids, err, tt.strict)
		}
	}
}

func TestDecodeKeepsPartialBytes(t *testing.T) {
	tok := testTokenizer(t)
	ids := tok.Encode("😀")
	if len(ids) < 2 {
		t.Skip("emoji is a single token in this vocabulary")
	}
	part := tok.Decode(ids[:1])
	if utf8.ValidString(part) || !strings.HasPrefix("😀", part) {
		t.Errorf("Decode of a partial emoji = %q, want its raw leading bytes", part)
	}
}

// TestMergeSmallMatchesHeap runs both merge loops on random words; they implement the same
// order (lowest rank, then leftmost), so they must agree.
func TestMergeSmallMatchesHeap(t *testing.T) {
	tok := testTokenizer(t)
	rng := rand.New(rand.NewPCG(11, 12))
	alphabet := []string{"a", "b", "the", "e", "th", " ", "1", "é", "in", "g", "ing", "s"}
	sc := new(scratch)
	for i := 0; i < 3000; i++ {
		var b strings.Builder
		for n := rng.IntN(60); n >= 0; n-- {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		word := b.String()
		sc.sym = tok.initialSymbols(sc.sym[:0], word)
		small := slices.Clone(tok.mergeSmall(sc))
		sc.sym = tok.initialSymbols(sc.sym[:0], word)
		heap := tok.mergeHeap(sc)
		if !slices.Equal(small, heap) {
			t.Fatalf("word %q: small path %v, heap path %v", word, small, heap)
		}
	}
}

func TestEncodeConcurrent(t *testing.T) {
	corpus := genCorpus(21, 400)
	tok, err := Train(corpus, DefaultTrainOptions(600))
	if err != nil {
		t.Fatal(err)
	}
	want := make([][]int32, len(corpus))
	for i, text := range corpus {
		want[i] = tok.Encode(text)
	}
	fresh, err := Train(corpus, DefaultTrainOptions(600)) // cold cache, filled concurrently
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := range corpus {
				i := (k*7 + g*13) % len(corpus)
				if got := fresh.Encode(corpus[i]); !slices.Equal(got, want[i]) {
					errs <- corpus[i]
					return
				}
				if fresh.Decode(want[i]) != corpus[i] {
					errs <- corpus[i]
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for text := range errs {
		t.Errorf("concurrent Encode/Decode of %q disagreed", clip(text))
	}
}

func TestAppendEncodeAllocs(t *testing.T) {
	tok := testTokenizer(t)
	text := agentTurns(1)[0]
	dst := tok.AppendEncode(nil, text) // warm the cache and size dst
	allocs := testing.AllocsPerRun(20, func() {
		dst = tok.AppendEncode(dst[:0], text)
	})
	if allocs > 0 {
		t.Errorf("AppendEncode with a warm cache allocates %.1f times per call", allocs)
	}
}

// FuzzRoundTrip: any byte string survives Encode then Decode, and DecodeStrict accepts Encode's
// output. Seeds run as ordinary test cases; go test -fuzz FuzzRoundTrip explores further.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range edgeTexts {
		f.Add(s)
	}
	f.Add("\xff\xfe\x00\xc3")
	f.Add("\xe2\x82")
	f.Add(strings.Repeat("a", 200) + "<|im_end|>" + strings.Repeat("1", 70))
	tok := testTokenizer(f)
	f.Fuzz(func(t *testing.T, text string) {
		ids := tok.Encode(text)
		if got := tok.Decode(ids); got != text {
			t.Fatalf("Decode(Encode(%q)) = %q", text, got)
		}
		if _, err := tok.DecodeStrict(ids); err != nil {
			t.Fatal(err)
		}
	})
}
