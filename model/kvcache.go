package model

import "fmt"

// KVCache holds the keys and values of decoded tokens for a fixed number of sequence slots, each
// up to maxLen tokens, allocated once and reused: Reset empties a slot without freeing anything.
// It belongs to the model config it was made for.
type KVCache struct {
	cfg           Config
	slots, maxLen int
	k, v          []float32 // (Layers, slots, KVHeads, maxLen, HeadDim)
	lens          []int
	err           error // a size error from NewKVCache, reported by every use
}

// NewKVCache allocates a cache of slots sequences of up to maxLen tokens. maxLen above the
// model's MaxSeq is lowered to MaxSeq (there are no positions beyond it). Non-positive sizes give
// a cache whose every Step and Prefill returns an error saying so.
func (m *Model) NewKVCache(slots, maxLen int) *KVCache {
	c := &KVCache{cfg: m.Cfg, slots: slots, maxLen: min(maxLen, m.Cfg.MaxSeq)}
	if slots <= 0 || maxLen <= 0 {
		c.err = fmt.Errorf("model: KV cache needs positive slots and length, got %d and %d", slots, maxLen)
		c.slots, c.maxLen = 0, 0
		return c
	}
	size := m.Cfg.Layers * slots * c.maxLen * m.Cfg.kvDim()
	c.k = make([]float32, size)
	c.v = make([]float32, size)
	c.lens = make([]int, slots)
	return c
}

// Slots is the number of sequence slots.
func (c *KVCache) Slots() int { return c.slots }

// MaxLen is the number of tokens a slot can hold.
func (c *KVCache) MaxLen() int { return c.maxLen }

// Len is the number of tokens in slot (0 for a slot out of range).
func (c *KVCache) Len(slot int) int {
	if slot < 0 || slot >= c.slots {
		return 0
	}
	return c.lens[slot]
}

// Reset empties slot so a new sequence can use it; out-of-range slots are ignored.
func (c *KVCache) Reset(slot int) {
	if slot >= 0 && slot < c.slots {
		c.lens[slot] = 0
	}
}

// headSlot returns the keys and values of key/value head g of slot in layer l: (maxLen,
// HeadDim) each. Each head's keys are contiguous, so attention over a slot streams them.
func (c *KVCache) headSlot(l, slot, g int) (k, v []float32) {
	size := c.maxLen * c.cfg.HeadDim()
	off := ((l*c.slots+slot)*c.cfg.KVHeads + g) * size
	return c.k[off : off+size], c.v[off : off+size]
}
