package model

import (
	"errors"
	"math"
)

// TrainCE runs Forward and Backward for plain next-token cross entropy, the mean of −logprob over
// the positions with a target, and returns that loss. Gradients are added to m.Grads (call
// ZeroGrad first for a fresh step), so several batches can be accumulated.
func (m *Model) TrainCE(b *Batch) (float32, error) {
	if b == nil {
		return 0, errors.New("model: TrainCE nil batch")
	}
	n := b.Rows * b.T
	w := &m.train
	w.ceLP, w.ceEnt = grow(w.ceLP, n), grow(w.ceEnt, n)
	w.ceDLP, w.ceDEnt = grow(w.ceDLP, n), grow(w.ceDEnt, n)
	if err := m.Forward(b, w.ceLP, w.ceEnt); err != nil {
		return 0, err
	}
	nt := len(w.tgtIdx)
	if nt == 0 {
		w.fwd = nil
		return 0, errors.New("model: TrainCE batch has no targets")
	}
	var sum float64
	clear(w.ceDLP)
	clear(w.ceDEnt)
	scale := float32(-1 / float64(nt))
	for _, idx := range w.tgtIdx {
		sum -= float64(w.ceLP[idx])
		w.ceDLP[idx] = scale
	}
	if err := m.Backward(b, w.ceDLP, w.ceDEnt); err != nil {
		return 0, err
	}
	loss := sum / float64(nt)
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return float32(loss), errors.New("model: TrainCE loss is not finite")
	}
	return float32(loss), nil
}
