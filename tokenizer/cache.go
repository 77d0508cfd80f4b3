package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
)

const (
	cacheSlots    = 1 << 16 // bounded: at most this many words are remembered
	cacheBits     = 16
	maxCachedWord = 64 // longer words are rare and would pin memory; they are recomputed
)

// wordCache remembers the BPE result of recent words. It is two-way set associative: a word hashes
// to a pair of slots and takes an empty one, or evicts the one its hash picks, so two frequent
// words that collide do not keep evicting each other. Slots are atomic pointers to immutable
// entries: readers never lock and never see a torn entry; a lost race only costs a recomputation.
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

// set returns the first slot of the word's pair and the hash bit that picks a victim.
func (c *wordCache) set(word string) (int, int) {
	h := maphash.String(c.seed, word)
	// The top bits of the hash spread better than the bottom ones for short keys.
	return int(h>>(64-cacheBits)) &^ 1, int(h & 1)
}

func (c *wordCache) get(word string) ([]int32, bool) {
	i, _ := c.set(word)
	if e := c.slots[i].Load(); e != nil && e.word == word {
		return e.ids, true
	}
	if e := c.slots[i+1].Load(); e != nil && e.word == word {
		return e.ids, true
	}
	return nil, false
}

// put stores copies: word may be a slice of a large text that must not be kept alive, and ids is
// the caller's buffer.
func (c *wordCache) put(word string, ids []int32) {
	i, victim := c.set(word)
	e := &cacheEntry{word: strings.Clone(word), ids: append([]int32(nil), ids...)}
	switch {
	case c.slots[i].Load() == nil:
		c.slots[i].Store(e)
	case c.slots[i+1].Load() == nil:
		c.slots[i+1].Store(e)
	default:
		c.slots[i+victim].Store(e)
	}
}
