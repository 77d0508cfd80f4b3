package model

import (
	"errors"
	"fmt"
	"slices"

	"github.com/agentrl/agentrl/model/kernels"
)

// minRows is the smallest chunk of rows worth a goroutine in row-wise kernels.
const minRows = 16

// Forward runs the model over a packed batch and writes, for every position with a target, the
// target's log probability (logprobs) and the entropy of the predicted next-token distribution
// (entropy); other positions get 0. Both slices have Rows·T entries. The activations stay in the
// model's workspace for one Backward on the same batch.
func (m *Model) Forward(b *Batch, logprobs, entropy []float32) error {
	return m.forward(b, logprobs, entropy, nil)
}

// ForwardValues is Forward that also writes, at every position with a target, the value head's
// estimate V of the state the target token is predicted from (values, Rows·T entries; 0
// elsewhere): the final-norm hidden state there times value_head.weight, plus value_head.bias.
// The model must have a value head (AddValueHead).
func (m *Model) ForwardValues(b *Batch, logprobs, entropy, values []float32) error {
	if !m.HasValueHead() {
		return errNoValueHead
	}
	if b != nil && len(values) != b.Rows*b.T {
		return fmt.Errorf("model: ForwardValues needs %d values, got %d", b.Rows*b.T, len(values))
	}
	return m.forward(b, logprobs, entropy, values)
}

// errNoValueHead is returned when values are asked of a model without a value head.
var errNoValueHead = errors.New("model: the model has no value head (AddValueHead)")

func (m *Model) forward(b *Batch, logprobs, entropy, values []float32) error {
	spans, err := b.check(m.Cfg, m.train.spans)
	if err != nil {
		return err
	}
	n := b.Rows * b.T
	if len(logprobs) != n || len(entropy) != n {
		return fmt.Errorf("model: Forward needs %d logprobs and entropies, got %d and %d", n, len(logprobs), len(entropy))
	}
	w := &m.train
	// Longest sequences first: attention's tasks are (span, key/value head) pairs whose cost
	// grows with the square of the span, and handing out the longest first keeps a long one
	// from running alone at the end of the parallel region (attnTaskAt). Each task writes its
	// own outputs, so the order changes no result.
	slices.SortStableFunc(spans, func(a, b span) int { return (b.end - b.start) - (a.end - a.start) })
	w.spans = spans
	w.fwd = nil
	w.size(m.Cfg, b.Rows, b.T, m.par.n)

	c := m.Cfg
	C := c.Dim
	m.packThin()
	if !m.thinModel() { // a thin model's first block looks its rows up (blockForward)
		m.par.rows(n, minRows, func(lo, hi int) {
			kernels.EmbeddingForward(w.res[lo*C:hi*C], b.Tokens[lo:hi], m.Params.Embed, hi-lo, C)
		})
	}
	for l := 0; l < c.Layers; l++ {
		m.blockForward(l, b)
	}

	// Final norm, then the LM head only on target positions: in RL batches most tokens (prompt,
	// tool output) have no target, and the head is the widest GEMM of the model.
	x := w.res[c.Layers*n*C : (c.Layers+1)*n*C]
	m.par.rows(n, minRows, func(lo, hi int) {
		kernels.RMSNormForward(w.lnf[lo*C:hi*C], w.rstdf[lo:hi], x[lo*C:hi*C], m.Params.Norm, hi-lo, C, c.NormEps)
	})
	nt := 0
	for _, t := range b.Targets {
		if t >= 0 {
			nt++
		}
	}
	w.sizeHead(c, nt)
	nt = 0
	for i, t := range b.Targets {
		if t >= 0 {
			w.tgtIdx[nt], w.tgt[nt] = int32(i), t
			nt++
		}
	}
	gather := func(lo, hi int) { // target rows [lo, hi) of lnf into lnfT
		for j, i := range w.tgtIdx[lo:hi] {
			copy(w.lnfT[(lo+j)*C:(lo+j+1)*C], w.lnf[int(i)*C:(int(i)+1)*C])
		}
	}
	if nt > 0 && m.thinModel() {
		// A chunk's logits go from the product to the softmax while they are in cache (a
		// chunk of 256 rows of 512 is 512 KiB; all of them 4 MiB).
		V := c.Vocab
		m.par.rows(nt, minRows, func(lo, hi int) {
			gather(lo, hi)
			kernels.SgemmPackedPart(0, 1, hi-lo, 1, w.lnfT[lo*C:hi*C], C, &w.head, 0, w.logits[lo*V:hi*V], V)
			kernels.LogprobEntropyForward(w.lpT[lo:hi], w.entT[lo:hi], w.headLSE[lo:hi],
				w.logits[lo*V:hi*V], w.tgt[lo:hi], hi-lo, V)
		})
	} else if nt > 0 {
		m.par.rows(nt, minRows, gather)
		kernels.Sgemm(false, true, nt, c.Vocab, C, 1, w.lnfT, C, m.Params.LMHead, C, 0, w.logits, c.Vocab)
		m.par.rows(nt, 4, func(lo, hi int) {
			kernels.LogprobEntropyForward(w.lpT[lo:hi], w.entT[lo:hi], w.headLSE[lo:hi],
				w.logits[lo*c.Vocab:hi*c.Vocab], w.tgt[lo:hi], hi-lo, c.Vocab)
		})
	}
	clear(logprobs)
	clear(entropy)
	for i, idx := range w.tgtIdx[:nt] {
		logprobs[idx], entropy[idx] = w.lpT[i], w.entT[i]
	}
	if values != nil {
		clear(values)
		for i, idx := range w.tgtIdx[:nt] {
			values[idx] = m.valueOf(w.lnfT[i*C : (i+1)*C])
		}
	}
	w.fwd = b
	return nil
}

