package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// gemmCase is one product with its stored layout; pad adds unused columns to every stride.
type gemmCase struct {
	m, n, k        int
	transA, transB bool
	alpha, beta    float32
	pad            int
}

func (tc gemmCase) String() string {
	return fmt.Sprintf("m%d_n%d_k%d_tA%v_tB%v_a%g_b%g_pad%d", tc.m, tc.n, tc.k, tc.transA, tc.transB, tc.alpha, tc.beta, tc.pad)
}

// operands builds exactly sized slices: stride padding holds NaN, so a kernel that reads a
// padding element (or past the valid region) poisons its result and the comparison fails.
type operands struct {
	a, b, c       []float32
	lda, ldb, ldc int
}

func (tc gemmCase) operands(rng *rand.Rand) operands {
	ar, ac := tc.m, tc.k
	if tc.transA {
		ar, ac = tc.k, tc.m
	}
	br, bc := tc.k, tc.n
	if tc.transB {
		br, bc = tc.n, tc.k
	}
	var o operands
	o.a, o.lda = randMatrix(rng, ar, ac, tc.pad)
	o.b, o.ldb = randMatrix(rng, br, bc, tc.pad)
	o.c, o.ldc = randMatrix(rng, tc.m, tc.n, tc.pad)
	return o
}

func randMatrix(rng *rand.Rand, rows, cols, pad int) ([]float32, int) {
	ld := cols + pad
	size := 0
	if rows > 0 && cols > 0 {
		size = (rows-1)*ld + cols
	}
	x := make([]float32, size)
	for i := range x {
		if i%ld < cols {
			x[i] = float32(rng.NormFloat64())
		} else {
			x[i] = float32(math.NaN())
		}
	}
	return x, ld
}

// tolerance bounds |fast - reference| per element of C: both sum the same products in
// different orders, so the error scales with k and with the magnitudes summed.
func tolerances(tc gemmCase, o operands, c0 []float32) []float64 {
	tol := make([]float64, len(c0))
	for i := 0; i < tc.m; i++ {
		for j := 0; j < tc.n; j++ {
			var s float64
			for p := 0; p < tc.k; p++ {
				var av, bv float32
				if tc.transA {
					av = o.a[p*o.lda+i]
				} else {
					av = o.a[i*o.lda+p]
				}
				if tc.transB {
					bv = o.b[j*o.ldb+p]
				} else {
					bv = o.b[p*o.ldb+j]
				}
				s += math.Abs(float64(tc.alpha) * float64(av) * float64(bv))
			}
			if tc.beta != 0 {
				s += math.Abs(float64(tc.beta) * float64(c0[i*o.ldc+j]))
			}
			tol[i*o.ldc+j] = 2e-7*float64(tc.k+4)*s + 1e-30
		}
	}
	return tol
}

// checkCase runs Sgemm on the current path and compares with sgemmRef element by element,
// and checks that stride padding of C was not written.
func checkCase(t *testing.T, tc gemmCase, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	o := tc.operands(rng)
	c0 := append([]float32(nil), o.c...)
	want := append([]float32(nil), o.c...)
	sgemmRef(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, want, o.ldc)
	got := o.c
	Sgemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, got, o.ldc)
	tol := tolerances(tc, o, c0)
	bad := 0
	for i := range got {
		if i%o.ldc >= tc.n {
			if !math.IsNaN(float64(got[i])) {
				t.Fatalf("%v: padding C[%d] overwritten with %g", tc, i, got[i])
			}
			continue
		}
		if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= tol[i]) {
			if bad++; bad <= 3 {
				t.Errorf("%v: C[%d][%d] = %g, reference %g (tolerance %g)", tc, i/o.ldc, i%o.ldc, got[i], want[i], tol[i])
			}
		}
	}
	if bad > 3 {
		t.Errorf("%v: %d elements out of tolerance", tc, bad)
	}
}

// withKernel forces one microkernel and worker count for the duration of a test.
func withKernel(t *testing.T, kern *microKernel, workers int) {
	t.Helper()
	prevK, prevW := kernelOverride, workerOverride
	kernelOverride, workerOverride = kern, workers
	t.Cleanup(func() { kernelOverride, workerOverride = prevK, prevW })
}

var shapeTable = [][3]int{
	{1, 1, 1}, {7, 13, 5}, {33, 65, 17}, {0, 5, 3}, {5, 0, 3}, {4, 6, 0}, {0, 0, 0},
	{6, 16, 1}, {12, 32, 8}, {13, 33, 9}, {2, 300, 7}, {300, 3, 7},
	{45, 70, 800}, // k spans several kc slices, so beta applies only to the first
	{257, 70, 40}, // m spans several row blocks
	{20, 2100, 5}, // n spans two column blocks with nc ≤ 2048
}

var scalarTable = [][2]float32{{1, 0}, {1, 1}, {-0.5, 2}, {0, 1.5}, {2, 0}}

// withBlocks forces the blocked driver's mc and nc (rounded up to the kernel's tile).
func withBlocks(t *testing.T, mc, nc int) {
	prev := blockOverride
	blockOverride.mc, blockOverride.nc = mc, nc
	t.Cleanup(func() { blockOverride = prev })
}

func TestSgemmMatchesReference(t *testing.T) {
	for _, kern := range availableKernels() {
		t.Run(kern.name, func(t *testing.T) {
			withKernel(t, kern, 2)
			checkShapes(t)
		})
		// Small blocks: several row and column blocks at the table's sizes, whatever the caches.
		t.Run(kern.name+"/small-blocks", func(t *testing.T) {
			withKernel(t, kern, 2)
			withBlocks(t, 2*kern.mr, 2*kern.nr)
			checkShapes(t)
		})
	}
}

