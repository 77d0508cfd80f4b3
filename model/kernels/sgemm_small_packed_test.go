package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestSgemmPackedBitwise: SgemmPacked must give bit for bit what Sgemm's blocked path gives for
// the same W (stored n×k, transB), for every kernel, m, slicing of k, alpha/beta and worker
// count, including ragged last panels and strided A and C (padding holds NaN).
func TestSgemmPackedBitwise(t *testing.T) {
	ms := []int{0, 1, 2, 5, 12, 13, 25, 32, 40}
	nks := [][2]int{{1, 1}, {5, 3}, {16, 16}, {33, 385}, {64, 770}, {70, 129}, {130, 7}, {0, 4}, {4, 0}}
	scalars := [][2]float32{{1, 0}, {1, 1}, {-1.5, 0.75}, {2, -0}, {0, 2}}
	for _, kern := range availableKernels() {
		t.Run(kern.name, func(t *testing.T) {
			seed := uint64(0)
			for _, nk := range nks {
				n, k := nk[0], nk[1]
				withKernel(t, kern, 1)
				rng := rand.New(rand.NewPCG(seed, 0xfacade))
				w, _ := randMatrix(rng, n, k, 0)
				var pw PackedWeights
				pw.Pack(w, n, k)
				for _, m := range ms {
					for _, ab := range scalars {
						seed++
						tc := gemmCase{m, n, k, false, true, ab[0], ab[1], int(seed % 3)}
						o := tc.operands(rand.New(rand.NewPCG(seed, 0xb17)))
						want := append([]float32(nil), o.c...)
						withKernel(t, kern, 1)
						withSmall(t, -1)
						Sgemm(false, true, m, n, k, tc.alpha, o.a, o.lda, w, max(k, 1), tc.beta, want, o.ldc)
						for _, workers := range []int{1, 2} {
							withKernel(t, kern, workers)
							got := append([]float32(nil), o.c...)
							SgemmPacked(m, tc.alpha, o.a, o.lda, &pw, tc.beta, got, o.ldc)
							for i := range got {
								if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i]))) {
									t.Fatalf("%v workers=%d: C[%d] = %g, blocked Sgemm %g", tc, workers, i, got[i], want[i])
								}
							}
						}
					}
				}
			}
		})
	}
}

// TestSgemmPackedRepack: packing new weights into the same PackedWeights replaces the old ones.
func TestSgemmPackedRepack(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	w1, _ := randMatrix(rng, 40, 20, 0)
	w2, _ := randMatrix(rng, 40, 20, 0)
	a, _ := randMatrix(rng, 3, 20, 0)
	var pw PackedWeights
	pw.Pack(w1, 40, 20)
	pw.Pack(w2, 40, 20)
	got, want := make([]float32, 3*40), make([]float32, 3*40)
	SgemmPacked(3, 1, a, 20, &pw, 0, got, 40)
	Sgemm(false, true, 3, 40, 20, 1, a, 20, w2, 20, 0, want, 40)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("C[%d] = %g after repacking, want %g", i, got[i], want[i])
		}
	}
}

// BenchmarkSgemmPacked compares SgemmPacked with Sgemm (its small-m path for m ≤ smallMaxM, the
// blocked one above) at the default model's decoding shapes: C = X·Wᵀ, W n×k (fused QKV, output,
// gate+up, down, LM head at Dim 256), m sequences decoding together.
func BenchmarkSgemmPacked(b *testing.B) {
	for _, nk := range [][2]int{{512, 256}, {256, 256}, {1376, 256}, {256, 688}, {2048, 256}} {
		for _, m := range []int{1, 32} {
			s := benchShape{fmt.Sprintf("NT_%dx%dx%d", m, nk[0], nk[1]), false, true, m, nk[0], nk[1]}
			a, w, c, lda, ldb := s.operands()
			b.Run(s.name+"/sgemm", func(b *testing.B) {
				for range b.N {
					Sgemm(false, true, s.m, s.n, s.k, 1, a, lda, w, ldb, 0, c, s.n)
				}
				reportGflops(b, s)
			})
			b.Run(s.name+"/packed", func(b *testing.B) {
				var pw PackedWeights
				pw.Pack(w, s.n, s.k)
				b.ResetTimer()
				for range b.N {
					SgemmPacked(s.m, 1, a, lda, &pw, 0, c, s.n)
				}
				reportGflops(b, s)
			})
		}
	}
}

