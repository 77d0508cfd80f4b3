package kernels

import "math"

// expChunk is how many exponentials of a vocabulary row LogprobEntropyBackward computes at a
// time into a stack buffer, before the scalar loop that consumes them.
const expChunk = 256

// LogprobEntropyForward reads n rows of logits (n, vocab) and writes, per row, the log
// probability of targets[i] under softmax(logits), the entropy of that distribution, and the
// log-sum-exp lse[i] that the backward pass reuses. Sums run in float64 (expMoments): the
// entropy is a difference of two numbers of the size of the logits, and float32 sums over a
// vocabulary of thousands lose digits that the policy-gradient seam would then amplify.
func LogprobEntropyForward(logprob, entropy, lse, logits []float32, targets []int32, n, vocab int) {
	ek := activeElem()
	for i := 0; i < n; i++ {
		z := logits[i*vocab : (i+1)*vocab]
		m := ek.max(z)
		s, sz := ek.expMoments(z, m) // Σ e^(z−m) and Σ e^(z−m)·(z−m), in float64
		l := float64(m) + math.Log(s)
		lse[i] = float32(l)
		logprob[i] = float32(float64(z[targets[i]]) - l)
		// H = −Σ p·(z − lse) = lse − Σ p·z, written relative to m to keep the terms small.
		entropy[i] = float32(math.Log(s) - sz/s)
	}
}

// LogprobEntropyBackward writes into dlogits (n, vocab) the gradient of
// Σ_i dlogprob[i]·logprob[i] + dentropy[i]·entropy[i] with respect to the logits:
//
//	∂logprob/∂z_j = 1[j=target] − p_j,   ∂H/∂z_j = −p_j·(log p_j + H)
//
// dlogits may be the logits slice itself (it is overwritten, not added to), which saves the
// largest activation buffer of the model; each element is read before it is written.
func LogprobEntropyBackward(dlogits, logits, lse, entropy []float32, targets []int32, dlogprob, dentropy []float32, n, vocab int) {
	ek := activeElem()
	for i := 0; i < n; i++ {
		z := logits[i*vocab : (i+1)*vocab]
		dz := dlogits[i*vocab : (i+1)*vocab]
		dl, dh := dlogprob[i], dentropy[i]
		l, h := lse[i], entropy[i]
		if dh == 0 && !math.IsInf(float64(h), 0) && h == h {
			// No entropy term (cross-entropy training): dz = −dl·p in two vector passes, the
			// values of the loop below (whose entropy term is then a zero) for finite logits.
			ek.expSum(dz, z, l)
			ek.scale(dz, -dl)
			dz[targets[i]] += dl
			continue
		}
		var buf [expChunk]float32
		for j0 := 0; j0 < len(z); j0 += expChunk {
			zc := z[j0:min(j0+expChunk, len(z))]
			pc := buf[:len(zc)]
			expSum(pc, zc, l)
			for j, v := range zc {
				lp, p := v-l, pc[j]
				dz[j0+j] = -dl*p - dh*p*(lp+h)
			}
		}
		dz[targets[i]] += dl
	}
}
