package model

import (
	"fmt"

	"github.com/agentrl/agentrl/model/kernels"
)

// decodeWorkspace is the scratch of Step and Prefill, grown to the largest call and reused.
type decodeWorkspace struct {
	runs    []run
	pos     []int32
	x, ln   []float32 // (n, C)
	rstd    []float32 // (n)
	qkv     []float32 // (n, qkvDim)
	atty    []float32 // (n, C)
	gu      []float32 // (n, 2·Hidden)
	sw      []float32 // (n, Hidden)
	scratch [][]float32
	packed  *decodeWeights // nil until PackDecodeWeights
}

// decodeWeights is a snapshot of the weight matrices in the decode kernels' layout.
type decodeWeights struct {
	layers []packedLayer
	head   decodeMatrix
}

type packedLayer struct{ qkv, o, gateUp, down decodeMatrix }

// PackDecodeWeights copies the weight matrices into the layout of the decode kernels
// (kernels.PackedWeights), and Step and Prefill read them from that copy from then on; call it
// again after every change of the weights. The results are bit for bit those of the unpacked
// weights; a batch-1 step streams each matrix once instead of transposing it in registers, and a
// batched step skips packing every matrix on every call. The copy takes as much memory as the
// matrices (13.6 MB for DefaultConfig(2048)). PackDecodeWeightsAs packs them in another precision.
func (m *Model) PackDecodeWeights() { m.packDecodeWeights(F32) }

func (m *Model) packDecodeWeights(prec Precision) {
	cfg := m.Cfg
	C, H := cfg.Dim, cfg.Hidden
	w := m.dec.packed
	if w == nil {
		w = &decodeWeights{layers: make([]packedLayer, cfg.Layers)}
	}
	for l := range cfg.Layers {
		p, pl := &m.Params.Layers[l], &w.layers[l]
		pl.qkv.pack(prec, p.QKV, cfg.qkvDim(), C)
		pl.o.pack(prec, p.O, C, C)
		pl.gateUp.pack(prec, p.GateUp, 2*H, C)
		pl.down.pack(prec, p.Down, C, H)
	}
	w.head.pack(prec, m.Params.LMHead, cfg.Vocab, C)
	m.dec.packed = w
}

// run is a stretch of consecutive tokens of one call that extend one slot.
type run struct{ slot, first, L, past int }

// Step appends tokens[i] to slot slots[i] for every i — one token per slot, slots distinct — in
// one batched pass, and writes the logits of the next token of each into
// logits[i·Vocab:(i+1)·Vocab]. Batching across slots turns every projection into one GEMM, which
// is what makes continuous batching pay. A slot's logits are bit for bit the same whichever
// other slots share the step, and the same as after prefilling its tokens (kernels.Sgemm's
// small-m path, kernels.AttentionCached).
func (m *Model) Step(c *KVCache, slots []int, tokens []int32, logits []float32) error {
	if err := m.checkCache(c); err != nil {
		return err
	}
	if len(slots) != len(tokens) {
		return fmt.Errorf("model: Step got %d slots and %d tokens", len(slots), len(tokens))
	}
	if len(logits) != len(tokens)*m.Cfg.Vocab {
		return fmt.Errorf("model: Step needs %d logits (tokens×Vocab), got %d", len(tokens)*m.Cfg.Vocab, len(logits))
	}
	if len(tokens) == 0 {
		return nil
	}
	runs := m.dec.runs[:0]
	for i, s := range slots {
		if s < 0 || s >= c.slots {
			return fmt.Errorf("model: Step slot %d outside [0, %d)", s, c.slots)
		}
		for _, r := range runs {
			if r.slot == s {
				return fmt.Errorf("model: Step lists slot %d twice", s)
			}
		}
		runs = append(runs, run{slot: s, first: i, L: 1, past: c.lens[s]})
	}
	m.dec.runs = runs
	return m.extend(c, runs, tokens, logits, true)
}

