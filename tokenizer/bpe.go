package tokenizer

import (
	"math"
	"unicode/utf8"
)

// noMerge marks an adjacent pair that has no merge rule.
const noMerge = math.MaxUint32

// smallWordSymbols is the length up to which a word is merged by rescanning an array of pair ranks
// (fast for the short words that dominate text); longer words use a heap so that a pathological
// input (a megabyte without spaces) costs O(n log n), not O(n²).
const smallWordSymbols = 64

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// lookupMerge returns the rank of merging a and b and the id of the result.
func (t *Tokenizer) lookupMerge(a, b int32) (rank uint32, id int32) {
	v, ok := t.merges[pairKey(a, b)]
	if !ok {
		return noMerge, -1
	}
	return uint32(v >> 32), int32(uint32(v))
}

// scratch holds the buffers one BPE call needs, reused through a sync.Pool.
type scratch struct {
	sym   []int32
	rank  []uint32
	next  []int32 // merged id for each pair in the small path
	nodes []heapSym
	heap  mergeHeap
	buf   []byte
}

// initialSymbols turns a word into one symbol per byte, as Hugging Face's BPE does with the
// characters of the byte-level string. A byte missing from the vocabulary becomes the unknown
// token if there is one (consecutive ones fused into one with fuse_unk) and is dropped otherwise.
func (t *Tokenizer) initialSymbols(sym []int32, word string) []int32 {
	pendingUnk := false
	for i := 0; i < len(word); i++ {
		id := t.byteID[word[i]]
		if id >= 0 {
			sym = append(sym, id)
			pendingUnk = false
			continue
		}
		if t.unkID < 0 {
			continue
		}
		if t.fuseUnk && pendingUnk {
			continue
		}
		sym = append(sym, t.unkID)
		pendingUnk = true
	}
	return sym
}

// initialChars turns a word into one symbol per character, as Hugging Face's BPE does when no
// ByteLevel pre-tokenizer maps it to bytes. A character missing from the vocabulary becomes its
// <0xNN> byte tokens with byte_fallback (when all exist), or else the unknown token, fused with
// the unknown characters around it when fuse_unk is set; without an unknown token it is dropped.
// An invalid UTF-8 byte counts as one character.
func (t *Tokenizer) initialChars(sym []int32, word string) []int32 {
	pendingUnk := false
	for i := 0; i < len(word); {
		n := 1
		if word[i] >= utf8.RuneSelf {
			_, n = utf8.DecodeRuneInString(word[i:])
		}
		ch := word[i : i+n]
		i += n
		var id int32
		var ok bool
		if n == 1 && ch[0] < utf8.RuneSelf {
			id = t.byteID[ch[0]] // in character mode, the id of each ASCII character
			ok = id >= 0
		} else {
			id, ok = t.vocab[ch]
		}
		if ok {
			if pendingUnk {
				sym = append(sym, t.unkID)
				pendingUnk = false
			}
			sym = append(sym, id)
			continue
		}
		if t.byteFallback && t.allFallback(ch) {
			for k := 0; k < len(ch); k++ {
				sym = append(sym, t.fallbackID[ch[k]])
			}
			continue
		}
		if t.unkID < 0 {
			continue
		}
		if pendingUnk && !t.fuseUnk {
			sym = append(sym, t.unkID)
		}
		pendingUnk = true
	}
	if pendingUnk {
		sym = append(sym, t.unkID)
	}
	return sym
}

func (t *Tokenizer) allFallback(ch string) bool {
	for k := 0; k < len(ch); k++ {
		if t.fallbackID[ch[k]] < 0 {
			return false
		}
	}
	return true
}

// bpe appends the token ids of one pre-tokenized word (raw bytes) to dst.
func (t *Tokenizer) bpe(dst []int32, word string, sc *scratch) []int32 {
	if t.ignoreMerges && !t.byteLevel {
		if id, ok := t.vocab[word]; ok {
			return append(dst, id)
		}
	}
	if t.ignoreMerges && t.byteLevel {
		sc.buf = sc.buf[:0]
		for i := 0; i < len(word); i++ {
			sc.buf = appendByteLevel(sc.buf, word[i])
		}
		if id, ok := t.vocab[string(sc.buf)]; ok {
			return append(dst, id)
		}
	}
	if t.byteLevel {
		sc.sym = t.initialSymbols(sc.sym[:0], word)
	} else {
		sc.sym = t.initialChars(sc.sym[:0], word)
	}
	if len(sc.sym) == 0 {
		return dst
	}
	if len(sc.sym) <= smallWordSymbols {
		return append(dst, t.mergeSmall(sc)...)
	}
	return append(dst, t.mergeHeap(sc)...)
}

