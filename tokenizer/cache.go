package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
)

const (
	cacheSlots      = 1 << 15 // bounded: at most this many words are remembered
	maxCachedWord   = 64      // longer words are rare and would pin memory; they are recomputed
	cacheSlotsShift = 64 - 15
)

// wordCache remembers the BPE result of recent words. It is direct-mapped: a word hashes to one
// slot and a newer word evicts the older one. Slots are atomic pointers to immutable entries, so
// readers never lock and never see a torn entry; a lost race only costs a recomputation.
type wordCache struct {
	seed  maphash.Seed
	slots []atomic.Pointer[cacheEntry]
}

type cacheEntry struct {
	word string
	ids  []int32
}

func newWordCache() *wordCache {
	return &wordCache{seed: maphash.MakeSeed(), slots: make([]atomic.Pointer[cacheEntry], cacheSlots)}
}

func (c *wordCache) slot(word string) *atomic.Pointer[cacheEntry] {
	// The top bits of the hash spread better than the bottom ones for short keys.
	return &c.slots[maphash.String(c.seed, word)>>cacheSlotsShift]
}

func (c *wordCache) get(word string) ([]int32, bool) {
	e := c.slot(word).Load()
	if e == nil || e.word != word {
		return nil, false
	}
	return e.ids, true
}

// put stores copies: word may be a slice of a large text that must not be kept alive, and ids is
// the caller's buffer.
func (c *wordCache) put(word string, ids []int32) {
	e := &cacheEntry{word: strings.Clone(word), ids: append([]int32(nil), ids...)}
	c.slot(word).Store(e)
}
