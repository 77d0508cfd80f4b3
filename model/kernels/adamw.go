package kernels

// AdamW applies one AdamW update (Loshchilov & Hutter 2019) to params in place, reading grads
// and updating the first and second moment estimates m and v. Weight decay is decoupled from the
// adaptive step and scaled by the learning rate, as in PyTorch's AdamW:
//
//	p ← p·(1 − lr·wd) − lr · m̂ / (√v̂ + eps),  m̂ = m/bc1, v̂ = v/bc2
//
// bc1 = 1−β1^t and bc2 = 1−β2^t are the bias corrections for step t, passed in so the caller
// computes them once in float64.
func AdamW(params, grads, m, v []float32, lr, beta1, beta2, eps, weightDecay, bc1, bc2 float32) {
	k := adamWConsts{beta1: beta1, oneMinusBeta1: 1 - beta1, beta2: beta2, oneMinusBeta2: 1 - beta2,
		decay: 1 - lr*weightDecay, step: lr / bc1, invBC2: 1 / bc2, eps: eps}
	activeElem().adamW(params, grads, m, v, &k)
}
