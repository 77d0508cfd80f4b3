package model

import (
	"fmt"

	"github.com/agentrl/agentrl/model/kernels"
)

// KVCache holds the keys and values of decoded tokens for a fixed number of sequence slots, each
// up to maxLen tokens, allocated once and reused: Reset empties a slot without freeing anything.
// It belongs to the model config it was made for.
type KVCache struct {
	cfg           Config
	slots, maxLen int
	k             []float32 // (Layers, slots, KVHeads, kernels.KeyBlocksLen(maxLen, HeadDim))
	v             []float32 // (Layers, slots, KVHeads, maxLen, HeadDim)
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
	heads := m.Cfg.Layers * slots * m.Cfg.KVHeads
	c.k = make([]float32, heads*kernels.KeyBlocksLen(c.maxLen, m.Cfg.HeadDim()))
	c.v = make([]float32, heads*c.maxLen*m.Cfg.HeadDim())
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

// headSlot returns the keys and values of key/value head g of slot in layer l. The keys are in
// kernels' key-block layout (blocks of kernels.KeyBlock keys, each HeadDim×KeyBlock), so the
// scores of a decode step stream a head's keys as one contiguous run; the values are (maxLen,
// HeadDim). Each head's keys and values are contiguous.
func (c *KVCache) headSlot(l, slot, g int) (kb, v []float32) {
	hd := c.cfg.HeadDim()
	ksize, vsize := kernels.KeyBlocksLen(c.maxLen, hd), c.maxLen*hd
	h := (l*c.slots+slot)*c.cfg.KVHeads + g
	return c.k[h*ksize : (h+1)*ksize], c.v[h*vsize : (h+1)*vsize]
}
