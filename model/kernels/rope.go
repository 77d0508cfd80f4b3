package kernels

import "math"

// RopeTable fills cos and sin (maxSeq, headDim/2) with the rotary angles pos·theta^(-2i/headDim)
// of Su et al. 2021 in the Hugging Face Llama convention. Angles are computed in float64 so that
// long positions do not lose precision before the cosine.
func RopeTable(cos, sin []float32, maxSeq, headDim int, theta float32) {
	half := headDim / 2
	for p := 0; p < maxSeq; p++ {
		for i := 0; i < half; i++ {
			invFreq := math.Pow(float64(theta), -float64(2*i)/float64(headDim))
			a := float64(p) * invFreq
			cos[p*half+i] = float32(math.Cos(a))
			sin[p*half+i] = float32(math.Sin(a))
		}
	}
}

// RopeForward rotates, in place, n rows of nHead heads each headDim wide (head h of row r starts
// at x[r*ld + h*headDim]) by the angles of the row's position pos[r]. Pairs are
// (i, i+headDim/2) — HF's rotate_half — so exported checkpoints run the same elsewhere:
// x'_i = x_i·cos − x_{i+h}·sin, x'_{i+h} = x_{i+h}·cos + x_i·sin. Every implementation gives
// ropeGo's bits.
func RopeForward(x []float32, ld int, pos []int32, cos, sin []float32, n, nHead, headDim int) {
	activeElem().rope(x, ld, pos, cos, sin, n, nHead, headDim, false)
}

// RopeBackward turns, in place, gradients with respect to rotated vectors into gradients with
// respect to the vectors before rotation: the rotation is orthogonal, so this applies its
// transpose (the rotation by the negative angle).
func RopeBackward(dx []float32, ld int, pos []int32, cos, sin []float32, n, nHead, headDim int) {
	activeElem().rope(dx, ld, pos, cos, sin, n, nHead, headDim, true)
}

// ropeGo is RopeForward, or with inverse RopeBackward, in Go.
func ropeGo(x []float32, ld int, pos []int32, cos, sin []float32, n, nHead, headDim int, inverse bool) {
	half := headDim / 2
	for r := 0; r < n; r++ {
		cs := cos[int(pos[r])*half : int(pos[r])*half+half]
		sn := sin[int(pos[r])*half : int(pos[r])*half+half]
		for h := 0; h < nHead; h++ {
			a := x[r*ld+h*headDim : r*ld+h*headDim+half]
			b := x[r*ld+h*headDim+half : r*ld+(h+1)*headDim]
			if inverse {
				for i := range a {
					d0, d1 := a[i], b[i]
					a[i] = d0*cs[i] + d1*sn[i]
					b[i] = d1*cs[i] - d0*sn[i]
				}
				continue
			}
			for i := range a {
				x0, x1 := a[i], b[i]
				a[i] = x0*cs[i] - x1*sn[i]
				b[i] = x1*cs[i] + x0*sn[i]
			}
		}
	}
}

// RopeTableFreqs is RopeTable with the inverse frequencies given (headDim/2 of them, as scaled
// RoPE variants such as Llama 3's compute them): cos and sin (maxSeq, len(invFreq)) get the
// angles pos·invFreq[i], computed in float64.
func RopeTableFreqs(cos, sin []float32, maxSeq int, invFreq []float64) {
	half := len(invFreq)
	for p := 0; p < maxSeq; p++ {
		for i, f := range invFreq {
			a := float64(p) * f
			cos[p*half+i] = float32(math.Cos(a))
			sin[p*half+i] = float32(math.Sin(a))
		}
	}
}
