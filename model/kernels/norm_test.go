package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// rmsNormRowForward is RMSNormForward of one row as the scalar loop defines it: the sum of
// squares in float64 in index order, then out = x·r·w.
func rmsNormRowForward(out, x, w []float32, eps float32) float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	r := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	for j, v := range x {
		out[j] = v * r * w[j]
	}
	return r
}

// rmsNormRowBackward is RMSNormBackward of one row as the scalar loop defines it.
func rmsNormRowBackward(dx, dw, dy, x, w []float32, r float32) {
	var dot float64
	for j, v := range x {
		dot += float64(dy[j]) * float64(w[j]) * float64(v)
	}
	k := float32(dot) * r * r * r / float32(len(x))
	for j, v := range x {
		dx[j] += float32(r*w[j]*dy[j]) - float32(v*k)
		dw[j] += float32(dy[j] * v * r)
	}
}

// TestRMSNormMatchesRowByRow: on every elementwise implementation, RMSNormForward and
// RMSNormBackward over n rows give bit for bit what the scalar loop gives row after row (rows
// summed side by side change no bit), for row counts around the group of normRows and widths
// around the 16-float block, with large and tiny values mixed in.
func TestRMSNormMatchesRowByRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	for _, ek := range availableElemKernels() {
		t.Run(ek.name, func(t *testing.T) {
			withElem(t, ek)
			for _, c := range []int{1, 7, 8, 16, 33, 64, 70} {
				for n := 0; n <= 2*normRows+1; n++ {
					x := randSlice(rng, n*c, 3)
					for i := range x {
						switch rng.IntN(10) {
						case 0:
							x[i] *= 1e18
						case 1:
							x[i] *= 1e-18
						}
					}
					w, dy := randSlice(rng, c, 2), randSlice(rng, n*c, 2)
					dx0, dw0 := randSlice(rng, n*c, 1), randSlice(rng, c, 1)

					out, rstd := make([]float32, n*c), make([]float32, n)
					RMSNormForward(out, rstd, x, w, n, c, 1e-5)
					dx, dw := append([]float32(nil), dx0...), append([]float32(nil), dw0...)
					RMSNormBackward(dx, dw, dy, x, w, rstd, n, c)

					wantOut, wantR := make([]float32, n*c), make([]float32, n)
					wantDx, wantDw := append([]float32(nil), dx0...), append([]float32(nil), dw0...)
					for i := 0; i < n; i++ {
						row := func(s []float32) []float32 { return s[i*c : (i+1)*c] }
						wantR[i] = rmsNormRowForward(row(wantOut), row(x), w, 1e-5)
						rmsNormRowBackward(row(wantDx), wantDw, row(dy), row(x), w, wantR[i])
					}
					what := fmt.Sprintf("n=%d c=%d", n, c)
					for _, p := range []struct {
						name      string
						got, want []float32
					}{{"rstd", rstd, wantR}, {"out", out, wantOut}, {"dx", dx, wantDx}, {"dw", dw, wantDw}} {
						if i := sameBits(p.got, p.want); i >= 0 {
							t.Fatalf("%s: %s[%d] = %v, want %v", what, p.name, i, p.got[i], p.want[i])
						}
					}
				}
			}
		})
	}
}

// TestRMSKernelsMatchGo: every implementation of the norms' row kernels gives the Go bits, NaN
// payloads and signs included, at every length around the block.
func TestRMSKernelsMatchGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	specials := specialInputs()
	for _, k := range availableElemKernels() {
		for n := 0; n <= 70; n++ {
			x, w, dy := randSlice(rng, n, 4), randSlice(rng, n, 2), randSlice(rng, n, 2)
			for i := range x {
				if rng.IntN(5) == 0 {
					x[i] = specials[rng.IntN(len(specials))]
				}
			}
			r, kk := rng.Float32()*3, rng.Float32()-0.5
			want, got := make([]float32, n), make([]float32, n)
			rmsScaleGo(want, x, w, r)
			k.rmsScale(got, x, w, r)
			if i := sameBits(got, want); i >= 0 {
				t.Fatalf("%s n=%d: %v·%v·%v = %v, want %v", k.name, n, x[i], r, w[i], got[i], want[i])
			}
			dx0, dw0 := randSlice(rng, n, 1), randSlice(rng, n, 1)
			wdx, wdw := append([]float32(nil), dx0...), append([]float32(nil), dw0...)
			gdx, gdw := append([]float32(nil), dx0...), append([]float32(nil), dw0...)
			rmsBackwardGo(wdx, wdw, dy, x, w, r, kk)
			k.rmsBackward(gdx, gdw, dy, x, w, r, kk)
			if i := sameBits(gdx, wdx); i >= 0 {
				t.Fatalf("%s n=%d: dx at x=%v is %v, want %v", k.name, n, x[i], gdx[i], wdx[i])
			}
			if i := sameBits(gdw, wdw); i >= 0 {
				t.Fatalf("%s n=%d: dw at x=%v is %v, want %v", k.name, n, x[i], gdw[i], wdw[i])
			}
		}
	}
}

// TestNormSumsMatchRowByRow: every implementation's eight-row sums (sumSquares8, normDots8)
// are, bit for bit in float64, each row's terms added one after another in index order. Terms
// of mixed sizes (some 10⁸ times the rest) make any other order of the adds round differently.
func TestNormSumsMatchRowByRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	for _, ek := range availableElemKernels() {
		for c := 0; c <= 70; c++ {
			x, dy, w := randSlice(rng, normRows*c, 2), randSlice(rng, normRows*c, 2), randSlice(rng, c, 2)
			for i := range x {
				if rng.IntN(4) == 0 {
					x[i] *= 1e8
				}
			}
			var ss, dots [normRows]float64
			ek.sumSquares8(&ss, x, c)
			ek.normDots8(&dots, dy, x, w)
			for r := 0; r < normRows; r++ {
				var s, d float64
				for j := 0; j < c; j++ {
					v := x[r*c+j]
					s += float64(v) * float64(v)
					d += float64(dy[r*c+j]) * float64(w[j]) * float64(v)
				}
				if math.Float64bits(ss[r]) != math.Float64bits(s) {
					t.Fatalf("%s c=%d row %d: sum of squares %v, want %v", ek.name, c, r, ss[r], s)
				}
				if math.Float64bits(dots[r]) != math.Float64bits(d) {
					t.Fatalf("%s c=%d row %d: dot %v, want %v", ek.name, c, r, dots[r], d)
				}
			}
		}
	}
}
