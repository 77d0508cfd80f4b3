package model

import (
	"errors"
	"fmt"

	"github.com/agentrl/agentrl/model/kernels"
)

// errNoForward is returned by Backward without a matching Forward.
var errNoForward = errors.New("model: Backward needs a Forward on the same batch first (and only one Backward per Forward)")

// Backward adds into m.Grads the gradient of a loss given its derivatives with respect to the
// logprob and entropy Forward wrote for each position (dLogprobs, dEntropy, Rows·T entries
// each). Positions without a target contribute nothing whatever their entries hold. b must be the
// batch of the preceding Forward, unmodified; Backward consumes that Forward's activations.
func (m *Model) Backward(b *Batch, dLogprobs, dEntropy []float32) error {
	return m.backward(b, dLogprobs, dEntropy, nil)
}

// BackwardValues is Backward for a loss that also depends on the values ForwardValues wrote,
// given its derivatives with respect to them (dValues, Rows·T entries; positions without a target
// contribute nothing). The value head's gradient is added into Grads.Value and Grads.ValueBias,
// and the values' gradient flows on into the shared trunk (final norm, blocks, embedding)
// together with the logprobs'. The model must have a value head.
func (m *Model) BackwardValues(b *Batch, dLogprobs, dEntropy, dValues []float32) error {
	if !m.HasValueHead() {
		return errNoValueHead
	}
	if b != nil && len(dValues) != b.Rows*b.T {
		return fmt.Errorf("model: BackwardValues needs %d dValues, got %d", b.Rows*b.T, len(dValues))
	}
	return m.backward(b, dLogprobs, dEntropy, dValues)
}

func (m *Model) backward(b *Batch, dLogprobs, dEntropy, dValues []float32) error {
	w := &m.train
	if b == nil || w.fwd != b {
		return errNoForward
	}
	n := b.Rows * b.T
	if len(dLogprobs) != n || len(dEntropy) != n {
		return fmt.Errorf("model: Backward needs %d dLogprobs and dEntropy, got %d and %d", n, len(dLogprobs), len(dEntropy))
	}
	w.fwd = nil
	c, g := m.Cfg, &m.Grads
	C, V := c.Dim, c.Vocab
	nt := len(w.tgtIdx)

	// LM head: dlogits (in place of the logits), d(lnfT) and the head's weight gradient.
	if nt > 0 {
		for i, idx := range w.tgtIdx {
			w.dlpT[i], w.dentT[i] = dLogprobs[idx], dEntropy[idx]
		}
		m.par.rows(nt, 4, func(lo, hi int) {
			kernels.LogprobEntropyBackward(w.logits[lo*V:hi*V], w.logits[lo*V:hi*V], w.headLSE[lo:hi], w.entT[lo:hi],
				w.tgt[lo:hi], w.dlpT[lo:hi], w.dentT[lo:hi], hi-lo, V)
		})
		if m.LoRA == nil {
			m.linearWeightGrad(nt, V, C, w.logits, w.lnfT, g.LMHead)
		}
		if dValues != nil {
			m.valueHeadBackward(dValues) // reads lnfT before it becomes d(lnfT)
		}
		linearInputGrad(nt, V, C, w.logits, m.Params.LMHead, w.lnfT)
		if dValues != nil {
			// V = w·h + b: d(h) gains dV·w, the critic's path into the shared trunk.
			for i, idx := range w.tgtIdx {
				if d := dValues[idx]; d != 0 {
					axpy(d, m.Params.Value, w.lnfT[i*C:(i+1)*C])
				}
			}
		}
		// dln is d(lnfT) at the target rows and zero at the others: a task a range of targets,
		// each with the rows between it and the previous target (tgtIdx is increasing).
		m.par.rows(nt, minRows, func(lo, hi int) {
			for j := lo; j < hi; j++ {
				prev := -1
				if j > 0 {
					prev = int(w.tgtIdx[j-1])
				}
				i := int(w.tgtIdx[j])
				clear(w.dln[(prev+1)*C : i*C])
				copy(w.dln[i*C:(i+1)*C], w.lnfT[j*C:(j+1)*C])
			}
			if hi == nt {
				clear(w.dln[(int(w.tgtIdx[nt-1])+1)*C : n*C])
			}
		})
	} else {
		clear(w.dln[:n*C])
	}
	x := w.res[c.Layers*n*C : (c.Layers+1)*n*C]
	m.normBackward(w.dres[:n*C], g.Norm, w.dln, x, m.Params.Norm, w.rstdf, n, true)

	for l := c.Layers - 1; l >= 0; l-- {
		m.blockBackward(l, b)
	}
	if m.LoRA != nil {
		return nil // the embedding is frozen
	}
	// A task a range of token ids, whose rows of the embedding's gradient it alone writes, each
	// still summing its positions in order.
	m.par.rows(V, V/min(m.par.n, 4), func(lo, hi int) {
		kernels.EmbeddingBackwardTokens(g.Embed, w.dres, b.Tokens, n, C, int32(lo), int32(hi))
	})
	return nil
}

