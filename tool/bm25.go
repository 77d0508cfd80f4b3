package tool

import (
	"fmt"
	"math"
	"slices"
	"sync"
)

// Okapi BM25 (Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond",
// 2009). A document d scores, for each distinct query term t it contains,
//
//	idf(t) · tf(t,d)·(k1+1) / (tf(t,d) + k1·(1 − b + b·|d|/avgdl))
//
// with idf(t) = ln(1 + (N − df(t) + 0.5)/(df(t) + 0.5)), the Lucene form that stays positive for
// terms in more than half the documents (the textbook form goes negative and would rank a
// document lower for matching). |d| counts the terms of title and text together.
const (
	DefaultK1 = 1.2
	DefaultB  = 0.75
)

// Doc is one searchable document. Title and Text are both indexed; Title is shown first in
// search results.
type Doc struct {
	Title string
	Text  string
}

// IndexOptions configure NewIndex. The zero value means k1=1.2, b=0.75, no stopwords.
type IndexOptions struct {
	K1       float64 // term-frequency saturation; 0 means DefaultK1
	B        float64 // length normalization in (0, 1]; 0 means DefaultB (set NoLength for b = 0)
	NoLength bool    // disable length normalization (b = 0)
	Analyzer Analyzer
}

// Hit is one search result: the document's position in the slice given to NewIndex, and its score.
type Hit struct {
	Doc   int
	Score float64
}

// Index is an immutable in-memory BM25 index. It is safe for concurrent Search calls.
//
// Postings are stored flat (CSR): the postings of term t are postDoc/postW[offsets[t]:offsets[t+1]],
// sorted by document, so an index of 100k short documents is a handful of large slices rather
// than a million small ones. Each posting holds its whole BM25 term weight, computed at build
// time (the index is immutable, so nothing it depends on changes): a query then costs one load
// and one add per posting instead of a division.
type Index struct {
	an      Analyzer
	docs    []Doc
	terms   map[string]int32
	nterms  int
	offsets []int32 // len nterms+1
	postDoc []int32
	postW   []float32 // idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·|d|/avgdl))

	scratch sync.Pool // *accumulator, so concurrent queries do not share score arrays
}

// accumulator holds one query's per-document scores; touched lists the documents to reset.
type accumulator struct {
	score   []float32
	touched []int32
}