// valueOf is the value head on one final-norm hidden state h, summed in float64 in a fixed order.
func (m *Model) valueOf(h []float32) float32 {
	v := float64(m.Params.ValueBias[0])
	for c, x := range h {
		v += float64(x) * float64(m.Params.Value[c])
	}
	return float32(v)
}

// blockForward runs decoder block l on the workspace's residual stream.
func (m *Model) blockForward(l int, b *Batch) {
	c, w, p := m.Cfg, &m.train, &m.Params.Layers[l]
	n, C, Q, H, A := b.Rows*b.T, m.Cfg.Dim, m.Cfg.qkvDim(), m.Cfg.Hidden, m.Cfg.attnDim()
	x := w.res[l*n*C : (l+1)*n*C]
	ln1 := w.ln1[l*n*C : (l+1)*n*C]
	rstd1 := w.rstd1[l*n : (l+1)*n]
	qkv := w.qkv[l*n*Q : (l+1)*n*Q]
	atty := w.atty[l*n*A : (l+1)*n*A]
	mid := w.mid[l*n*C : (l+1)*n*C]
	ln2 := w.ln2[l*n*C : (l+1)*n*C]
	rstd2 := w.rstd2[l*n : (l+1)*n]
	gu := w.gu[l*n*2*H : (l+1)*n*2*H]
	sw := w.sw[l*n*H : (l+1)*n*H]
	next := w.res[(l+1)*n*C : (l+2)*n*C]

	// The residual adds are fused into the output GEMMs (beta = 1) on copies of the stream,
	// made in the norms' parallel regions, which read the same rows.
	if m.thinModel() {
		// Everything but attention is row by row: before it the norm and the q/k/v product,
		// after it the output product, the norm, gate/up, SwiGLU and down, each chunk of rows
		// through all of them in one parallel region while its rows are in cache, where the
		// general path below runs eight regions and products a layer over all rows.
		m.par.rows(n, minRows, func(lo, hi int) {
			if l == 0 {
				kernels.EmbeddingForward(x[lo*C:hi*C], b.Tokens[lo:hi], m.Params.Embed, hi-lo, C)
			}
			kernels.RMSNormForward(ln1[lo*C:hi*C], rstd1[lo:hi], x[lo*C:hi*C], p.AttnNorm, hi-lo, C, c.NormEps)
			copy(mid[lo*C:hi*C], x[lo*C:hi*C])
			m.linearRows(l, linQKV, lo, hi, ln1, 0, qkv)
		})
		m.attentionForward(l, b, qkv, atty)
		m.par.rows(n, minRows, func(lo, hi int) {
			m.linearRows(l, linO, lo, hi, atty, 1, mid)
			addBias(mid, p.OBias, lo, hi)
			kernels.RMSNormForward(ln2[lo*C:hi*C], rstd2[lo:hi], mid[lo*C:hi*C], p.MLPNorm, hi-lo, C, c.NormEps)
			copy(next[lo*C:hi*C], mid[lo*C:hi*C])
			m.linearRows(l, linGateUp, lo, hi, ln2, 0, gu)
			addBias(gu, p.GateUpBias, lo, hi)
			kernels.SwiGLUForward(sw[lo*H:hi*H], gu[lo*2*H:hi*2*H], hi-lo, H)
			m.linearRows(l, linDown, lo, hi, sw, 1, next)
			addBias(next, p.DownBias, lo, hi)
		})
		return
	}
	m.par.rows(n, minRows, func(lo, hi int) {
		kernels.RMSNormForward(ln1[lo*C:hi*C], rstd1[lo:hi], x[lo*C:hi*C], p.AttnNorm, hi-lo, C, c.NormEps)
		copy(mid[lo*C:hi*C], x[lo*C:hi*C])
	})
	m.linearForward(l, linQKV, n, ln1, 0, qkv)
	if m.LoRA != nil {
		m.loraForward(l, linQKV, n, ln1, qkv, Q)
	}
	m.attentionForward(l, b, qkv, atty) // rotates q and k by RoPE first
	m.linearForward(l, linO, n, atty, 1, mid)
	if m.LoRA != nil {
		m.loraForward(l, linO, n, atty, mid, C)
	}
	m.par.rows(n, minRows, func(lo, hi int) {
		addBias(mid, p.OBias, lo, hi)
		kernels.RMSNormForward(ln2[lo*C:hi*C], rstd2[lo:hi], mid[lo*C:hi*C], p.MLPNorm, hi-lo, C, c.NormEps)
		copy(next[lo*C:hi*C], mid[lo*C:hi*C])
	})
	m.linearForward(l, linGateUp, n, ln2, 0, gu)
	if m.LoRA != nil {
		m.loraForward(l, linGateUp, n, ln2, gu, 2*H)
	}
	m.par.rows(n, minRows, func(lo, hi int) {
		addBias(gu, p.GateUpBias, lo, hi)
		kernels.SwiGLUForward(sw[lo*H:hi*H], gu[lo*2*H:hi*2*H], hi-lo, H)
	})
	m.linearForward(l, linDown, n, sw, 1, next)
	if m.LoRA != nil {
		m.loraForward(l, linDown, n, sw, next, C)
	}
	if p.DownBias != nil {
		m.par.rows(n, minRows, func(lo, hi int) { addBias(next, p.DownBias, lo, hi) })
	}
}