// blockBackward propagates w.dres (the gradient of block l's output) to the block's input and
// adds the block's weight gradients.
func (m *Model) blockBackward(l int, b *Batch) {
	w, p, g := &m.train, &m.Params.Layers[l], &m.Grads.Layers[l]
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
	dres, dln := w.dres[:n*C], w.dln[:n*C]
	dqkv, datty, dgu, dsw := w.dqkv[:n*Q], w.datty[:n*A], w.dgu[:n*2*H], w.dsw[:n*H]

	// MLP: next = mid + sw·Downᵀ, so d(mid) starts as dres and gains the MLP branch below.
	frozen := m.LoRA != nil // only the adapters train
	if !frozen {
		m.biasGrad(g.DownBias, dres, n)
	}
	linearInputGrad(n, C, H, dres, p.Down, dsw)
	if frozen {
		m.loraBackward(l, linDown, n, sw, dres, C, dsw)
	} else {
		m.linearWeightGrad(n, C, H, dres, sw, g.Down)
	}
	m.par.rows(n, minRows, func(lo, hi int) {
		kernels.SwiGLUBackwardSet(dgu[lo*2*H:hi*2*H], dsw[lo*H:hi*H], gu[lo*2*H:hi*2*H], hi-lo, H)
	})
	if !frozen {
		m.biasGrad(g.GateUpBias, dgu, n)
	}
	linearInputGrad(n, 2*H, C, dgu, p.GateUp, dln)
	if frozen {
		m.loraBackward(l, linGateUp, n, ln2, dgu, 2*H, dln)
	} else {
		m.linearWeightGrad(n, 2*H, C, dgu, ln2, g.GateUp)
	}
	m.normBackward(dres, g.MLPNorm, dln, mid, p.MLPNorm, rstd2, n, false)

	// Attention: mid = x + atty·Oᵀ.
	if !frozen {
		m.biasGrad(g.OBias, dres, n)
	}
	linearInputGrad(n, C, A, dres, p.O, datty)
	if frozen {
		m.loraBackward(l, linO, n, atty, dres, C, datty)
	} else {
		m.linearWeightGrad(n, C, A, dres, atty, g.O)
	}
	m.attentionBackward(l, b, qkv, atty, datty, dqkv) // then RoPE's backward
	if !frozen {
		m.biasGrad(g.QKVBias, dqkv, n)
	}
	linearInputGrad(n, Q, C, dqkv, p.QKV, dln)
	if frozen {
		m.loraBackward(l, linQKV, n, ln1, dqkv, Q, dln)
	} else {
		m.linearWeightGrad(n, Q, C, dqkv, ln1, g.QKV)
	}
	m.normBackward(dres, g.AttnNorm, dln, x, p.AttnNorm, rstd1, n, false)
}

// normChunk is the number of rows of one task of normBackward. The chunks, not the number of
// workers, decide how the weight gradient is summed.
const normChunk = 64

func normChunks(n int) int { return (n + normChunk - 1) / normChunk }

// normBackward is kernels.RMSNormBackward over n rows in parallel: each chunk of normChunk rows
// adds its rows' input gradients into dinp (zeroed first when clearInp is set) and its weight
// gradient into a partial of its own, and the partials are then added into dweight in chunk
// order, so the sum is the same on any number of workers.
func (m *Model) normBackward(dinp, dweight, dout, inp, weight, rstd []float32, n int, clearInp bool) {
	C, w := m.Cfg.Dim, &m.train
	chunks := normChunks(n)
	part := w.dnorm[:chunks*C]
	m.par.run(chunks, func(_, ch int) {
		lo, hi := ch*normChunk, min(n, (ch+1)*normChunk)
		dw := part[ch*C : (ch+1)*C]
		clear(dw)
		if clearInp {
			clear(dinp[lo*C : hi*C])
		}
		kernels.RMSNormBackward(dinp[lo*C:hi*C], dw, dout[lo*C:hi*C], inp[lo*C:hi*C], weight, rstd[lo:hi], hi-lo, C)
	})
	if m.LoRA != nil {
		return // the norms' weights are frozen
	}
	for ch := range chunks {
		for j, v := range part[ch*C : (ch+1)*C] {
			dweight[j] += v
		}
	}
}

