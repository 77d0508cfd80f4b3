package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// withSmall forces the small-m path on (limit > 0: every m up to limit) or off (limit < 0).
func withSmall(t testing.TB, limit int) {
	prev := smallOverride
	smallOverride = limit
	t.Cleanup(func() { smallOverride = prev })
}

// sgemmRows runs Sgemm on rows rows of op(A) taken from o (rows is a list of row indices of
// op(A) and of C) and returns the resulting rows of C, row after row, n floats each.
func sgemmRows(tc gemmCase, o operands, rows []int) []float32 {
	m := len(rows)
	ar, ac := m, tc.k
	if tc.transA {
		ar, ac = tc.k, m
	}
	a := make([]float32, ar*ac)
	for r, i := range rows {
		for p := 0; p < tc.k; p++ {
			if tc.transA {
				a[p*m+r] = o.a[p*o.lda+i]
			} else {
				a[r*tc.k+p] = o.a[i*o.lda+p]
			}
		}
	}
	c := make([]float32, m*tc.n)
	for r, i := range rows {
		copy(c[r*tc.n:(r+1)*tc.n], o.c[i*o.ldc:i*o.ldc+tc.n])
	}
	Sgemm(tc.transA, tc.transB, m, tc.n, tc.k, tc.alpha, a, ac, o.b, o.ldb, tc.beta, c, tc.n)
	return c
}

// TestSgemmSmallBitwise: a row of C must come out bit for bit the same whichever path computes
// it (small-m or blocked), whatever m is and whichever rows share the call, for every kernel
// this CPU runs. Decoding batches change composition with scheduling, and a prefill must equal
// token-by-token decoding, so training reproducibility rests on this.
func TestSgemmSmallBitwise(t *testing.T) {
	ms := []int{1, 2, 3, 5, 6, 7, 8, 11, 12, 13, 16, 17, 24, 25, 33}
	nks := [][2]int{{1, 1}, {5, 3}, {16, 16}, {17, 9}, {40, 129}, {33, 385}, {130, 7}, {64, 770}, {8, 1000}}
	scalars := [][2]float32{{1, 0}, {1, 1}, {0.5, 1}, {-1.5, 0.75}, {2, -0}}
	for _, kern := range availableKernels() {
		t.Run(kern.name, func(t *testing.T) {
			seed := uint64(0)
			for _, m := range ms {
				for _, nk := range nks {
					for _, ab := range scalars {
						for _, tr := range [][2]bool{{false, true}, {true, true}, {false, false}, {true, false}} {
							seed++
							tc := gemmCase{m, nk[0], nk[1], tr[0], tr[1], ab[0], ab[1], int(seed % 3)}
							checkSmallBitwise(t, kern, tc, seed)
						}
					}
				}
			}
		})
	}
}

func checkSmallBitwise(t *testing.T, kern *microKernel, tc gemmCase, seed uint64) {
	t.Helper()
	o := tc.operands(rand.New(rand.NewPCG(seed, 0xb17)))
	all := make([]int, tc.m)
	for i := range all {
		all[i] = i
	}
	// One row alone, the last row with the first, and the whole batch: each must agree with the
	// blocked path over the whole batch.
	subsets := [][]int{{tc.m - 1}, all}
	if tc.m > 2 {
		subsets = append(subsets, []int{tc.m - 1, 0}, all[1:])
	}
	withKernel(t, kern, 1)
	withSmall(t, -1)
	want := sgemmRows(tc, o, all)
	for _, limit := range []int{-1, 1 << 20} {
		for _, workers := range []int{1, 2} {
			withKernel(t, kern, workers)
			withSmall(t, limit)
			for _, rows := range subsets {
				got := sgemmRows(tc, o, rows)
				for r, i := range rows {
					for j := 0; j < tc.n; j++ {
						g, w := got[r*tc.n+j], want[i*tc.n+j]
						if math.Float32bits(g) != math.Float32bits(w) {
							t.Fatalf("%v small=%v workers=%d rows=%v: C[%d][%d] = %g (%#x), batch blocked %g (%#x)",
								tc, limit > 0, workers, rows, i, j, g, math.Float32bits(g), w, math.Float32bits(w))
						}
					}
				}
			}
		}
	}
}

// TestSgemmSmallMatchesReference checks the small-m path against sgemmRef for every kernel,
// every combination of transposes and odd strides (padding holds NaN, so a stray read shows).
func TestSgemmSmallMatchesReference(t *testing.T) {
	seed := uint64(100)
	for _, kern := range availableKernels() {
		for _, s := range [][3]int{{1, 1, 1}, {3, 17, 5}, {12, 33, 387}, {13, 100, 64}, {16, 1, 800}, {1, 2100, 40}} {
			for _, ab := range scalarTable {
				for _, tr := range [][2]bool{{false, true}, {true, true}, {false, false}, {true, false}} {
					seed++
					tc := gemmCase{s[0], s[1], s[2], tr[0], tr[1], ab[0], ab[1], 3}
					t.Run(fmt.Sprintf("%s/%v", kern.name, tc), func(t *testing.T) {
						withKernel(t, kern, 2)
						withSmall(t, 1<<20)
						checkCase(t, tc, seed)
					})
				}
			}
		}
	}
}

// BenchmarkSgemmSmall compares the small-m path with the blocked path at decoding shapes:
// C = X·Wᵀ with m sequences decoding together and W of shape n×k (the model's fused QKV,
// gate+up, down, LM head and output projections at Dim 128 and 256).
func BenchmarkSgemmSmall(b *testing.B) {
	nks := [][2]int{{128, 128}, {384, 128}, {704, 128}, {128, 352}, {512, 128}, {256, 256}, {768, 256}, {2048, 256}}
	for _, nk := range nks {
		for _, m := range []int{1, 4, 8, 12, 16, 24, 32} {
			s := benchShape{fmt.Sprintf("NT_%dx%dx%d", m, nk[0], nk[1]), false, true, m, nk[0], nk[1]}
			for _, path := range []struct {
				name  string
				limit int
			}{{"blocked", -1}, {"small", 1 << 20}} {
				b.Run(s.name+"/"+path.name, func(b *testing.B) {
					withSmall(b, path.limit)
					a, w, c, lda, ldb := s.operands()
					b.ResetTimer()
					for range b.N {
						Sgemm(false, true, s.m, s.n, s.k, 1, a, lda, w, ldb, 0, c, s.n)
					}
					reportGflops(b, s)
				})
			}
		}
	}
}