// checkShapes compares every shape of shapeTable, every scalar pair, transpose and padding with
// the reference, on the kernel and blocks the caller set.
func checkShapes(t *testing.T) {
	seed := uint64(1)
	for _, s := range shapeTable {
		for _, ab := range scalarTable {
			for tr := 0; tr < 4; tr++ {
				for _, pad := range []int{0, 3} {
					if testing.Short() && pad == 3 && s[0]*s[1]*s[2] > 100000 {
						continue
					}
					tc := gemmCase{s[0], s[1], s[2], tr&1 != 0, tr&2 != 0, ab[0], ab[1], pad}
					seed++
					checkCase(t, tc, seed)
				}
			}
		}
	}
}

// TestSgemmBetaZeroOverwritesNaN: beta == 0 must overwrite C, never scale what it held.
func TestSgemmBetaZeroOverwritesNaN(t *testing.T) {
	for _, kern := range availableKernels() {
		for _, s := range [][3]int{{5, 7, 3}, {64, 64, 64}, {4, 4, 0}} {
			t.Run(fmt.Sprintf("%s/%dx%dx%d", kern.name, s[0], s[1], s[2]), func(t *testing.T) {
				withKernel(t, kern, 1)
				m, n, k := s[0], s[1], s[2]
				a := make([]float32, m*k)
				b := make([]float32, k*n)
				for i := range a {
					a[i] = 1
				}
				for i := range b {
					b[i] = 2
				}
				c := make([]float32, m*n)
				for i := range c {
					c[i] = float32(math.NaN())
				}
				Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
				for i, v := range c {
					if v != float32(2*k) {
						t.Fatalf("C[%d] = %g, want %d", i, v, 2*k)
					}
				}
			})
		}
	}
}

// TestSgemmParallelBitwise: the partition into workers must not change a single bit.
func TestSgemmParallelBitwise(t *testing.T) {
	shapes := [][3]int{{300, 200, 300}, {24, 1100, 90}, {512, 256, 64}, {7, 900, 700}, {70, 100, 1000}, {100, 40, 900}}
	for _, kern := range availableKernels() {
		for _, s := range shapes {
			for tr := 0; tr < 4; tr++ {
				tc := gemmCase{s[0], s[1], s[2], tr&1 != 0, tr&2 != 0, 0.75, 0.5, 1}
				t.Run(kern.name+"/"+tc.String(), func(t *testing.T) {
					var results [][]float32
					for _, w := range []int{1, 2, 3, 8} {
						withKernel(t, kern, w)
						o := tc.operands(rand.New(rand.NewPCG(9, 9)))
						Sgemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, o.c, o.ldc)
						results = append(results, o.c)
					}
					for w := 1; w < len(results); w++ {
						for i := range results[0] {
							x, y := math.Float32bits(results[0][i]), math.Float32bits(results[w][i])
							if x != y {
								t.Fatalf("worker count variant %d differs at %d: %g vs %g", w, i, results[w][i], results[0][i])
							}
						}
					}
				})
			}
		}
	}
}

func TestSgemmShapeMismatchPanics(t *testing.T) {
	a, b, c := make([]float32, 12), make([]float32, 12), make([]float32, 12)
	cases := []struct {
		name string
		call func()
		want string
	}{
		{"negative m", func() { Sgemm(false, false, -1, 3, 4, 1, a, 4, b, 3, 0, c, 3) }, "negative dimension"},
		{"short A", func() { Sgemm(false, false, 4, 3, 4, 1, a, 4, b, 3, 0, c, 3) }, "A has 12 elements"},
		{"short B transposed", func() { Sgemm(false, true, 3, 4, 4, 1, a, 4, b, 4, 0, c, 4) }, "B has 12 elements"},
		{"short C", func() { Sgemm(false, false, 3, 4, 3, 1, a, 3, b, 4, 0, c[:11], 4) }, "C has 11 elements"},
		{"lda too small", func() { Sgemm(false, false, 3, 3, 4, 1, a, 3, b, 3, 0, c, 3) }, "lda=3"},
		{"ldb too small transposed", func() { Sgemm(false, true, 3, 3, 4, 1, a, 4, b, 3, 0, c, 3) }, "ldb=3"},
		{"ldc too small", func() { Sgemm(false, false, 3, 4, 2, 1, a, 2, b, 4, 0, c, 3) }, "ldc=3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if r == nil || !strings.Contains(msg, tc.want) {
					t.Fatalf("panic %v, want a message containing %q", r, tc.want)
				}
			}()
			tc.call()
		})
	}
}

func FuzzSgemm(f *testing.F) {
	f.Add(uint8(7), uint8(13), uint8(5), uint8(0), uint64(1))
	f.Add(uint8(33), uint8(65), uint8(17), uint8(15), uint64(2))
	f.Add(uint8(0), uint8(3), uint8(9), uint8(6), uint64(3))
	f.Fuzz(func(t *testing.T, m, n, k, flags uint8, seed uint64) {
		scal := [][2]float32{{1, 0}, {1, 1}, {-0.5, 2}, {0, 1}}[flags>>2&3]
		tc := gemmCase{int(m), int(n), int(k), flags&1 != 0, flags&2 != 0, scal[0], scal[1], int(flags >> 4 & 3)}
		for _, kern := range availableKernels() {
			withKernel(t, kern, 2)
			checkCase(t, tc, seed)
		}
	})
}