// TestSmallNNPrefetchKeepsBits: each prefetching NN kernel gives the bits of the plain one of its
// row count, whatever its prefetch distance, including distances far past the end of B.
func TestSmallNNPrefetchKeepsBits(t *testing.T) {
	for _, kern := range availableKernels() {
		nn := smallNNFor(kern)
		if nn == nil || nn.pfns == nil {
			continue
		}
		rng := rand.New(rand.NewPCG(7, 7))
		for rows := 1; rows <= len(nn.fns); rows++ {
			for _, kb := range []int{1, 3, 4, 9, 64} {
				for _, pfd := range []int{0, 4 * kb * nn.width, 1 << 20, -4096} {
					a, lda := randMatrix(rng, rows, kb, 3)
					b, _ := randMatrix(rng, kb, nn.width, 0)
					c0, ldc := randMatrix(rng, rows, nn.width, 5)
					want := append([]float32(nil), c0...)
					got := append([]float32(nil), c0...)
					nn.fns[rows-1](kb, &a[0], lda, &b[0], nn.width, &want[0], ldc, 1.5, 0.5)
					nn.pfns[rows-1](kb, &a[0], lda, &b[0], nn.width, &got[0], ldc, 1.5, 0.5, pfd)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s rows %d kb %d pfd %d: element %d is %v, want %v", kern.name, rows, kb, pfd, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// BenchmarkSgemmPackedStream runs the products of a decode step's weights, a whole model's
// layers one after another, so that weights larger than the caches come from memory as in
// decoding: m=1 streams them, m=32 is where the prefetching passes of smallNNPanel matter
// (measured with and without them).
// Sizes as `agentrl bench model --configs 512x8,1024x16` (QKV, O, gate+up, down per layer).
func BenchmarkSgemmPackedStream(b *testing.B) {
	for _, sz := range []struct {
		name   string
		layers int
		shapes [][2]int // n, k
	}{
		{"24M", 8, [][2]int{{1024, 512}, {512, 512}, {2752, 512}, {512, 1376}}},
		{"187M", 16, [][2]int{{2048, 1024}, {1024, 1024}, {5472, 1024}, {1024, 2736}}},
	} {
		rng := rand.New(rand.NewPCG(1, 1))
		var ws []*PackedWeights
		maxN := 0
		for range sz.layers {
			for _, s := range sz.shapes {
				w, _ := randMatrix(rng, s[0], s[1], 0)
				p := &PackedWeights{}
				p.Pack(w, s[0], s[1])
				ws = append(ws, p)
				maxN = max(maxN, s[0], s[1])
			}
		}
		for _, run := range []struct {
			m  int
			pf bool
		}{{1, true}, {32, false}, {32, true}} {
			m := run.m
			a, _ := randMatrix(rng, m, maxN, 0)
			c := make([]float32, m*maxN)
			b.Run(fmt.Sprintf("%s/m=%d/prefetch=%v", sz.name, m, run.pf), func(b *testing.B) {
				packedPrefetch = run.pf
				defer func() { packedPrefetch = true }()
				flops := 0.0
				for range b.N {
					for _, p := range ws {
						n, k := p.Dims()
						SgemmPacked(m, 1, a, k, p, 0, c, n)
						flops += 2 * float64(m) * float64(n) * float64(k)
					}
				}
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(float64(m*b.N)/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}

// TestGemvPackedBitwise: a one-row SgemmPacked (gemvPacked) gives the bits of the per-panel NN
// kernels for every gemv kernel width, worker count and split of the panels among parts, over k
// across several slices and n with full groups, short groups and a ragged last panel (padding
// of A and C holds NaN).
func TestGemvPackedBitwise(t *testing.T) {
	nks := [][2]int{{32, 5}, {33, 384}, {100, 385}, {8*32*2 + 16, 64}, {17 * 32, 770}, {300, 129}}
	scalars := [][2]float32{{1, 0}, {1, 1}, {-1.5, 0.75}}
	for _, kern := range availableKernels() {
		nn := smallNNFor(kern)
		if nn != nil && len(nn.gemv) == 0 {
			continue
		}
		widths := []int{2} // gemvGo
		if nn != nil {
			widths = nil
			for _, g := range nn.gemv {
				widths = append(widths, g.panels)
			}
		}
		t.Run(kern.name, func(t *testing.T) {
			prev := [...]int{gemvChoice, gemvMinPartBytes}
			gemvTuneOn = false // every split as asked
			t.Cleanup(func() {
				gemvOn, gemvTuneOn = true, true
				gemvChoice, gemvMinPartBytes = prev[0], prev[1]
			})
			seed := uint64(0)
			for _, nk := range nks {
				n, k := nk[0], nk[1]
				withKernel(t, kern, 1)
				rng := rand.New(rand.NewPCG(seed, 0x9e7))
				w, _ := randMatrix(rng, n, k, 0)
				var pw PackedWeights
				pw.Pack(w, n, k)
				for _, ab := range scalars {
					seed++
					tc := gemmCase{1, n, k, false, true, ab[0], ab[1], int(seed % 3)}
					o := tc.operands(rand.New(rand.NewPCG(seed, 0xb17)))
					want := append([]float32(nil), o.c...)
					gemvOn = false
					SgemmPacked(1, tc.alpha, o.a, o.lda, &pw, tc.beta, want, o.ldc)
					gemvOn = true
					for ch := range widths {
						for _, part := range []int{1, 64 << 10} {
							for _, workers := range []int{1, 2, 3} {
								withKernel(t, kern, workers)
								gemvChoice, gemvMinPartBytes = ch, part
								got := append([]float32(nil), o.c...)
								SgemmPacked(1, tc.alpha, o.a, o.lda, &pw, tc.beta, got, o.ldc)
								for i := range got {
									if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i]))) {
										t.Fatalf("%v gemv %d panels part %d workers %d: C[%d] = %g, want %g",
											tc, widths[ch], part, workers, i, got[i], want[i])
									}
								}
							}
						}
					}
				}
			}
		})
	}
}

// BenchmarkGemvRoofline runs all the batch-1 products of a decode step, layer after layer (the
// weights of `agentrl bench model`'s default size and of --configs 512x8, LM head included): on
// the per-panel path that gemvPacked replaced, and on gemvPacked on one goroutine, split among
// all, and as it runs by itself (gemvTune choosing). It reports the weights streamed per second
// and their fraction of ReadBandwidth over a buffer of the same size, measured just before: the
// physical limit of a batch-1 step on this machine.
func BenchmarkGemvRoofline(b *testing.B) {
	for _, sz := range []struct {
		name   string
		layers int
		shapes [][2]int // n, k per layer
		head   [2]int
	}{
		{"3.4M", 4, [][2]int{{512, 256}, {256, 256}, {1376, 256}, {256, 688}}, [2]int{2048, 256}},
		{"24M", 8, [][2]int{{1024, 512}, {512, 512}, {2752, 512}, {512, 1376}}, [2]int{2048, 512}},
	} {
		rng := rand.New(rand.NewPCG(1, 1))
		var ws []*PackedWeights
		maxN, bytes := 0, 0
		add := func(s [2]int) {
			w, _ := randMatrix(rng, s[0], s[1], 0)
			p := &PackedWeights{}
			p.Pack(w, s[0], s[1])
			ws = append(ws, p)
			maxN, bytes = max(maxN, s[0], s[1]), bytes+4*s[0]*s[1]
		}
		for range sz.layers {
			for _, s := range sz.shapes {
				add(s)
			}
		}
		add(sz.head)
		a, _ := randMatrix(rng, 1, maxN, 0)
		c := make([]float32, maxN)
		for _, v := range []struct {
			name       string
			gemv, tune bool
			workers    int
		}{{"per-panel", false, false, 0}, {"gemv-1core", true, false, 1}, {"gemv-split", true, false, 0}, {"gemv", true, true, 0}} {
			b.Run(sz.name+"/"+v.name, func(b *testing.B) {
				read := ReadBandwidth(bytes, 100*time.Millisecond)
				gemvOn, gemvTuneOn, workerOverride = v.gemv, v.tune, v.workers
				defer func() { gemvOn, gemvTuneOn, workerOverride = true, true, 0 }()
				b.ResetTimer()
				for range b.N {
					for _, p := range ws {
						n, k := p.Dims()
						SgemmPacked(1, 1, a, k, p, 0, c, n)
					}
				}
				rate := float64(bytes) * float64(b.N) / b.Elapsed().Seconds()
				b.ReportMetric(rate/1e9, "GB/s")
				b.ReportMetric(rate/read, "of-read")
			})
		}
	}
}

// TestSplitTuner: the tuner splits unless the median of unsplit runs' last times has been
// faster than split runs' by a fifth; it probes unsplit runs at once, then at periods that double
// from gemvFirstProbe runs up to gemvProbe until both ways have times, split runs gemvFirstProbe
// runs after a switch to unsplit and then at doubling periods, and unsplit runs only every
// gemvRareProbe runs while split runs are the faster; it leaves the first runs after each
// switch untimed; and a few stalled runs in a row do not move it.
func TestSplitTuner(t *testing.T) {
	// changes runs the tuner for runs, recording time ns(split) per KiB for every timed run, and
	// returns the runs at which it changed way (from split, the way before the first run).
	changes := func(st *SplitTuner, runs int, ns func(split bool) float64) (at []int) {
		last := true
		for c := range runs {
			s, timed := st.Split()
			if timed && ns != nil {
				st.Record(s, 1024, time.Duration(ns(s)))
			}
			if s != last {
				at = append(at, c)
			}
			last = s
		}
		return at
	}
	// windows are the runs at which windows start and end, from their first start on.
	windows := func(starts ...int) (at []int) {
		for _, c := range starts {
			at = append(at, c, c+gemvWindow)
		}
		return at
	}
	times := func(split, unsplit float64) func(bool) float64 {
		return func(s bool) float64 {
			if s {
				return split
			}
			return unsplit
		}
	}
	const early = 64 + 128 + 256 + 512
	// No times recorded: windows of unsplit runs at once and at doubling periods.
	var st SplitTuner
	if got, want := changes(&st, early+2*gemvProbe, nil), windows(0, 64, 192, 448, early, early+gemvProbe); !slices.Equal(got, want) {
		t.Fatalf("no times: the way changes at runs %v, want %v", got, want)
	}
	// Split twice as fast: the first window, then one every gemvRareProbe runs.
	st = SplitTuner{}
	if got, want := changes(&st, 2*gemvRareProbe+gemvWindow+1, times(10, 20)), windows(0, gemvRareProbe, 2*gemvRareProbe); !slices.Equal(got, want) {
		t.Fatalf("split faster: the way changes at runs %v, want %v", got, want)
	}
	// Unsplit three times as fast: the switch comes at the run after the first split run timed
	// (after the first window and the warm runs), then windows of split runs gemvFirstProbe runs
	// on and at doubling periods up to gemvProbe.
	st = SplitTuner{}
	sw := gemvWindow + gemvWarm + 1
	want := []int{0, gemvWindow, sw}
	for c, gap := sw-gemvWindow, gemvFirstProbe; c+gap < 5000; gap = min(2*gap, gemvProbe) {
		c += gap
		want = append(want, windows(c)...)
	}
	if got := changes(&st, 5000, times(30, 10)); !slices.Equal(got, want) {
		t.Fatalf("unsplit faster: the way changes at runs %v, want %v", got, want)
	}
	// Three stalled split runs in a row, each a thousand times slower, leave the median alone.
	st = SplitTuner{}
	changes(&st, 200, times(10, 20))
	for i := range 3 {
		st.Record(true, 1024, 10000)
		if s, _ := st.Split(); !s {
			t.Fatalf("after %d stalled runs the tuner left split runs", i+1)
		}
	}
	// Unsplit faster by less than the margin: split.
	st = SplitTuner{}
	for range tunerSamples {
		st.Record(false, 1024, 25)
		st.Record(true, 1024, 30)
	}
	for range 100 {
		st.Split()
	}
	if s, timed := st.Split(); !s || !timed {
		t.Fatalf("unsplit faster by less than a fifth: split %v, timed %v; want true, true", s, timed)
	}
	// The runs after a switch are not timed.
	for range tunerSamples {
		st.Record(false, 1024, 10)
	}
	for i := range gemvWarm {
		if s, timed := st.Split(); s || timed {
			t.Fatalf("run %d after the switch: split %v, timed %v; want false, false", i, s, timed)
		}
	}
	if s, timed := st.Split(); s || !timed {
		t.Fatalf("run %d after the switch: split %v, timed %v; want false, true", gemvWarm, s, timed)
	}
}

// TestSgemmPackedPartBitwise: the parts of a product (SgemmPackedPart), run in any order, give
// SgemmPacked's bits, for the parts PackedWeights.Parts cuts and for any other count, one row
// (gemvPart) and several, every kernel.
func TestSgemmPackedPartBitwise(t *testing.T) {
	for _, kern := range availableKernels() {
		t.Run(kern.name, func(t *testing.T) {
			withKernel(t, kern, 1)
			rng := rand.New(rand.NewPCG(7, 7))
			for _, nk := range [][2]int{{70, 129}, {520, 256}, {260, 700}} {
				n, k := nk[0], nk[1]
				w, _ := randMatrix(rng, n, k, 0)
				var pw PackedWeights
				pw.Pack(w, n, k)
				for _, m := range []int{1, 3, 16} {
					a, _ := randMatrix(rng, m, k, 0)
					c0, _ := randMatrix(rng, m, n, 0)
					want := append([]float32(nil), c0...)
					SgemmPacked(m, 1.5, a, k, &pw, 0.5, want, n)
					for _, parts := range []int{pw.Parts(m, 2), pw.Parts(m, 3), 1, 2, 5} {
						got := append([]float32(nil), c0...)
						for p := parts - 1; p >= 0; p-- {
							SgemmPackedPart(p, parts, m, 1.5, a, k, &pw, 0.5, got, n)
						}
						for i := range got {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("n=%d k=%d m=%d in %d parts: C[%d] = %g, SgemmPacked %g", n, k, m, parts, i, got[i], want[i])
							}
						}
					}
				}
			}
		})
	}
}

// TestPackedPartColumns: where n is a multiple of the panel width, part p of parts writes exactly
// the columns of the panels [p·P/parts, (p+1)·P/parts), float32 and bfloat16 weights, one row
// and several, every kernel; the other columns of C keep what they held. A decode step relies on
// it to cut its query/key/value product at key/value heads.
func TestPackedPartColumns(t *testing.T) {
	for _, kern := range availableKernels() {
		t.Run(kern.name, func(t *testing.T) {
			withKernel(t, kern, 1)
			rng := rand.New(rand.NewPCG(8, 8))
			var pw PackedWeights
			var pb PackedBF16
			for _, bf := range []bool{false, true} {
				width := 0
				for _, P := range []int{4, 12} {
					const k = 96
					if bf {
						pb.Pack(make([]float32, k), 1, k) // learns the width
						width = pb.PanelWidth()
					} else {
						pw.Pack(make([]float32, k), 1, k)
						width = pw.PanelWidth()
					}
					n := P * width
					w, _ := randMatrix(rng, n, k, 0)
					if bf {
						pb.Pack(w, n, k)
					} else {
						pw.Pack(w, n, k)
					}
					for _, m := range []int{1, 3} {
						a, _ := randMatrix(rng, m, k, 0)
						for _, parts := range []int{1, 3, 4, P} {
							for p := range parts {
								got := make([]float32, m*n)
								for i := range got {
									got[i] = float32(math.NaN())
								}
								if bf {
									SgemmBF16Part(p, parts, m, 1, a, k, &pb, 0, got, n)
								} else {
									SgemmPackedPart(p, parts, m, 1, a, k, &pw, 0, got, n)
								}
								lo, hi := p*P/parts*width, (p+1)*P/parts*width
								for i, v := range got {
									if j := i % n; (j >= lo && j < hi) == math.IsNaN(float64(v)) {
										t.Fatalf("bf16 %v P=%d m=%d part %d of %d: C[%d][%d] = %g, want the columns [%d, %d) written and no others",
											bf, P, m, p, parts, i/n, j, v, lo, hi)
									}
								}
							}
						}
					}
				}
			}
		})
	}
}