// Prefill appends a run of tokens to slot (a prompt, processed as a batch over positions) and
// writes the logits of the token after the last one into logits (Vocab entries).
func (m *Model) Prefill(c *KVCache, slot int, tokens []int32, logits []float32) error {
	if err := m.checkCache(c); err != nil {
		return err
	}
	if slot < 0 || slot >= c.slots {
		return fmt.Errorf("model: Prefill slot %d outside [0, %d)", slot, c.slots)
	}
	if len(tokens) == 0 {
		return fmt.Errorf("model: Prefill needs at least one token")
	}
	if len(logits) != m.Cfg.Vocab {
		return fmt.Errorf("model: Prefill needs %d logits, got %d", m.Cfg.Vocab, len(logits))
	}
	m.dec.runs = append(m.dec.runs[:0], run{slot: slot, first: 0, L: len(tokens), past: c.lens[slot]})
	return m.extend(c, m.dec.runs, tokens, logits, false)
}

func (m *Model) checkCache(c *KVCache) error {
	switch {
	case c == nil:
		return fmt.Errorf("model: nil KV cache")
	case c.err != nil:
		return c.err
	case c.cfg != m.Cfg:
		return fmt.Errorf("model: KV cache was made for a different config")
	}
	return nil
}

// extend runs the new tokens through the model, appends their keys and values to the cache and
// writes logits: after every token (allRows) or after the last one only. Every input is checked
// before anything is written, so an error leaves the cache as it was.
func (m *Model) extend(c *KVCache, runs []run, tokens []int32, logits []float32, allRows bool) error {
	cfg := m.Cfg
	for _, r := range runs {
		if r.past+r.L > c.maxLen {
			return fmt.Errorf("model: slot %d holds %d tokens, %d more exceed its length %d", r.slot, r.past, r.L, c.maxLen)
		}
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= cfg.Vocab {
			return fmt.Errorf("model: token %d at index %d is outside the vocabulary of %d", t, i, cfg.Vocab)
		}
	}
	n, C, Q, H := len(tokens), cfg.Dim, cfg.qkvDim(), cfg.Hidden
	d := m.sizeDecode(n, c.maxLen)
	for _, r := range runs {
		for j := 0; j < r.L; j++ {
			d.pos[r.first+j] = int32(r.past + j)
		}
	}
	x := d.x[:n*C]
	pw := d.packed
	kernels.EmbeddingForward(x, tokens, m.Params.Embed, n, C)
	for l := range cfg.Layers {
		p := &m.Params.Layers[l]
		var qkv, o, gateUp, down *decodeMatrix
		if pw != nil {
			pl := &pw.layers[l]
			qkv, o, gateUp, down = &pl.qkv, &pl.o, &pl.gateUp, &pl.down
		}
		m.norm(d.ln, d.rstd, x, p.AttnNorm, n)
		project(n, Q, C, d.ln, p.QKV, qkv, 0, d.qkv)
		m.ropeRows(d.qkv, d.pos, n, false)
		m.cacheAttention(c, l, runs, d)
		project(n, C, C, d.atty, p.O, o, 1, x)
		m.norm(d.ln, d.rstd, x, p.MLPNorm, n)
		project(n, 2*H, C, d.ln, p.GateUp, gateUp, 0, d.gu)
		m.par.rows(n, minRows, func(lo, hi int) {
			kernels.SwiGLUForward(d.sw[lo*H:hi*H], d.gu[lo*2*H:hi*2*H], hi-lo, H)
		})
		project(n, C, H, d.sw, p.Down, down, 1, x)
	}
	var head *decodeMatrix
	if pw != nil {
		head = &pw.head
	}
	if allRows {
		m.norm(d.ln, d.rstd, x, m.Params.Norm, n)
		project(n, cfg.Vocab, C, d.ln, m.Params.LMHead, head, 0, logits)
	} else {
		last := x[(n-1)*C : n*C]
		m.norm(d.ln, d.rstd, last, m.Params.Norm, 1)
		project(1, cfg.Vocab, C, d.ln, m.Params.LMHead, head, 0, logits)
	}
	for _, r := range runs {
		c.lens[r.slot] += r.L
	}
	return nil
}

