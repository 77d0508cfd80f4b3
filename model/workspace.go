package model

import "github.com/agentrl/agentrl/model/kernels"

// trainWorkspace holds the activations Forward keeps for Backward and the gradient scratch of
// Backward. Buffers grow to the largest batch seen and are then reused, so steady-state training
// allocates nothing. Per-layer buffers are indexed with the current batch's sizes.
type trainWorkspace struct {
	spans []span

	// Activations (n = Rows·T tokens, C = Dim, per layer l unless noted).
	res   []float32 // (Layers+1, n, C) residual stream entering each block; [Layers] is the last block's output
	ln1   []float32 // (Layers, n, C) input_layernorm output
	rstd1 []float32 // (Layers, n)
	qkv   []float32 // (Layers, n, qkvDim) projections, q and k after RoPE
	lse   []float32 // (Layers, n, Heads) log-sum-exp of each attention row; probabilities are recomputed in Backward
	atty  []float32 // (Layers, n, Heads·HeadDim) attention output before o_proj
	mid   []float32 // (Layers, n, C) residual stream after attention
	ln2   []float32 // (Layers, n, C) post_attention_layernorm output
	rstd2 []float32 // (Layers, n)
	gu    []float32 // (Layers, n, 2·Hidden) gate and up projections
	sw    []float32 // (Layers, n, Hidden) silu(gate)·up
	lnf   []float32 // (n, C) final norm output
	rstdf []float32 // (n)

	// The LM head runs only on positions with a target (nt of them).
	tgtIdx  []int32   // (nt) flat index of each target position
	tgt     []int32   // (nt) its target token
	lnfT    []float32 // (nt, C) gathered final-norm rows
	logits  []float32 // (nt, Vocab); Backward overwrites it with d(loss)/d(logits)
	headLSE []float32 // (nt) log-sum-exp of each target row's logits
	lpT     []float32 // (nt) logprob of each target
	entT    []float32 // (nt) entropy at each target position
	dlpT    []float32 // (nt)
	dentT   []float32 // (nt)
	ceLP    []float32 // (n) TrainCE's logprobs
	ceEnt   []float32 // (n)
	ceDLP   []float32 // (n)
	ceDEnt  []float32 // (n)
	scratch [][]float32

	// Gradient scratch.
	dres  []float32 // (n, C) gradient of the residual stream
	dln   []float32 // (n, C)
	dqkv  []float32 // (n, qkvDim)
	datty []float32 // (n, C)
	dgu   []float32 // (n, 2·Hidden)
	dsw   []float32 // (n, Hidden)
	dnorm []float32 // (normChunks(n), C) the norm weight gradient of each chunk of rows

	// The family options' (nil without them).
	qkRaw   []float32   // (Layers, n, Heads+KVHeads, HeadDim) queries and keys before the q/k norms
	qkRstd  []float32   // (Layers, n, Heads+KVHeads) the q/k norms' factors
	dqkNorm []float32   // (tasks, 2·HeadDim) each attention task's q_norm and k_norm gradients
	qkTmp   [][]float32 // per goroutine: Heads·HeadDim floats of the q/k norms' backward
	dbias   []float32   // (normChunks(n), widest biased output) each chunk of rows' bias gradient

	// packed holds, per layer, copies of the weights whose forward products are thin
	// (kernels.Thin of their output width) packed for SgemmPacked, in the order of
	// layerWeights; Forward packs them again every time, since the optimizer changes them.
	packed [][numLinear]kernels.PackedWeights
	head   kernels.PackedWeights // the LM head, packed by packThin in a thin model

	lora loraWorkspace // the adapters' (AddLoRA)

	fwd *Batch // the batch of the last Forward whose activations are intact, nil after Backward
}

// grow returns s resliced to n elements, reallocating only when its capacity is too small.
func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

func growInt(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

// size makes every buffer fit a batch of rows×t tokens.
func (w *trainWorkspace) size(c Config, rows, t, workers int) {
	n, C, L := rows*t, c.Dim, c.Layers
	w.res = grow(w.res, (L+1)*n*C)
	w.ln1 = grow(w.ln1, L*n*C)
	w.rstd1 = grow(w.rstd1, L*n)
	w.qkv = grow(w.qkv, L*n*c.qkvDim())
	w.lse = grow(w.lse, L*n*c.Heads)
	A := c.attnDim()
	w.atty = grow(w.atty, L*n*A)
	w.mid = grow(w.mid, L*n*C)
	w.ln2 = grow(w.ln2, L*n*C)
	w.rstd2 = grow(w.rstd2, L*n)
	w.gu = grow(w.gu, L*n*2*c.Hidden)
	w.sw = grow(w.sw, L*n*c.Hidden)
	w.lnf = grow(w.lnf, n*C)
	w.rstdf = grow(w.rstdf, n)
	w.dres = grow(w.dres, n*C)
	w.dln = grow(w.dln, n*C)
	w.dqkv = grow(w.dqkv, n*c.qkvDim())
	w.datty = grow(w.datty, n*A)
	if c.QKNorm {
		hd := c.HeadDim()
		w.qkRaw = grow(w.qkRaw, L*n*(c.Heads+c.KVHeads)*hd)
		w.qkRstd = grow(w.qkRstd, L*n*(c.Heads+c.KVHeads))
		w.dqkNorm = grow(w.dqkNorm, rows*t*c.KVHeads*2*hd) // at most one span a token
		for len(w.qkTmp) < workers {
			w.qkTmp = append(w.qkTmp, nil)
		}
		for i := range w.qkTmp {
			w.qkTmp[i] = grow(w.qkTmp[i], c.Heads*hd)
		}
	}
	if c.QKVBias || c.OBias || c.MLPBias {
		w.dbias = grow(w.dbias, normChunks(n)*max(c.qkvDim(), 2*c.Hidden, C))
	}
	w.dgu = grow(w.dgu, n*2*c.Hidden)
	w.dsw = grow(w.dsw, n*c.Hidden)
	w.dnorm = grow(w.dnorm, normChunks(n)*C)
	for len(w.scratch) < workers {
		w.scratch = append(w.scratch, nil)
	}
	for i := range w.scratch {
		w.scratch[i] = grow(w.scratch[i], 2*kernels.AttentionScratch(t, 0, c.HeadDim()))
	}
}

// sizeHead makes the LM-head buffers fit nt target positions.
func (w *trainWorkspace) sizeHead(c Config, nt int) {
	w.tgtIdx = growInt(w.tgtIdx, nt)
	w.tgt = growInt(w.tgt, nt)
	w.lnfT = grow(w.lnfT, nt*c.Dim)
	w.logits = grow(w.logits, nt*c.Vocab)
	w.headLSE = grow(w.headLSE, nt)
	w.lpT = grow(w.lpT, nt)
	w.entT = grow(w.entT, nt)
	w.dlpT = grow(w.dlpT, nt)
	w.dentT = grow(w.dentT, nt)
}
