package model

import (
	"fmt"

	"github.com/agentrl/agentrl/model/kernels"
)

// Precision is a number format decode steps (Step, Prefill) hold the packed weights
// (PackDecodeWeightsAs) or the KV cache (NewKVCacheAs) in. Training and every learner
// computation read the float32 Params and are not affected.
type Precision string

const (
	// F32 decodes with the float32 weights: bit for bit the logits of the training forward pass.
	F32 Precision = "f32"
	// BF16 rounds to bfloat16: a copy of the projection weights and the LM head
	// (kernels.PackedBF16), or the keys and values as they are stored; activations, norms,
	// embeddings, softmax and every sum stay float32. A step streams half the bytes of that
	// part; the logits differ from the float32 ones by the rounding, so a sampler using them
	// samples from a distribution close to, but not the same as, the one the float32 weights
	// define.
	BF16 Precision = "bf16"
)

// ParsePrecision reads a precision by name; "" is F32.
func ParsePrecision(s string) (Precision, error) {
	switch Precision(s) {
	case "", F32:
		return F32, nil
	case BF16:
		return BF16, nil
	}
	return "", fmt.Errorf("model: precision %q, want %q or %q", s, F32, BF16)
}

// Exact reports whether decoding in p gives the float32 logits bit for bit.
func (p Precision) Exact() bool { return p == "" || p == F32 }

// DecodePrecision is the number formats of a decode path: of the weights (PackDecodeWeightsAs)
// and of the KV cache (NewKVCacheAs). The zero value is float32 throughout.
type DecodePrecision struct {
	Weights Precision `yaml:"weights,omitempty"`
	KVCache Precision `yaml:"kv_cache,omitempty"`
}

// UnmarshalYAML reads either the block ({weights: bf16, kv_cache: f32}) or one precision for
// both ("bf16").
func (p *DecodePrecision) UnmarshalYAML(unmarshal func(any) error) error {
	var both string
	if err := unmarshal(&both); err == nil {
		v, err := ParsePrecision(both)
		if err != nil {
			return err
		}
		*p = DecodePrecision{Weights: v, KVCache: v}
		return nil
	}
	type plain DecodePrecision
	var q plain
	if err := unmarshal(&q); err != nil {
		return err
	}
	*p = DecodePrecision(q)
	return nil
}

// Exact reports whether decoding in p gives the float32 logits bit for bit: the training forward
// pass's, so that a sampler's logprobs are the learner's.
func (p DecodePrecision) Exact() bool { return p.Weights.Exact() && p.KVCache.Exact() }

// Normalize checks both precisions and spells "" as F32.
func (p DecodePrecision) Normalize() (DecodePrecision, error) {
	w, err := ParsePrecision(string(p.Weights))
	if err != nil {
		return p, fmt.Errorf("model: weights: %w", err)
	}
	kv, err := ParsePrecision(string(p.KVCache))
	if err != nil {
		return p, fmt.Errorf("model: KV cache: %w", err)
	}
	return DecodePrecision{Weights: w, KVCache: kv}, nil
}

// String is "weights bf16, KV cache f32".
func (p DecodePrecision) String() string {
	n, err := p.Normalize()
	if err != nil {
		n = p
	}
	return fmt.Sprintf("weights %s, KV cache %s", n.Weights, n.KVCache)
}

// PackDecodeWeightsAs is PackDecodeWeights in precision p: F32 packs the float32 weights
// (PackDecodeWeights), BF16 rounds a copy of the projection weights and the LM head to bfloat16,
// half their memory, from which Step and Prefill read them until the next pack. Call it again
// after every change of the weights. Within BF16 decoding keeps the float32 path's guarantees
// (a slot's logits do not depend on which other slots share a step; a prefill gives what
// step-by-step decoding gives), but not its equality with the training forward pass.
func (m *Model) PackDecodeWeightsAs(p Precision) error {
	if _, err := ParsePrecision(string(p)); err != nil {
		return err
	}
	m.packDecodeWeights(p)
	return nil
}

// PackedPrecision is the precision of the packed decode weights (F32 when none are packed).
func (m *Model) PackedPrecision() Precision {
	if w := m.dec.packed; w != nil && w.head.bf16 != nil {
		return BF16
	}
	return F32
}

// decodeMatrix is one weight matrix as decode steps multiply by it: packed float32 or bfloat16,
// the other nil.
type decodeMatrix struct {
	f32  *kernels.PackedWeights
	bf16 *kernels.PackedBF16
}

