//go:build amd64 && !purego

package kernels

import "golang.org/x/sys/cpu"

//go:generate go run ./internal/elemgen -out elem_amd64.s -stubs elem_stubs_amd64.go -pkg kernels

var (
	avx512Elem = elemKernel{
		name:      "avx512",
		expSum:    asmExpSum(expSumavx512),
		swigluFwd: asmSwigluForward(swigluForwardavx512),
		swigluBwd: asmSwigluBackward(swigluBackwardavx512),

		swigluBwdSet: asmSwigluBackward(swigluBackwardSetavx512),
		max:          asmMax(maxFiniteavx512),
		scale:        asmScale(scaleavx512),
		read:         asmRead(readStreamavx512),

		softmaxGrad: asmSoftmaxGrad(softmaxGradavx512),
		expMoments:  asmExpMoments(expMomentsavx512),
		rmsScale:    asmRMSScale(rmsScaleavx512),
		rmsBackward: asmRMSBackward(rmsBackwardavx512),
		sumSquares8: asmSumSquares8(sumSquares8avx512),
		normDots8:   asmNormDots8(normDots8avx512),
		rope:        asmRope(ropeForwardavx512, ropeBackwardavx512),
		adamW:       asmAdamW(adamWavx512),
	}
	avx2Elem = elemKernel{
		name:      "avx2",
		expSum:    asmExpSum(expSumavx2),
		swigluFwd: asmSwigluForward(swigluForwardavx2),
		swigluBwd: asmSwigluBackward(swigluBackwardavx2),

		swigluBwdSet: asmSwigluBackward(swigluBackwardSetavx2),
		max:          asmMax(maxFiniteavx2),
		scale:        asmScale(scaleavx2),
		read:         asmRead(readStreamavx2),

		softmaxGrad: asmSoftmaxGrad(softmaxGradavx2),
		expMoments:  asmExpMoments(expMomentsavx2),
		rmsScale:    asmRMSScale(rmsScaleavx2),
		rmsBackward: asmRMSBackward(rmsBackwardavx2),
		sumSquares8: asmSumSquares8(sumSquares8avx2),
		normDots8:   asmNormDots8(normDots8avx2),
		rope:        asmRope(ropeForwardavx2, ropeBackwardavx2),
		adamW:       asmAdamW(adamWavx2),
	}
)

// availableElemKernels lists the elementwise implementations this CPU runs, fastest first.
func availableElemKernels() []*elemKernel {
	var ks []*elemKernel
	if cpu.X86.HasAVX512F {
		ks = append(ks, &avx512Elem)
	}
	if cpu.X86.HasAVX2 {
		ks = append(ks, &avx2Elem)
	}
	return append(ks, &goElem)
}

// The adapters below check the slice lengths that keep the assembly inside its operands.

func asmExpSum(f func(dst, src *float32, n int, shift float32) float32) func(dst, src []float32, shift float32) float32 {
	return func(dst, src []float32, shift float32) float32 {
		if len(src) == 0 {
			return 0
		}
		_ = dst[len(src)-1]
		return f(&dst[0], &src[0], len(src), shift)
	}
}

func asmSwigluForward(f func(out, g, u *float32, n int)) func(out, g, u []float32) {
	return func(out, g, u []float32) {
		n := len(g)
		if n == 0 {
			return
		}
		_, _ = out[n-1], u[n-1]
		f(&out[0], &g[0], &u[0], n)
	}
}

func asmSwigluBackward(f func(dg, du, dy, g, u *float32, n int)) func(dg, du, dy, g, u []float32) {
	return func(dg, du, dy, g, u []float32) {
		n := len(g)
		if n == 0 {
			return
		}
		_, _, _, _ = dg[n-1], du[n-1], dy[n-1], u[n-1]
		f(&dg[0], &du[0], &dy[0], &g[0], &u[0], n)
	}
}

// asmMax falls back to the Go loop where a row holds a NaN or an infinity, whose handling
// VMAXPS does not share with Go's max.
func asmMax(f func(x *float32, n int) (m, chk float32)) func(x []float32) float32 {
	return func(x []float32) float32 {
		m, chk := f(&x[0], len(x))
		if chk != 0 {
			return maxGo(x)
		}
		return m
	}
}

func asmScale(f func(x *float32, n int, a float32)) func(x []float32, a float32) {
	return func(x []float32, a float32) {
		if len(x) > 0 {
			f(&x[0], len(x), a)
		}
	}
}

// asmRead reads the whole 512-byte blocks of x with the assembly and the rest in Go.
func asmRead(f func(x *float32, blocks int) float32) func(x []float32) float32 {
	return func(x []float32) float32 {
		blocks := len(x) / 128
		var s float32
		if blocks > 0 {
			s = f(&x[0], blocks)
		}
		return s + readGo(x[128*blocks:])
	}
}

