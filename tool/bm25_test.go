package tool

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// tinyDocs is small enough to score by hand: N = 3, avgdl = 11/3.
var tinyDocs = []Doc{
	{Text: "cat sat mat"},
	{Text: "Cat, cat; DOG!"},
	{Text: "dog bird bird bird fish"},
}

// The expected scores were computed by hand from the formula in bm25.go, e.g. for "cat" in doc 0:
// idf = ln(1 + (3-2+0.5)/(2+0.5)) = ln 1.6; tf = 1; |d|/avgdl = 9/11;
// score = ln1.6 · 2.2 / (1 + 1.2·(0.25 + 0.75·9/11)) = 0.50777...
func TestBM25HandComputed(t *testing.T) {
	cases := []struct {
		name  string
		opt   IndexOptions
		query string
		want  []Hit
	}{
		{"one term", IndexOptions{}, "cat", []Hit{{1, 0.6810831034578925}, {0, 0.5077717780244109}}},
		{"two terms", IndexOptions{}, "dog bird", []Hit{{2, 1.8390234597312256}, {1, 0.5077717780244109}}},
		{"sum over terms", IndexOptions{}, "cat dog", []Hit{{1, 1.1888548814823032}, {0, 0.5077717780244109}, {2, 0.40913984991894975}}},
		{"repeated query term counts once", IndexOptions{}, "cat CAT cat", []Hit{{1, 0.6810831034578925}, {0, 0.5077717780244109}}},
		{"no length normalization", IndexOptions{NoLength: true}, "cat", []Hit{{1, 0.6462549902128865}, {0, 0.47000362924573563}}},
		{"unknown term ignored", IndexOptions{}, "zebra cat", []Hit{{1, 0.6810831034578925}, {0, 0.5077717780244109}}},
		{"no match", IndexOptions{}, "zebra", nil},
		{"only punctuation", IndexOptions{}, "?!", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ix, err := NewIndex(tinyDocs, c.opt)
			if err != nil {
				t.Fatal(err)
			}
			got := ix.Search(c.query, 10)
			if len(got) != len(c.want) {
				t.Fatalf("Search(%q) = %v, want %v", c.query, got, c.want)
			}
			for i := range got {
				if got[i].Doc != c.want[i].Doc || math.Abs(got[i].Score-c.want[i].Score) > 1e-6 {
					t.Errorf("hit %d = %+v, want %+v", i, got[i], c.want[i])
				}
			}
		})
	}
}

func TestBM25TopKAndTies(t *testing.T) {
	// Docs 1, 3 and 4 are identical, so their scores tie and the lower position must win.
	docs := []Doc{{Text: "x"}, {Text: "red fox"}, {Text: "blue"}, {Text: "red fox"}, {Text: "red fox"}, {Text: "red"}}
	ix, err := NewIndex(docs, IndexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		k    int
		want []int
	}{
		{0, nil}, {-1, nil}, {1, []int{1}}, {2, []int{1, 3}}, {3, []int{1, 3, 4}}, {4, []int{1, 3, 4, 5}}, {10, []int{1, 3, 4, 5}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint("k=", c.k), func(t *testing.T) {
			var got []int
			for _, h := range ix.Search("fox red", c.k) {
				got = append(got, h.Doc)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("k=%d: docs %v, want %v", c.k, got, c.want)
			}
		})
	}
}

// TestBM25HeapMatchesSort checks the heap selection against a full sort on random corpora.
func TestBM25HeapMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	docs := make([]Doc, 500)
	for i := range docs {
		docs[i] = Doc{Text: randomText(rng, 3+rng.IntN(20), 40)}
	}
	ix, err := NewIndex(docs, IndexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for q := 0; q < 50; q++ {
		query := randomText(rng, 1+rng.IntN(4), 40)
		all := ix.Search(query, len(docs))
		for _, k := range []int{1, 5, 17} {
			got := ix.Search(query, k)
			want := all[:min(k, len(all))]
			if !slices.Equal(got, want) {
				t.Fatalf("query %q k=%d: %v, want prefix %v", query, k, got, want)
			}
		}
		for i := 1; i < len(all); i++ {
			if better(all[i], all[i-1]) {
				t.Fatalf("query %q: results out of order at %d: %v", query, i, all)
			}
		}
	}
}

func TestBM25Options(t *testing.T) {
	cases := []struct {
		name string
		opt  IndexOptions
		ok   bool
	}{
		{"defaults", IndexOptions{}, true},
		{"custom", IndexOptions{K1: 2, B: 0.5}, true},
		{"negative k1", IndexOptions{K1: -1}, false},
		{"nan k1", IndexOptions{K1: math.NaN()}, false},
		{"b above one", IndexOptions{B: 1.5}, false},
		{"negative b", IndexOptions{B: -0.1}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewIndex(tinyDocs, c.opt)
			if (err == nil) != c.ok {
				t.Errorf("NewIndex(%+v) error = %v, want ok=%v", c.opt, err, c.ok)
			}
		})
	}
	empty, err := NewIndex(nil, IndexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hits := empty.Search("anything", 3); len(hits) != 0 {
		t.Errorf("empty index returned %v", hits)
	}
}

func TestAnalyzer(t *testing.T) {
	cases := []struct {
		an   Analyzer
		text string
		want []string
	}{
		{Analyzer{}, "Hello, World!", []string{"hello", "world"}},
		{Analyzer{}, "  a-b_c 42x ", []string{"a", "b", "c", "42x"}},
		{Analyzer{}, "Ærø straße", []string{"ærø", "straße"}},
		{Analyzer{}, "", nil},
		{NewAnalyzerWithStopwords(EnglishStopwords), "The city of Miravo", []string{"city", "miravo"}},
		{NewAnalyzerWithStopwords([]string{"FOO"}), "foo Bar", []string{"bar"}},
	}
	for _, c := range cases {
		if got := c.an.Terms(nil, c.text); !slices.Equal(got, c.want) {
			t.Errorf("Terms(%q) = %q, want %q", c.text, got, c.want)
		}
	}
	ix, err := NewIndex(tinyDocs, IndexOptions{Analyzer: NewAnalyzerWithStopwords([]string{"cat"})})
	if err != nil {
		t.Fatal(err)
	}
	if hits := ix.Search("cat", 3); len(hits) != 0 {
		t.Errorf("stopword query matched %v", hits)
	}
}

// TestBM25Concurrent runs queries from many goroutines (meaningful under -race) and checks that
// each gets exactly the single-threaded answer, i.e. pooled score arrays never leak between queries.
func TestBM25Concurrent(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	docs := make([]Doc, 300)
	for i := range docs {
		docs[i] = Doc{Text: randomText(rng, 10, 30)}
	}
	ix, err := NewIndex(docs, IndexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	queries := make([]string, 40)
	want := make([][]Hit, len(queries))
	for i := range queries {
		queries[i] = randomText(rng, 3, 30)
		want[i] = ix.Search(queries[i], 5)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 20; r++ {
				for i, q := range queries {
					if got := ix.Search(q, 5); !slices.Equal(got, want[i]) {
						errs <- fmt.Sprintf("goroutine %d query %q: %v, want %v", g, q, got, want[i])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// randomText draws n words from a vocabulary of v synthetic words.
func randomText(rng *rand.Rand, n, v int) string {
	b := make([]byte, 0, n*4)
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ' ')
		}
		b = fmt.Appendf(b, "w%d", rng.IntN(v))
	}
	return string(b)
}