// addBias adds bias to rows [lo, hi) of y (rows len(bias) wide); a nil bias adds nothing.
func addBias(y, bias []float32, lo, hi int) {
	if bias == nil {
		return
	}
	w := len(bias)
	for r := lo; r < hi; r++ {
		row := y[r*w : (r+1)*w]
		for j, b := range bias {
			row[j] += b
		}
	}
}

// prepHeads does, for key/value head g of rows rows of a q/k/v product (rows ld floats apart,
// the heads' columns at qOff, kOff and vOff), what comes between the product and RoPE: the
// biases of q/k/v_proj, then the per-head RMSNorm of the queries and the key (Qwen3). raw keeps
// each row's queries and keys before the norm, in the stored layout (all queries, then the keys)
// ldRaw floats apart (0: every row in the same place), and rstd the norms' factors (one per head,
// Heads+KVHeads a row, ldRstd apart).
func (m *Model) prepHeads(l, g, rows int, qkv []float32, ld, qOff, kOff, vOff int, raw []float32, ldRaw int, rstd []float32, ldRstd int) {
	c, p := m.Cfg, &m.Params.Layers[l]
	hd, nRep := c.HeadDim(), c.Heads/c.KVHeads
	qs, ks, vs := c.qkvAt(false, g) // the stored layout: the biases' and raw's
	for r := 0; r < rows; r++ {
		row := qkv[r*ld:]
		if b := p.QKVBias; b != nil {
			axpy(1, b[qs:qs+nRep*hd], row[qOff:qOff+nRep*hd])
			axpy(1, b[ks:ks+hd], row[kOff:kOff+hd])
			axpy(1, b[vs:vs+hd], row[vOff:vOff+hd])
		}
		if !c.QKNorm {
			continue
		}
		rr, rs := raw[r*ldRaw:], rstd[r*ldRstd:]
		copy(rr[qs:qs+nRep*hd], row[qOff:qOff+nRep*hd])
		copy(rr[ks:ks+hd], row[kOff:kOff+hd])
		kernels.RMSNormForward(row[qOff:qOff+nRep*hd], rs[g*nRep:g*nRep+nRep], rr[qs:qs+nRep*hd], p.QNorm, nRep, hd, c.NormEps)
		kernels.RMSNormForward(row[kOff:kOff+hd], rs[c.Heads+g:c.Heads+g+1], rr[ks:ks+hd], p.KNorm, 1, hd, c.NormEps)
	}
}