func appendByteLevel(buf []byte, b byte) []byte {
	r := byteToRune[b]
	if r < 0x80 {
		return append(buf, byte(r))
	}
	return append(buf, byte(0xC0|r>>6), byte(0x80|r&0x3F))
}

// mergeSmall applies merges to sc.sym: repeatedly the pair with the lowest rank, the leftmost one
// on a tie, which is the order of Hugging Face's priority queue (rank, then position).
func (t *Tokenizer) mergeSmall(sc *scratch) []int32 {
	sym := sc.sym
	n := len(sym)
	if n < 2 {
		return sym
	}
	sc.rank = grow(sc.rank, n-1)
	sc.next = grow(sc.next, n-1)
	rank, next := sc.rank[:n-1], sc.next[:n-1]
	for i := 0; i < n-1; i++ {
		rank[i], next[i] = t.lookupMerge(sym[i], sym[i+1])
	}
	for n > 1 {
		best, bestRank := -1, uint32(noMerge)
		for i, r := range rank[:n-1] {
			if r < bestRank {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			break
		}
		// sym[best] absorbs sym[best+1]; the pair entries shift down by one and the two next to
		// the merged symbol are recomputed.
		sym[best] = next[best]
		copy(sym[best+1:n], sym[best+2:n])
		copy(rank[best:n-2], rank[best+1:n-1])
		copy(next[best:n-2], next[best+1:n-1])
		n--
		if best > 0 {
			rank[best-1], next[best-1] = t.lookupMerge(sym[best-1], sym[best])
		}
		if best < n-1 {
			rank[best], next[best] = t.lookupMerge(sym[best], sym[best+1])
		}
	}
	return sym[:n]
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, 2*n)
	}
	return s[:n]
}

// heapSym is a symbol of a long word in a doubly linked list; merged-away symbols are dead.
type heapSym struct {
	id         int32
	prev, next int32
	dead       bool
}

// mergeItem is a candidate merge of the symbol at pos with its successor: the pair (left, right)
// merges into id.
type mergeItem struct {
	rank        uint32
	pos         int32
	id          int32
	left, right int32
}

// mergeHeap is a binary min-heap on (rank, pos), written out to avoid container/heap's boxing.
type mergeHeap []mergeItem

func (h mergeHeap) less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}

func (h *mergeHeap) push(it mergeItem) {
	*h = append(*h, it)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *mergeHeap) pop() mergeItem {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s.less(l, m) {
			m = l
		}
		if r < len(s) && s.less(r, m) {
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

// mergeHeap is Hugging Face's Word::merge_all: a priority queue of candidate merges with stale
// entries skipped when popped.
func (t *Tokenizer) mergeHeap(sc *scratch) []int32 {
	sym := sc.sym
	n := len(sym)
	sc.nodes = grow(sc.nodes, n)
	nodes := sc.nodes
	for i, id := range sym {
		nodes[i] = heapSym{id: id, prev: int32(i - 1), next: int32(i + 1)}
	}
	nodes[n-1].next = -1
	sc.heap = sc.heap[:0]
	pushPair := func(pos int32) {
		nx := nodes[pos].next
		if nx < 0 {
			return
		}
		if r, id := t.lookupMerge(nodes[pos].id, nodes[nx].id); r != noMerge {
			sc.heap.push(mergeItem{rank: r, pos: pos, id: id, left: nodes[pos].id, right: nodes[nx].id})
		}
	}
	for i := 0; i < n-1; i++ {
		pushPair(int32(i))
	}
	for len(sc.heap) > 0 {
		top := sc.heap.pop()
		cur := &nodes[top.pos]
		if cur.dead || cur.next < 0 {
			continue
		}
		right := &nodes[cur.next]
		if cur.id != top.left || right.id != top.right {
			// A neighbour changed since this entry was pushed. Like Hugging Face, the entry still
			// applies if the new pair merges into the same token.
			if _, id := t.lookupMerge(cur.id, right.id); id != top.id {
				continue
			}
		}
		cur.id = top.id
		right.dead = true
		cur.next = right.next
		if cur.next >= 0 {
			nodes[cur.next].prev = top.pos
		}
		if cur.prev >= 0 {
			pushPair(cur.prev)
		}
		pushPair(top.pos)
	}
	out := sym[:0]
	for i := int32(0); i >= 0; i = nodes[i].next {
		out = append(out, nodes[i].id)
	}
	return out
}
