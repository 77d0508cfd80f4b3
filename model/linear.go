package model

import "github.com/agentrl/agentrl/model/kernels"

// The projections of a decoder block, in the order of trainWorkspace.packed.
const (
	linQKV = iota
	linO
	linGateUp
	linDown
	numLinear
)

// linearShape returns projection i of layer l: its weight (out×in, applied as x·Wᵀ) and sizes.
func (m *Model) linearShape(l, i int) (w []float32, out, in int) {
	c, p := m.Cfg, &m.Params.Layers[l]
	switch i {
	case linQKV:
		return p.QKV, c.qkvDim(), c.Dim
	case linO:
		return p.O, c.Dim, c.attnDim()
	case linGateUp:
		return p.GateUp, 2 * c.Hidden, c.Dim
	}
	return p.Down, c.Dim, c.Hidden
}

// thinOff, when set, sends every model through the general path (Sgemm for every product,
// blocks phase by phase); tests compare the two paths with it.
var thinOff bool

// thin is kernels.Thin unless thinOff is set.
func thin(n int) bool { return !thinOff && kernels.Thin(n) }

// thinModel reports whether the model's width is thin (kernels.Thin of Dim): its blocks then
// run their row-wise work and products chunk by chunk (blockForward), on weights packed by
// packThin.
func (m *Model) thinModel() bool { return m.LoRA == nil && thin(m.Cfg.Dim) }

// packThin packs, for this Forward, the weights whose products run on SgemmPacked: those of at
// most kernels.ThinPanels panels of output, and all of them in a thin model. A dimension-64
// model's weights are a few to a hundred KiB, against a Forward's products over thousands of
// rows.
func (m *Model) packThin() {
	w := &m.train
	for len(w.packed) < m.Cfg.Layers {
		w.packed = append(w.packed, [numLinear]kernels.PackedWeights{})
	}
	// One weight a task: each writes its own buffer.
	weights := m.Cfg.Layers * numLinear
	m.par.run(weights+1, func(_, t int) {
		if t == weights {
			if m.thinModel() {
				w.head.Pack(m.Params.LMHead, m.Cfg.Vocab, m.Cfg.Dim)
			}
			return
		}
		l, i := t/numLinear, t%numLinear
		if wt, out, in := m.linearShape(l, i); thin(out) || m.thinModel() {
			w.packed[l][i].Pack(wt, out, in)
		}
	})
}

// linearForward sets y (rows×out) to beta·y + x·Wᵀ for projection i of layer l (x rows×in).
// Thin products read the weight packed by packThin (SgemmPacked), others go through Sgemm;
// both give Sgemm's bits.
func (m *Model) linearForward(l, i, rows int, x []float32, beta float32, y []float32) {
	wt, out, in := m.linearShape(l, i)
	if thin(out) {
		kernels.SgemmPacked(rows, 1, x, in, &m.train.packed[l][i], beta, y, out)
		return
	}
	kernels.Sgemm(false, true, rows, out, in, 1, x, in, wt, in, beta, y, out)
}

// linearRows is linearForward on rows [lo, hi) of x and y alone, in the calling goroutine, for
// a weight packThin packed: SgemmPacked's bits, which do not depend on how the rows are cut.
func (m *Model) linearRows(l, i, lo, hi int, x []float32, beta float32, y []float32) {
	_, out, in := m.linearShape(l, i)
	kernels.SgemmPackedPart(0, 1, hi-lo, 1, x[lo*in:hi*in], in, &m.train.packed[l][i], beta, y[lo*out:hi*out], out)
}

// linearInputGrad sets dx (rows×in) to dy·W, the input gradient of x·Wᵀ (dy rows×out, W
// out×in): for a thin dx on SgemmNN, which reads W and dy in place, else through Sgemm, which
// packs both; the same bits.
func linearInputGrad(rows, out, in int, dy, w, dx []float32) {
	if thin(in) {
		kernels.SgemmNN(rows, in, out, 1, dy, out, w, in, 0, dx, in)
		return
	}
	kernels.Sgemm(false, false, rows, in, out, 1, dy, out, w, in, 0, dx, in)
}

// linearWeightGrad adds dyᵀ·x to dw (out×in), the weight gradient of x·Wᵀ over rows rows (dy
// rows×out, x rows×in): Sgemm's bits, and in a thin model on SgemmSplitK, where the goroutines
// share the rows (k) instead of dw's few tiles and none packs all of x or dy.
func (m *Model) linearWeightGrad(rows, out, in int, dy, x, dw []float32) {
	if m.thinModel() {
		kernels.SgemmSplitK(true, false, out, in, rows, 1, dy, out, x, in, 1, dw, in)
		return
	}
	kernels.Sgemm(true, false, out, in, rows, 1, dy, out, x, in, 1, dw, in)
}