// attnTask locates one (sequence span, key/value head) unit of attention work in the fused
// buffers: q/k/v offsets into qkv, the output offset into atty (row stride Dim), the offset of
// the first head's log-sum-exp in lse (layout (n, Heads), row stride Heads), and the span's first
// row i0 and length L.
type attnTask struct{ q, k, v, out, lse, i0, L int }

// attnTaskAt is task i of attention's parallel regions: the spans of key/value head 0, longest
// first, then those of head 1, and so on. Goroutines that take consecutive tasks then work on
// different spans, not on the two heads of one: those write the same rows' log-sum-exps (a
// row's heads share a cache line) and neighbouring lines of dq, dk and dv, and with both cores
// on the same rows a calc model's attention took 11% (forward) and 21% (backward) longer on
// two threads of the Xeon.
func (m *Model) attnTaskAt(i, T int) attnTask {
	spans := m.train.spans
	return m.attnTaskFor(spans[i%len(spans)], i/len(spans), T)
}

func (m *Model) attnTaskFor(s span, g, T int) attnTask {
	c := m.Cfg
	hd, nRep := c.HeadDim(), c.Heads/c.KVHeads
	i0 := s.row*T + s.start
	Q := c.qkvDim()
	return attnTask{
		q:   i0*Q + g*nRep*hd,
		k:   i0*Q + c.Heads*hd + g*hd,
		v:   i0*Q + (c.Heads+c.KVHeads)*hd + g*hd,
		out: i0*c.attnDim() + g*nRep*hd,
		lse: i0*c.Heads + g*nRep,
		i0:  i0,
		L:   s.end - s.start,
	}
}

// attentionForward rotates the queries and keys of every sequence span and key/value head by
// RoPE and runs attention on them, all (span, head) pairs in one parallel region: the spans
// cover every row, and the tasks rotate and write disjoint parts of qkv, atty and lse.
func (m *Model) attentionForward(l int, b *Batch, qkv, atty []float32) {
	c, w := m.Cfg, &m.train
	n := b.Rows * b.T
	lse := w.lse[l*n*c.Heads : (l+1)*n*c.Heads]
	Q, hd, nRep := c.qkvDim(), c.HeadDim(), c.Heads/c.KVHeads
	prep := !c.plainLlama() && (m.Params.Layers[l].QKVBias != nil || c.QKNorm)
	QK := (c.Heads + c.KVHeads) * hd
	m.par.run(len(w.spans)*c.KVHeads, func(worker, i int) {
		t := m.attnTaskAt(i, b.T)
		if prep {
			g := i / len(w.spans)
			raw, rstd := w.qkRaw, w.qkRstd
			if raw != nil {
				raw, rstd = raw[(l*n+t.i0)*QK:], rstd[(l*n+t.i0)*(c.Heads+c.KVHeads):]
			}
			qOff, kOff, vOff := c.qkvAt(false, g)
			m.prepHeads(l, g, t.L, qkv[t.i0*Q:], Q, qOff, kOff, vOff, raw, QK, rstd, c.Heads+c.KVHeads)
		}
		pos := b.Pos[t.i0 : t.i0+t.L]
		kernels.RopeForward(qkv[t.q:], Q, pos, m.ropeCos, m.ropeSin, t.L, nRep, hd)
		kernels.RopeForward(qkv[t.k:], Q, pos, m.ropeCos, m.ropeSin, t.L, 1, hd)
		kernels.AttentionForwardWindow(atty[t.out:], c.attnDim(), lse[t.lse:], c.Heads, w.scratch[worker],
			qkv[t.q:], Q, qkv[t.k:], qkv[t.v:], Q, t.L, 0, nRep, hd, c.Window(l))
	})
}
