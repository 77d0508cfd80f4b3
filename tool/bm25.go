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

	scratch sync.Pool // *queryScratch, so concurrent queries do not share working memory
}

// queryScratch is one query's working memory, reused from query to query so that a search
// allocates nothing but its result: a dense score per document with the list of documents touched
// (only those are reset), the query's term ids, a buffer for lowering a word, the top-k heap, and
// a buffer the search tool renders its answer in.
type queryScratch struct {
	score   []float32
	touched []int32
	terms   []int32
	word    []byte
	top     topK
	out     []byte
	line    []byte
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
	ix.scratch.New = func() any { return &queryScratch{score: make([]float32, len(docs))} }
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
	sc := ix.scratch.Get().(*queryScratch)
	defer ix.scratch.Put(sc)
	hits := ix.search(sc, query, k)
	if len(hits) == 0 {
		return nil
	}
	return slices.Clone(hits)
}

// search scores query into sc and returns the k best hits, best first, in sc's heap: they are
// valid until sc is used again. k must be positive.
func (ix *Index) search(sc *queryScratch, query string, k int) []Hit {
	top := &sc.top
	top.reset(k)
	qterms := ix.queryTerms(sc, query)
	if len(qterms) == 0 {
		return nil
	}
	score := sc.score
	for _, t := range qterms {
		lo, hi := ix.offsets[t], ix.offsets[t+1]
		docs, ws := ix.postDoc[lo:hi], ix.postW[lo:hi]
		for p, d := range docs {
			if score[d] == 0 {
				sc.touched = append(sc.touched, d)
			}
			score[d] += ws[p]
		}
	}
	for _, d := range sc.touched {
		s := float64(score[d])
		score[d] = 0
		// Most documents lose to the worst of a full heap; skip building a hit for them.
		if len(top.h) == k && s < top.h[0].Score {
			continue
		}
		top.offer(Hit{Doc: int(d), Score: s})
	}
	sc.touched = sc.touched[:0]
	return top.sorted()
}

// queryTerms maps query text to distinct known term ids, in first-occurrence order so that
// floating-point accumulation order, and so every score, is reproducible. It analyzes the query
// as Analyzer.Terms does, in sc's buffers.
func (ix *Index) queryTerms(sc *queryScratch, query string) []int32 {
	ids := sc.terms[:0]
	for i := 0; ; {
		start, end, ok := nextWord(query, i)
		if !ok {
			break
		}
		i = end
		sc.word = appendLower(sc.word[:0], query[start:end])
		if ix.an.Stopwords[string(sc.word)] {
			continue
		}
		if id, ok := ix.terms[string(sc.word)]; ok && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	sc.terms = ids
	return ids
}