// NewIndex builds an index over docs. The index keeps docs (for Doc and snippets) but never
// modifies them.
func NewIndex(docs []Doc, opt IndexOptions) (*Index, error) {
	k1, b := opt.K1, opt.B
	if k1 == 0 {
		k1 = DefaultK1
	}
	if b == 0 {
		b = DefaultB
	}
	if opt.NoLength {
		b = 0
	}
	if k1 < 0 || math.IsNaN(k1) || math.IsInf(k1, 0) {
		return nil, fmt.Errorf("bm25: k1 must be a finite number >= 0, got %v", k1)
	}
	if b < 0 || b > 1 || math.IsNaN(b) {
		return nil, fmt.Errorf("bm25: b must be in [0, 1], got %v", b)
	}
	if len(docs) > math.MaxInt32 {
		return nil, fmt.Errorf("bm25: %d documents exceed the index limit of %d", len(docs), math.MaxInt32)
	}
	ix := &Index{an: opt.Analyzer, docs: docs, terms: map[string]int32{}}

	// Pass 1: per document, its distinct term ids with frequencies, appended to one list.
	type entry struct {
		term int32
		tf   uint16
	}
	var (
		entries  []entry
		docStart = make([]int32, len(docs)+1)
		lens     = make([]int32, len(docs))
		buf      []string
		ids      []int32
		df       []int32
		total    int64
	)
	for d, doc := range docs {
		buf = ix.an.Terms(buf[:0], doc.Title)
		buf = ix.an.Terms(buf, doc.Text)
		lens[d] = int32(min(len(buf), math.MaxInt32))
		total += int64(len(buf))
		ids = ids[:0]
		for _, t := range buf {
			id, ok := ix.terms[t]
			if !ok {
				id = int32(len(ix.terms))
				ix.terms[t] = id
				df = append(df, 0)
			}
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for i := 0; i < len(ids); {
			j := i + 1
			for j < len(ids) && ids[j] == ids[i] {
				j++
			}
			entries = append(entries, entry{ids[i], uint16(min(j-i, math.MaxUint16))})
			df[ids[i]]++
			i = j
		}
		if len(entries) > math.MaxInt32 {
			return nil, fmt.Errorf("bm25: more than %d postings", math.MaxInt32)
		}
		docStart[d+1] = int32(len(entries))
	}

	n := float64(len(docs))
	idf := make([]float64, len(df))
	for t, f := range df {
		idf[t] = math.Log(1 + (n-float64(f)+0.5)/(float64(f)+0.5))
	}
	avgdl := 0.0
	if total > 0 {
		avgdl = float64(total) / n
	}

	// Pass 2: counting sort of the entries by term into flat postings, documents in order.
	nt := len(df)
	ix.nterms = nt
	ix.offsets = make([]int32, nt+1)
	for t, c := range df {
		ix.offsets[t+1] = ix.offsets[t] + c
	}
	ix.postDoc = make([]int32, len(entries))
	ix.postW = make([]float32, len(entries))
	next := slices.Clone(ix.offsets[:nt])
	for d := range docs {
		rel := 1.0
		if avgdl > 0 {
			rel = float64(lens[d]) / avgdl
		}
		norm := k1 * (1 - b + b*rel)
		for _, e := range entries[docStart[d]:docStart[d+1]] {
			p := next[e.term]
			tf := float64(e.tf)
			ix.postDoc[p] = int32(d)
			ix.postW[p] = float32(idf[e.term] * tf * (k1 + 1) / (tf + norm))
			next[e.term]++
		}
	}
	ix.scratch.New = func() any { return &accumulator{score: make([]float32, len(docs))} }
	return ix, nil
}

// Len is the number of documents.
func (ix *Index) Len() int { return len(ix.docs) }

// Terms is the size of the vocabulary.
func (ix *Index) Terms() int { return ix.nterms }

// Doc returns document i as given to NewIndex.
func (ix *Index) Doc(i int) Doc { return ix.docs[i] }

// Analyzer is the analyzer the index was built with; queries go through it too.
func (ix *Index) Analyzer() Analyzer { return ix.an }

// Search returns the k best documents for query, best first. Ties in score go to the lower
// document position, so results are deterministic. Query terms count once each however often they
// are repeated; terms absent from the index are ignored. No match gives an empty result.
func (ix *Index) Search(query string, k int) []Hit {
	if k <= 0 || len(ix.docs) == 0 {
		return nil
	}
	qterms := ix.queryTerms(query)
	if len(qterms) == 0 {
		return nil
	}
	acc := ix.scratch.Get().(*accumulator)
	defer ix.scratch.Put(acc)
	for _, t := range qterms {
		lo, hi := ix.offsets[t], ix.offsets[t+1]
		docs, ws := ix.postDoc[lo:hi], ix.postW[lo:hi]
		for p, d := range docs {
			if acc.score[d] == 0 {
				acc.touched = append(acc.touched, d)
			}
			acc.score[d] += ws[p]
		}
	}
	top := topK{k: k}
	for _, d := range acc.touched {
		top.offer(Hit{Doc: int(d), Score: float64(acc.score[d])})
		acc.score[d] = 0
	}
	acc.touched = acc.touched[:0]
	return top.sorted()
}

// queryTerms maps query text to distinct known term ids, in first-occurrence order so that
// floating-point accumulation order, and so every score, is reproducible.
func (ix *Index) queryTerms(query string) []int32 {
	words := ix.an.Terms(nil, query)
	out := make([]int32, 0, len(words))
	for _, w := range words {
		id, ok := ix.terms[w]
		if ok && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}