// project computes y = x·Wᵀ + beta·y for n rows, W out×in, from packed when it is not nil.
func project(n, out, in int, x, w []float32, packed *decodeMatrix, beta float32, y []float32) {
	if packed != nil {
		packed.apply(n, in, x, beta, y, out)
		return
	}
	kernels.Sgemm(false, true, n, out, in, 1, x, in, w, in, beta, y, out)
}

// norm applies RMSNorm to n rows of x, in parallel when there are enough of them.
func (m *Model) norm(out, rstd, x, weight []float32, n int) {
	C := m.Cfg.Dim
	m.par.rows(n, minRows, func(lo, hi int) {
		kernels.RMSNormForward(out[lo*C:hi*C], rstd[lo:hi], x[lo*C:hi*C], weight, hi-lo, C, m.Cfg.NormEps)
	})
}

// cacheAttention stores the new keys and values of layer l in the cache and attends every new
// token over its slot; tasks are (run, key/value head) pairs and write disjoint outputs.
// kernels.AttentionCached gives a token the same result in a prefill as in a decode step.
func (m *Model) cacheAttention(c *KVCache, l int, runs []run, d *decodeWorkspace) {
	if c.k16 != nil {
		m.cacheAttentionBF16(c, l, runs, d) // decode_precision.go
		return
	}
	cfg := m.Cfg
	Q, hd, nRep := cfg.qkvDim(), cfg.HeadDim(), cfg.Heads/cfg.KVHeads
	kOff, vOff := cfg.Heads*hd, (cfg.Heads+cfg.KVHeads)*hd
	for _, r := range runs {
		for g := range cfg.KVHeads {
			ckb, cv := c.headSlot(l, r.slot, g)
			for j := 0; j < r.L; j++ {
				row := d.qkv[(r.first+j)*Q:]
				kernels.StoreKey(ckb, r.past+j, row[kOff+g*hd:kOff+(g+1)*hd])
				copy(cv[(r.past+j)*hd:(r.past+j+1)*hd], row[vOff+g*hd:vOff+(g+1)*hd])
			}
		}
	}
	m.par.run(len(runs)*cfg.KVHeads, func(worker, i int) {
		r, g := runs[i/cfg.KVHeads], i%cfg.KVHeads
		ckb, cv := c.headSlot(l, r.slot, g)
		kernels.AttentionCached(d.atty[r.first*cfg.Dim+g*nRep*hd:], cfg.Dim, d.scratch[worker],
			d.qkv[r.first*Q+g*nRep*hd:], Q, ckb, cv, hd, r.L, r.past, nRep, hd)
	})
}

// sizeDecode grows the decode workspace to n tokens over slots of up to maxLen.
func (m *Model) sizeDecode(n, maxLen int) *decodeWorkspace {
	d, cfg := &m.dec, m.Cfg
	C := cfg.Dim
	d.pos = growInt(d.pos, n)
	d.x = grow(d.x, n*C)
	d.ln = grow(d.ln, n*C)
	d.rstd = grow(d.rstd, n)
	d.qkv = grow(d.qkv, n*cfg.qkvDim())
	d.atty = grow(d.atty, n*C)
	d.gu = grow(d.gu, n*2*cfg.Hidden)
	d.sw = grow(d.sw, n*cfg.Hidden)
	for len(d.scratch) < m.par.n {
		d.scratch = append(d.scratch, nil)
	}
	for i := range d.scratch {
		// kernels.AttentionCachedScratch of any run of these n tokens in a slot of maxLen.
		d.scratch[i] = grow(d.scratch[i], max(min(n, 64), cfg.Heads/cfg.KVHeads)*kernels.KeyBlocksLen(maxLen, 1))
	}
	return d
}
