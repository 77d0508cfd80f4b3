package local

import "slices"

// warmSlots remembers which tokens each KV-cache slot holds so that the next turn of a
// multi-turn episode — whose prompt is the previous prompt, the completion and a new
// observation — prefills only the new tokens. Keys and values are reused only under the weights
// that computed them. Reuse cannot change results: decoding is bit-for-bit the same whether a
// token's keys came from a prefill or from a decode step (this package's batching test).
type warmSlots struct {
	toks    [][]int32 // tokens whose keys and values are in the slot
	version []int32
	used    []uint64 // last use, for least-recently-used eviction
	clock   uint64
}

func newWarmSlots(n int) *warmSlots {
	return &warmSlots{toks: make([][]int32, n), version: make([]int32, n), used: make([]uint64, n)}
}

// pick returns a free slot for prompt and how many of its leading tokens are already cached
// there: the free slot holding the longest proper prefix of prompt under version, or else the
// least recently used free slot (with 0).
func (w *warmSlots) pick(busy []*job, prompt []int32, version int32) (slot, reuse int) {
	slot, lru := -1, -1
	for s := range busy {
		if busy[s] != nil {
			continue
		}
		if lru < 0 || w.used[s] < w.used[lru] {
			lru = s
		}
		c := w.toks[s]
		if w.version[s] == version && len(c) > reuse && len(c) < len(prompt) && slices.Equal(c, prompt[:len(c)]) {
			slot, reuse = s, len(c)
		}
	}
	if slot < 0 {
		slot = lru
	}
	return slot, reuse
}

// start records that slot now holds prompt under version.
func (w *warmSlots) start(slot int, prompt []int32, version int32) {
	w.clock++
	w.used[slot] = w.clock
	w.toks[slot] = append(w.toks[slot][:0], prompt...)
	w.version[slot] = version
}

// extend records tokens appended to slot by decoding.
func (w *warmSlots) extend(slot int, toks []int32) {
	w.toks[slot] = append(w.toks[slot], toks...)
}

// forget marks slot's contents unknown.
func (w *warmSlots) forget(slot int) {
	w.toks[slot] = w.toks[slot][:0]
}
