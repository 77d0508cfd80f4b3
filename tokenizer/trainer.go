package tokenizer

// trainer holds the state of one BPE training run: unique words as symbol sequences with their
// frequencies, the count of every adjacent pair, and for every pair the words it may occur in.
// A merge touches only the words listed for its pair and updates counts by difference; a lazy
// max-heap yields the next pair (entries whose count went stale are re-queued when popped).
type trainer struct {
	raw     []string         // raw bytes of each id; "" for added tokens
	rawID   map[string]int32 // raw bytes -> id, for bytes and merged tokens
	blocked map[string]bool  // byte-level spellings of added tokens, never produced by a merge
	merges  [][2]int32

	words   []trainWord
	counts  map[uint64]int64
	where   map[uint64][]int32
	stamp   []int32 // round in which each word was last merged, to skip duplicates in where
	touched map[uint64]struct{}
	heap    pairHeap
}

type trainWord struct {
	sym  []int32
	freq int64
}

func newTrainer(added []addedToken) *trainer {
	tr := &trainer{
		raw:     make([]string, len(added), len(added)+256),
		rawID:   map[string]int32{},
		blocked: map[string]bool{},
		counts:  map[uint64]int64{},
		where:   map[uint64][]int32{},
		touched: map[uint64]struct{}{},
	}
	for _, a := range added {
		tr.blocked[a.content] = true
	}
	for b := 0; b < 256; b++ {
		tr.rawID[string([]byte{byte(b)})] = int32(len(tr.raw))
		tr.raw = append(tr.raw, string([]byte{byte(b)}))
	}
	return tr
}

// countWords pre-tokenizes the corpus (added tokens cut out) and builds the pair statistics.
func (tr *trainer) countWords(corpus []string, pre preTokenizer, m *addedMatcher) {
	freq := map[string]int64{}
	count := func(word string) { freq[word]++ }
	for _, doc := range corpus {
		for i := 0; i < len(doc); {
			start, end, _, ok := m.find(doc, i)
			if !ok {
				start, end = len(doc), len(doc)
			}
			pre.forEachWord(doc[i:start], count)
			i = end
		}
	}
	tr.words = make([]trainWord, 0, len(freq))
	for word, f := range freq {
		sym := make([]int32, len(word))
		for i := 0; i < len(word); i++ {
			sym[i] = tr.rawID[word[i:i+1]]
		}
		wi := int32(len(tr.words))
		tr.words = append(tr.words, trainWord{sym: sym, freq: f})
		for i := 0; i+1 < len(sym); i++ {
			tr.add(pairKey(sym[i], sym[i+1]), f, wi)
		}
	}
	tr.stamp = make([]int32, len(tr.words))
	for p, c := range tr.counts {
		tr.heap.push(pairCount{count: c, pair: p})
	}
}

// add changes a pair's count; a positive change records that word wi holds the pair.
func (tr *trainer) add(p uint64, delta int64, wi int32) {
	tr.counts[p] += delta
	if delta <= 0 {
		return
	}
	if ws := tr.where[p]; len(ws) == 0 || ws[len(ws)-1] != wi {
		tr.where[p] = append(ws, wi)
	}
	tr.touched[p] = struct{}{}
}

// learn merges pairs until the vocabulary has vocabSize ids or no pair occurs minFreq times.
func (tr *trainer) learn(vocabSize int, minFreq int64) {
	for round := int32(1); len(tr.raw) < vocabSize && len(tr.heap) > 0; {
		top := tr.heap.pop()
		cur := tr.counts[top.pair]
		if cur != top.count {
			if cur > 0 {
				tr.heap.push(pairCount{count: cur, pair: top.pair})
			}
			continue
		}
		if cur < minFreq {
			break
		}
		a, b := int32(top.pair>>32), int32(uint32(top.pair))
		raw := tr.raw[a] + tr.raw[b]
		if tr.blocked[byteLevelString(raw)] {
			delete(tr.counts, top.pair)
			continue
		}
		id, exists := tr.rawID[raw]
		if !exists {
			id = int32(len(tr.raw))
			tr.raw = append(tr.raw, raw)
			tr.rawID[raw] = id
		}
		tr.merges = append(tr.merges, [2]int32{a, b})
		for _, wi := range tr.where[top.pair] {
			if tr.stamp[wi] == round {
				continue
			}
			tr.stamp[wi] = round
			tr.mergeWord(wi, a, b, id, top.pair)
		}
		delete(tr.where, top.pair)
		delete(tr.counts, top.pair)
		for p := range tr.touched {
			if c := tr.counts[p]; c > 0 {
				tr.heap.push(pairCount{count: c, pair: p})
			}
			delete(tr.touched, p)
		}
		round++
	}
}

// mergeWord replaces every non-overlapping (a, b), left to right, in word wi by n and updates the
// counts of the neighbouring pairs. Changes to the merged pair itself are dropped: it is gone.
func (tr *trainer) mergeWord(wi, a, b, n int32, merged uint64) {
	w := &tr.words[wi]
	sym := w.sym
	out := sym[:0] // compacts in place: writes never pass reads
	for i := 0; i < len(sym); {
		if i+1 < len(sym) && sym[i] == a && sym[i+1] == b {
			if len(out) > 0 {
				prev := out[len(out)-1]
				tr.change(pairKey(prev, a), -w.freq, wi, merged)
				tr.change(pairKey(prev, n), w.freq, wi, merged)
			}
			if i+2 < len(sym) {
				nx := sym[i+2]
				tr.change(pairKey(b, nx), -w.freq, wi, merged)
				tr.change(pairKey(n, nx), w.freq, wi, merged)
			}
			out = append(out, n)
			i += 2
			continue
		}
		out = append(out, sym[i])
		i++
	}
	w.sym = out
}

func (tr *trainer) change(p uint64, delta int64, wi int32, merged uint64) {
	if p != merged {
		tr.add(p, delta, wi)
	}
}

// pairCount is a heap entry: a pair and its count when it was pushed.
type pairCount struct {
	count int64
	pair  uint64
}

// pairHeap is a max-heap on count, then the smallest pair (left id, then right id): the fixed
// tie-break that makes training deterministic.
type pairHeap []pairCount

func (h pairHeap) before(i, j int) bool {
	if h[i].count != h[j].count {
		return h[i].count > h[j].count
	}
	return h[i].pair < h[j].pair
}

func (h *pairHeap) push(x pairCount) {
	*h = append(*h, x)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.before(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *pairHeap) pop() pairCount {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s.before(l, m) {
			m = l
		}
		if r < len(s) && s.before(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