// attentionBackward mirrors attentionForward: each task zeroes its span's rows of dq (the
// heads of its query group), dk and dv (its key/value head), adds attention's gradients, and
// turns the dq and dk of the rotated vectors into those before RoPE. A task owns one key/value
// head of one span, so its dk and dv (shared by the head's query group) are written by one
// goroutine only, and the spans cover every row of dqkv.
func (m *Model) attentionBackward(l int, b *Batch, qkv, atty, datty, dqkv []float32) {
	c, w := m.Cfg, &m.train
	n := b.Rows * b.T
	lse := w.lse[l*n*c.Heads : (l+1)*n*c.Heads]
	Q, hd, nRep := c.qkvDim(), c.HeadDim(), c.Heads/c.KVHeads
	tasks := len(w.spans) * c.KVHeads
	m.par.run(tasks, func(worker, i int) {
		t := m.attnTaskAt(i, b.T)
		for r := 0; r < t.L; r++ {
			clear(dqkv[t.q+r*Q : t.q+r*Q+nRep*hd])
			clear(dqkv[t.k+r*Q : t.k+r*Q+hd])
			clear(dqkv[t.v+r*Q : t.v+r*Q+hd])
		}
		kernels.AttentionBackwardWindow(dqkv[t.q:], dqkv[t.k:], dqkv[t.v:], w.scratch[worker], datty[t.out:], c.attnDim(),
			atty[t.out:], lse[t.lse:], c.Heads, qkv[t.q:], Q, qkv[t.k:], qkv[t.v:], Q, t.L, 0, nRep, hd, c.Window(l))
		pos := b.Pos[t.i0 : t.i0+t.L]
		kernels.RopeBackward(dqkv[t.q:], Q, pos, m.ropeCos, m.ropeSin, t.L, nRep, hd)
		kernels.RopeBackward(dqkv[t.k:], Q, pos, m.ropeCos, m.ropeSin, t.L, 1, hd)
		if c.QKNorm {
			m.qkNormBackward(l, i, worker, t, dqkv[t.i0*Q:], n)
		}
	})
	if c.QKNorm && m.LoRA == nil {
		// Each task's q_norm and k_norm gradients, added in task order: the same sum on any
		// number of goroutines.
		gl := &m.Grads.Layers[l]
		for i := range tasks {
			part := w.dqkNorm[i*2*hd : (i+1)*2*hd]
			axpy(1, part[:hd], gl.QNorm)
			axpy(1, part[hd:], gl.KNorm)
		}
	}
}

// qkNormBackward turns the gradients of attention task i's normed queries and key (dqkv, rows of
// the task's span, stored layout) into those of the values before the norms, and writes the
// task's q_norm and k_norm weight gradients into its part of dqkNorm.
func (m *Model) qkNormBackward(l, i, worker int, t attnTask, dqkv []float32, n int) {
	c, w, p := m.Cfg, &m.train, &m.Params.Layers[l]
	Q, hd, nRep := c.qkvDim(), c.HeadDim(), c.Heads/c.KVHeads
	QK, HK := (c.Heads+c.KVHeads)*hd, c.Heads+c.KVHeads
	g := i / len(w.spans)
	qs, ks, _ := c.qkvAt(false, g)
	part := w.dqkNorm[i*2*hd : (i+1)*2*hd]
	clear(part)
	tmp := w.qkTmp[worker][:nRep*hd]
	raw, rstd := w.qkRaw[(l*n+t.i0)*QK:], w.qkRstd[(l*n+t.i0)*HK:]
	for r := 0; r < t.L; r++ {
		row, rr, rs := dqkv[r*Q:], raw[r*QK:], rstd[r*HK:]
		clear(tmp)
		kernels.RMSNormBackward(tmp, part[:hd], row[qs:qs+nRep*hd], rr[qs:qs+nRep*hd], p.QNorm, rs[g*nRep:g*nRep+nRep], nRep, hd)
		copy(row[qs:qs+nRep*hd], tmp)
		clear(tmp[:hd])
		kernels.RMSNormBackward(tmp[:hd], part[hd:], row[ks:ks+hd], rr[ks:ks+hd], p.KNorm, rs[c.Heads+g:c.Heads+g+1], 1, hd)
		copy(row[ks:ks+hd], tmp[:hd])
	}
}

// biasGrad adds to db (nil: no bias, nothing to do) the sum over n rows of dy (rows len(db)
// wide): each chunk of normChunk rows sums into a partial of its own, and the partials are added
// in chunk order, the same sum on any number of goroutines.
func (m *Model) biasGrad(db, dy []float32, n int) {
	if db == nil {
		return
	}
	wd, w := len(db), &m.train
	chunks := normChunks(n)
	part := w.dbias[:chunks*wd]
	m.par.run(chunks, func(_, ch int) {
		lo, hi := ch*normChunk, min(n, (ch+1)*normChunk)
		ps := part[ch*wd : (ch+1)*wd]
		clear(ps)
		for r := lo; r < hi; r++ {
			axpy(1, dy[r*wd:(r+1)*wd], ps)
		}
	})
	for ch := range chunks {
		axpy(1, part[ch*wd:(ch+1)*wd], db)
	}
}

// valueHeadBackward adds the value head's gradient, Σ dV·h to the weight and Σ dV to the bias,
// over the target positions of the last Forward (h their final-norm hidden states, still in
// lnfT), in a fixed order.
func (m *Model) valueHeadBackward(dValues []float32) {
	w, g := &m.train, &m.Grads
	C := m.Cfg.Dim
	var db float64
	for i, idx := range w.tgtIdx {
		d := dValues[idx]
		if d == 0 {
			continue
		}
		db += float64(d)
		axpy(d, w.lnfT[i*C:(i+1)*C], g.Value)
	}
	g.ValueBias[0] += float32(db)
}

// axpy adds a·x to y (len(x) == len(y)).
func axpy(a float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += a * v
	}
}