func asmSoftmaxGrad(f func(p, ds *float32, n int, shift, d, scale float32)) func(p, ds []float32, shift, d, scale float32) {
	return func(p, ds []float32, shift, d, scale float32) {
		n := len(p)
		if n == 0 {
			return
		}
		_ = ds[n-1]
		f(&p[0], &ds[0], n, shift, d, scale)
	}
}

func asmExpMoments(f func(x *float32, n int, shift float32) (float64, float64)) func(x []float32, shift float32) (float64, float64) {
	return func(x []float32, shift float32) (float64, float64) {
		if len(x) == 0 {
			return 0, 0
		}
		return f(&x[0], len(x), shift)
	}
}

func asmRMSScale(f func(out, x, w *float32, n int, r float32)) func(out, x, w []float32, r float32) {
	return func(out, x, w []float32, r float32) {
		n := len(x)
		if n == 0 {
			return
		}
		_, _ = out[n-1], w[n-1]
		f(&out[0], &x[0], &w[0], n, r)
	}
}

func asmRMSBackward(f func(dx, dw, dy, x, w *float32, n int, r, k float32)) func(dx, dw, dy, x, w []float32, r, k float32) {
	return func(dx, dw, dy, x, w []float32, r, k float32) {
		n := len(x)
		if n == 0 {
			return
		}
		_, _, _, _ = dx[n-1], dw[n-1], dy[n-1], w[n-1]
		f(&dx[0], &dw[0], &dy[0], &x[0], &w[0], n, r, k)
	}
}

// asmSumSquares8 runs the kernel over the whole blocks of eight columns and adds the last
// c mod 8 columns after them in Go, so that every row is still summed in index order.
func asmSumSquares8(f func(ss *float64, x *float32, c, blocks int)) func(ss *[normRows]float64, x []float32, c int) {
	return func(ss *[normRows]float64, x []float32, c int) {
		if c == 0 {
			*ss = [normRows]float64{}
			return
		}
		_ = x[normRows*c-1]
		blocks := c / 8
		f(&ss[0], &x[0], c, blocks)
		for r := range ss {
			for _, v := range x[r*c+8*blocks : r*c+c] {
				ss[r] += float64(v) * float64(v)
			}
		}
	}
}

// asmNormDots8 is asmSumSquares8 for the backward's dots.
func asmNormDots8(f func(dots *float64, y, x, w *float32, c, blocks int)) func(dots *[normRows]float64, dy, x, w []float32) {
	return func(dots *[normRows]float64, dy, x, w []float32) {
		c := len(w)
		if c == 0 {
			*dots = [normRows]float64{}
			return
		}
		_, _ = dy[normRows*c-1], x[normRows*c-1]
		blocks := c / 8
		f(&dots[0], &dy[0], &x[0], &w[0], c, blocks)
		for r := range dots {
			xr := x[r*c : r*c+c]
			for j := 8 * blocks; j < c; j++ {
				dots[r] += float64(dy[r*c+j]) * float64(w[j]) * float64(xr[j])
			}
		}
	}
}

// asmRope checks every row's position against the tables and the last row's extent against x
// (as ropeGo's slicing would) before the kernel reads them.
func asmRope(fwd, bwd func(x *float32, ld int, pos *int32, cos, sin *float32, n, nHead, half int)) func(x []float32, ld int, pos []int32, cos, sin []float32, n, nHead, headDim int, inverse bool) {
	return func(x []float32, ld int, pos []int32, cos, sin []float32, n, nHead, headDim int, inverse bool) {
		half := headDim / 2
		if n == 0 || nHead == 0 || half == 0 {
			return
		}
		if headDim%2 != 0 { // the kernel steps from head to head by 2·half
			ropeGo(x, ld, pos, cos, sin, n, nHead, headDim, inverse)
			return
		}
		_ = x[(n-1)*ld+(nHead-1)*headDim+2*half-1]
		for _, p := range pos[:n] {
			_, _ = cos[int(p)*half:int(p)*half+half], sin[int(p)*half:int(p)*half+half]
		}
		f := fwd
		if inverse {
			f = bwd
		}
		f(&x[0], ld, &pos[0], &cos[0], &sin[0], n, nHead, half)
	}
}

func asmAdamW(f func(p, g, m, v *float32, n int, k *float32)) func(p, g, m, v []float32, k *adamWConsts) {
	return func(p, g, m, v []float32, k *adamWConsts) {
		n := len(p)
		if n == 0 {
			return
		}
		_, _, _ = g[n-1], m[n-1], v[n-1]
		f(&p[0], &g[0], &m[0], &v[0], n, &k.beta1)
	}
}
