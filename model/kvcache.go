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
	// k16 and v16 replace k and v in a bfloat16 cache (NewKVCacheAs), in the same layouts.
	k16, v16 []uint16
	lens     []int
	err      error // a size error from NewKVCache, reported by every use
}

// NewKVCache allocates a cache of slots sequences of up to maxLen tokens. maxLen above the
// model's MaxSeq is lowered to MaxSeq (there are no positions beyond it). Non-positive sizes give
// a cache whose every Step and Prefill returns an error saying so.
func (m *Model) NewKVCache(slots, maxLen int) *KVCache { return m.newKVCache(slots, maxLen, F32) }

func (m *Model) newKVCache(slots, maxLen int, p Precision) *KVCache {
	c := &KVCache{cfg: m.Cfg, slots: slots, maxLen: min(maxLen, m.Cfg.MaxSeq)}
	if slots <= 0 || maxLen <= 0 {
		c.err = fmt.Errorf("model: KV cache needs positive slots and length, got %d and %d", slots, maxLen)
		c.slots, c.maxLen = 0, 0
		return c
	}
	heads := m.Cfg.Layers * slots * m.Cfg.KVHeads
	nk, nv := heads*kernels.KeyBlocksLen(c.maxLen, m.Cfg.HeadDim()), heads*c.maxLen*m.Cfg.HeadDim()
	if p.Exact() {
		c.k, c.v = make([]float32, nk), make([]float32, nv)
	} else {
		c.k16, c.v16 = make([]uint16, nk), make([]uint16, nv)
	}
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
	k, vs := c.headRange(l, slot, g)
	return c.k[k[0]:k[1]], c.v[vs[0]:vs[1]]
}

// headRange is where the keys and the values of key/value head g of slot in layer l lie in the
// cache's arrays (either precision's).
func (c *KVCache) headRange(l, slot, g int) (k, v [2]int) {
	hd := c.cfg.HeadDim()
	ksize, vsize := kernels.KeyBlocksLen(c.maxLen, hd), c.maxLen*hd
	h := (l*c.slots+slot)*c.cfg.KVHeads + g
	return [2]int{h * ksize, (h + 1) * ksize}, [2]int{h * vsize, (h + 1) * vsize}
}