// pack copies w (n×k) in precision p, reusing the storage of an earlier pack in the same one
// and dropping the other's.
func (d *decodeMatrix) pack(p Precision, w []float32, n, k int) {
	if p.Exact() {
		d.bf16 = nil
		if d.f32 == nil {
			d.f32 = new(kernels.PackedWeights)
		}
		d.f32.Pack(w, n, k)
		return
	}
	d.f32 = nil
	if d.bf16 == nil {
		d.bf16 = new(kernels.PackedBF16)
	}
	d.bf16.Pack(w, n, k)
}

// panelWidth is the columns of a panel of d (kernels.PackedWeights.PanelWidth,
// kernels.PackedBF16.PanelWidth): SgemmPackedPart and SgemmBF16Part cut a product at panels.
func (d *decodeMatrix) panelWidth() int {
	if d.bf16 != nil {
		return d.bf16.PanelWidth()
	}
	return d.f32.PanelWidth()
}

// parts is how many parts a product of rows rows by d is cut into for nw goroutines
// (kernels.PackedWeights.Parts, kernels.PackedBF16.Parts).
func (d *decodeMatrix) parts(rows, nw int) int {
	if d.bf16 != nil {
		return d.bf16.Parts(rows, nw)
	}
	return d.f32.Parts(rows, nw)
}

// part computes part (of parts, as d.parts gives) of y = x·Wᵀ + beta·y for n rows
// (kernels.SgemmPackedPart, kernels.SgemmBF16Part).
func (d *decodeMatrix) part(part, parts, n, in int, x []float32, beta float32, y []float32, out int) {
	if d.bf16 != nil {
		kernels.SgemmBF16Part(part, parts, n, 1, x, in, d.bf16, beta, y, out)
		return
	}
	kernels.SgemmPackedPart(part, parts, n, 1, x, in, d.f32, beta, y, out)
}

// NewKVCacheAs is NewKVCache holding the keys and values in precision p: BF16 rounds them to
// bfloat16 as they are stored (kernels.StoreKeyBF16), half the memory, and attends over them
// with kernels.AttentionCachedBF16, which keeps the cache's guarantees (a prefill gives what
// step-by-step decoding gives; a slot's logits do not depend on the slots beside it) but not the
// float32 cache's equality with the training forward pass.
func (m *Model) NewKVCacheAs(slots, maxLen int, p Precision) (*KVCache, error) {
	if _, err := ParsePrecision(string(p)); err != nil {
		return nil, err
	}
	return m.newKVCache(slots, maxLen, p), nil
}

// KVCacheBytesAs is KVCacheBytes for a cache of precision p (NewKVCacheAs): half as much in BF16.
func (c Config) KVCacheBytesAs(slots, maxLen int, p Precision) int64 {
	b := c.KVCacheBytes(slots, maxLen)
	if !p.Exact() {
		b /= 2
	}
	return b
}

// Precision is the number format of the cache's keys and values.
func (c *KVCache) Precision() Precision {
	if c.k16 != nil {
		return BF16
	}
	return F32
}

// attendTaskBF16 is attendTask's cache and attention over a bfloat16 cache, after the RoPE: the
// new keys and values of key/value head g of run r are rounded as they are stored, and every new
// token attends over its slot with kernels.AttentionCachedBF16.
func (m *Model) attendTaskBF16(c *KVCache, l int, r run, g int, d *decodeWorkspace, scratch []float32) {
	cfg := m.Cfg
	Q, hd, nRep := cfg.qkvDim(), cfg.HeadDim(), cfg.Heads/cfg.KVHeads
	qOff, kOff, vOff := cfg.qkvAt(d.packed != nil, g)
	qkv := d.qkv[r.first*Q:]
	kr, vr := c.headRange(l, r.slot, g)
	ckb, cv := c.k16[kr[0]:kr[1]], c.v16[vr[0]:vr[1]]
	for j := 0; j < r.L; j++ {
		row := qkv[j*Q:]
		kernels.StoreKeyBF16(ckb, r.past+j, row[kOff:kOff+hd])
		kernels.ToBF16(cv[(r.past+j)*hd:(r.past+j+1)*hd], row[vOff:vOff+hd])
	}
	kernels.AttentionCachedBF16Window(d.atty[r.first*cfg.attnDim()+g*nRep*hd:], cfg.attnDim(), scratch,
		qkv[qOff:], Q, ckb, cv, hd, r.L, r.past, nRep, hd, cfg.Window(l))
}
