package tool

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// benchCorpus is 100k synthetic documents: a title of 2 words and a text of 15–45 words drawn
// from a Zipf(1.1) distribution over a 50k-word vocabulary, so a few terms have long postings and
// most are rare, as in natural text. Generation is seeded, so every run indexes the same corpus.
// Two query sets: "zipf" draws 2–4 terms from the same distribution (so most queries include a
// term found in nearly every document), "rare" skips the 100 most frequent terms, as queries do
// after stopword removal.
var benchCorpus = sync.OnceValues(func() ([]Doc, map[string][]string) {
	const nDocs, vocab = 100_000, 50_000
	rng := rand.New(rand.NewPCG(2025, 7))
	zipf := rand.NewZipf(rng, 1.1, 1, vocab-1)
	wordsFrom := func(n int, skip uint64) string {
		b := make([]byte, 0, n*7)
		for i := 0; i < n; i++ {
			if i > 0 {
				b = append(b, ' ')
			}
			w := zipf.Uint64()
			for w < skip {
				w = zipf.Uint64()
			}
			b = fmt.Appendf(b, "t%x", w)
		}
		return string(b)
	}
	words := func(n int) string { return wordsFrom(n, 0) }
	docs := make([]Doc, nDocs)
	for i := range docs {
		docs[i] = Doc{Title: words(2), Text: words(15 + rng.IntN(31))}
	}
	queries := map[string][]string{}
	for _, set := range []struct {
		name string
		skip uint64
	}{{"zipf", 0}, {"rare", 100}} {
		qs := make([]string, 2000)
		for i := range qs {
			qs[i] = wordsFrom(2+rng.IntN(3), set.skip)
		}
		queries[set.name] = qs
	}
	return docs, queries
})

// BenchmarkBM25Build reports index build time (ns/op) and the heap the index retains (MiB).
func BenchmarkBM25Build(b *testing.B) {
	docs, _ := benchCorpus()
	var ix *Index
	var before, after runtime.MemStats
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&before)
		var err error
		ix, err = NewIndex(docs, IndexOptions{})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB")
	b.ReportMetric(float64(ix.Terms()), "terms")
}

// BenchmarkBM25Query reports per-query latency percentiles over 2000 queries of 2–4 terms, top 10.
func BenchmarkBM25Query(b *testing.B) {
	docs, sets := benchCorpus()
	ix, err := NewIndex(docs, IndexOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"zipf", "rare"} {
		b.Run(name, func(b *testing.B) { benchQueries(b, ix, sets[name]) })
	}
}

func benchQueries(b *testing.B, ix *Index, queries []string) {
	var lat []time.Duration
	i := 0
	for b.Loop() {
		q := queries[i%len(queries)]
		i++
		t0 := time.Now()
		if ix.Search(q, 10) == nil {
			b.Fatalf("query %q found nothing", q)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkSearchToolCall is one tool call end to end: JSON arguments, search, snippet rendering.
func BenchmarkSearchToolCall(b *testing.B) {
	docs, sets := benchCorpus()
	queries := sets["zipf"]
	ix, err := NewIndex(docs, IndexOptions{})
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewSearch(ix, SearchOptions{})
	if err != nil {
		b.Fatal(err)
	}
	args := make([][]byte, len(queries))
	for i, q := range queries {
		args[i] = fmt.Appendf(nil, `{"query":%q,"k":3}`, q)
	}
	i := 0
	for b.Loop() {
		if _, err := s.Call(b.Context(), args[i%len(args)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
