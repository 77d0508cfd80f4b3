package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestNarrowKernelKeepsBits: handing a narrow product to a kernel's narrow partner changes no
// bit of C. The partner must slice k as the kernel does, and every element must come out of the
// same FMA chain and store, for every transpose, scalar pair, row count and worker count; k
// spans several slices so the slicing is exercised.
func TestNarrowKernelKeepsBits(t *testing.T) {
	for _, kern := range availableKernels() {
		if kern.narrow == nil {
			continue
		}
		if kern.narrow.kc != kern.kc {
			t.Fatalf("%s: narrow kernel %s slices k by %d, not %d", kern.name, kern.narrow.name, kern.narrow.kc, kern.kc)
		}
		seed := uint64(0)
		for _, m := range []int{17, 40, 131} {
			for _, n := range []int{1, 7, 16} {
				for _, k := range []int{5, 16, 385, 900} {
					for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
						for _, ab := range [][2]float32{{1, 0}, {0.5, 1}, {-1.25, 0.75}} {
							seed++
							tc := gemmCase{m, n, k, tr[0], tr[1], ab[0], ab[1], int(seed % 3)}
							o := tc.operands(rand.New(rand.NewPCG(seed, 0x9a77)))
							run := func(narrow *microKernel, workers int) []float32 {
								saved := kern.narrow
								kern.narrow = narrow
								defer func() { kern.narrow = saved }()
								withKernel(t, kern, workers)
								c := slices.Clone(o.c)
								Sgemm(tc.transA, tc.transB, m, n, k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, c, o.ldc)
								return c
							}
							want := run(nil, 1)
							for _, workers := range []int{1, 2, 3} {
								got := run(kern.narrow, workers)
								for i := range want {
									if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
										t.Fatalf("%s %+v workers=%d: C[%d] = %v with %s, %v without", kern.name, tc, workers, i, got[i], kern.narrow.name, want[i])
									}
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestInstructionSetsAgree: every assembly kernel this CPU runs gives the bits of every other,
// through the blocked path, the small-m paths and packed one-row and several-row products (the
// same fused multiply-adds over the same k slices in the same order, the same store), so that
// machines with AVX-512 and machines with AVX2 only compute the same logprobs. The Go kernel is
// left out: it rounds each product before adding it on amd64 (and fuses them on arm64).
func TestInstructionSetsAgree(t *testing.T) {
	var asm []*microKernel
	for _, k := range availableKernels() {
		if k != &goKernel {
			asm = append(asm, k)
		}
	}
	if len(asm) < 2 {
		t.Skip("this CPU runs fewer than two assembly kernels")
	}
	seed := uint64(0)
	for _, s := range [][3]int{{1, 300, 800}, {3, 70, 385}, {16, 33, 129}, {40, 100, 900}, {200, 130, 64}} {
		m, n, k := s[0], s[1], s[2]
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			seed++
			tc := gemmCase{m, n, k, tr[0], tr[1], 1.5, 0.5, int(seed % 3)}
			o := tc.operands(rand.New(rand.NewPCG(seed, 0x15a)))
			var want []float32
			for i, kern := range asm {
				withKernel(t, kern, 2)
				c := slices.Clone(o.c)
				Sgemm(tc.transA, tc.transB, m, n, k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, c, o.ldc)
				if i == 0 {
					want = c
					continue
				}
				for j := range c {
					if math.Float32bits(c[j]) != math.Float32bits(want[j]) && !(math.IsNaN(float64(c[j])) && math.IsNaN(float64(want[j]))) {
						t.Fatalf("%v: %s gives C[%d] = %g, %s %g", tc, kern.name, j, c[j], asm[0].name, want[j])
					}
				}
			}
			if !tc.transB || tc.transA {
				continue
			}
			// The same weight packed for each kernel, as each machine's engine packs it.
			w := make([]float32, n*k)
			for r := range n {
				copy(w[r*k:(r+1)*k], o.b[r*o.ldb:])
			}
			for _, kern := range asm {
				withKernel(t, kern, 2)
				var pw PackedWeights
				pw.Pack(w, n, k)
				c := slices.Clone(o.c)
				SgemmPacked(m, tc.alpha, o.a, o.lda, &pw, tc.beta, c, o.ldc)
				for j := range c {
					if math.Float32bits(c[j]) != math.Float32bits(want[j]) && !(math.IsNaN(float64(c[j])) && math.IsNaN(float64(want[j]))) {
						t.Fatalf("%v packed: %s gives C[%d] = %g, %s %g", tc, kern.name, j, c[j], asm[0].name, want[j])
					}
				}
			}
		}
	}
}
