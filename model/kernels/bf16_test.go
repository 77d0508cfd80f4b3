package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestBF16FromFloat32: round to nearest, ties to even, at the boundaries that matter: halfway
// cases both ways, the carry into the exponent, overflow to Inf, subnormals, signed zero, NaN.
func TestBF16FromFloat32(t *testing.T) {
	cases := []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0x3f808000, 0x3f80}, // 1 + half an ulp: tie, to even (down)
		{0x3f818000, 0x3f82}, // tie, to even (up)
		{0x3f808001, 0x3f81}, // just above the tie
		{0x3f807fff, 0x3f80}, // just below the tie
		{0x3fff8000, 0x4000}, // the carry moves into the exponent
		{0x7f7fffff, 0x7f80}, // the largest float32 rounds past the largest bfloat16: +Inf
		{0x7f7f7fff, 0x7f7f}, // below the tie at the top: the largest finite bfloat16
		{0xff7fffff, 0xff80}, // -Inf
		{0x7f800000, 0x7f80}, // +Inf stays
		{0x00000000, 0x0000},
		{0x80000000, 0x8000}, // -0 stays -0
		{0x00008000, 0x0000}, // the smallest subnormal tie rounds to even: 0
		{0x00018000, 0x0002}, // a subnormal tie rounds to even: up
		{0x0000ffff, 0x0001},
		{0x7f800001, 0x7fc0}, // a signalling NaN with a low payload stays a NaN (quiet)
		{0xffffffff, 0xffff}, // a NaN with every bit set
		{0x7fffffff, 0x7fff},
	}
	for _, c := range cases {
		if got := BF16FromFloat32(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("BF16FromFloat32(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	// Every bfloat16 but the NaNs goes back to itself; every NaN stays a NaN.
	for h := range 1 << 16 {
		f := BF16ToFloat32(uint16(h))
		got := BF16FromFloat32(f)
		if math.IsNaN(float64(f)) {
			if !math.IsNaN(float64(BF16ToFloat32(got))) {
				t.Fatalf("NaN %#04x became %#04x", h, got)
			}
			continue
		}
		if got != uint16(h) {
			t.Fatalf("bfloat16 %#04x round-trips to %#04x", h, got)
		}
	}
	// Against a float64 reference of round-to-nearest-even on random finite values.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		f := math.Float32frombits(rng.Uint32())
		if math.IsNaN(float64(f)) || math.Abs(float64(f)) > 3e38 { // the top binade is in the table
			continue
		}
		got := float64(BF16ToFloat32(BF16FromFloat32(f)))
		lo := float64(math.Float32frombits(math.Float32bits(f) &^ 0xffff))
		hi := float64(math.Float32frombits(math.Float32bits(f)&^0xffff + 0x10000))
		if math.Abs(float64(f)) < math.Abs(lo) || math.Abs(float64(f)) > math.Abs(hi) {
			t.Fatalf("bad bracket for %g", f)
		}
		dl, dh := math.Abs(float64(f)-lo), math.Abs(hi-float64(f))
		want := lo
		if dh < dl || (dh == dl && math.Float32bits(float32(lo))&0x10000 != 0) {
			want = hi
		}
		if got != want {
			t.Fatalf("%g (%#08x) rounds to %g, want %g", f, math.Float32bits(f), got, want)
		}
	}
}

// bf16Ref is C = alpha*A·Wᵀ + beta*C in float64 over the bfloat16-rounded weights.
func bf16Ref(m, n, k int, alpha float32, a []float32, lda int, w []float32, beta float32, c []float32, ldc int) []float64 {
	out := make([]float64, len(c))
	for i := range c {
		out[i] = float64(c[i])
	}
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				s += float64(a[i*lda+p]) * float64(BF16ToFloat32(BF16FromFloat32(w[j*k+p])))
			}
			v := float64(alpha) * s
			if beta != 0 {
				v += float64(beta) * float64(c[i*ldc+j])
			}
			out[i*ldc+j] = v
		}
	}
	return out
}

// TestSgemmBF16MatchesReference: every kernel family, row count, odd shape, alpha/beta and worker
// count against a float64 product over the rounded weights; padding of A and C (NaN) is neither
// read into the result nor overwritten.
func TestSgemmBF16MatchesReference(t *testing.T) {
	ms := []int{0, 1, 2, 5, 12, 13, 25, 32}
	nks := [][2]int{{1, 1}, {5, 3}, {16, 16}, {33, 385}, {64, 770}, {70, 129}, {130, 7}, {0, 4}, {4, 0}, {300, 64}}
	scalars := [][2]float32{{1, 0}, {1, 1}, {-1.5, 0.75}, {2, float32(math.Copysign(0, -1))}, {0, 2}}
	for _, kern := range availableKernels() {
		t.Run(kern.name, func(t *testing.T) {
			seed := uint64(0)
			for _, nk := range nks {
				n, k := nk[0], nk[1]
				rng := rand.New(rand.NewPCG(seed, 0xbf16))
				w, _ := randMatrix(rng, n, k, 0)
				withKernel(t, kern, 1)
				var pw PackedBF16
				pw.Pack(w, n, k)
				for _, m := range ms {
					for _, ab := range scalars {
						seed++
						pad := int(seed % 3)
						a, lda := randMatrix(rng, m, k, pad)
						c0, ldc := randMatrix(rng, m, n, pad)
						want := bf16Ref(m, n, k, ab[0], a, lda, w, ab[1], c0, ldc)
						for _, workers := range []int{1, 2} {
							withKernel(t, kern, workers)
							got := append([]float32(nil), c0...)
							SgemmBF16(m, ab[0], a, lda, &pw, ab[1], got, ldc)
							for i := range got {
								if i%max(ldc, 1) >= n {
									if !math.IsNaN(float64(got[i])) {
										t.Fatalf("m=%d n=%d k=%d: padding C[%d] overwritten", m, n, k, i)
									}
									continue
								}
								// Float32 sums of k products: the error grows with k and the
								// magnitudes summed (|a|·|w| ~ 1 each, plus beta·C).
								tol := 1e-5 * float64(k+2) * (1 + math.Abs(float64(ab[0]))) * 4
								if d := math.Abs(float64(got[i]) - want[i]); !(d <= tol) {
									t.Fatalf("m=%d n=%d k=%d alpha=%g beta=%g workers=%d: C[%d] = %g, reference %g", m, n, k, ab[0], ab[1], workers, i, got[i], want[i])
								}
							}
						}
					}
				}
			}
		})
	}
}

// TestSgemmBF16Bitwise: a row's result is the same bits whatever else shares the call: for every
// family, each row of an m-row product equals the same row computed alone (the gemv kernels, each
// of them, and the one-row kernel), with one or two workers; and the AVX-512 and AVX2 families,
// whose elements are one FMA chain each, agree bit for bit.
func TestSgemmBF16Bitwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	n, k := 517, 203
	w, _ := randMatrix(rng, n, k, 0)
	const m = 19
	a, _ := randMatrix(rng, m, k, 0)
	results := map[string][]float32{}
	for _, kern := range availableKernels() {
		withKernel(t, kern, 2)
		var pw PackedBF16
		pw.Pack(w, n, k)
		all := make([]float32, m*n)
		SgemmBF16(m, 1, a, k, &pw, 0, all, n)
		results[kern.name] = all
		choices := 1
		if pw.fam != nil {
			choices = len(pw.fam.gemv) + 1
		}
		for ch := range choices {
			for _, gemv := range []bool{true, false} {
				prevChoice, prevOn := gemvChoice, gemvOn
				gemvChoice, gemvOn = ch, gemv
				for _, workers := range []int{1, 2} {
					withKernel(t, kern, workers)
					for i := 0; i < m; i++ {
						row := make([]float32, n)
						SgemmBF16(1, 1, a[i*k:(i+1)*k], k, &pw, 0, row, n)
						for j := range row {
							if math.Float32bits(row[j]) != math.Float32bits(all[i*n+j]) {
								t.Fatalf("%s gemv=%v choice %d workers %d: row %d column %d alone %g, among %d rows %g", kern.name, gemv, ch, workers, i, j, row[j], m, all[i*n+j])
							}
						}
					}
				}
				gemvChoice, gemvOn = prevChoice, prevOn
			}
		}
	}
	x, y := results["avx512_12x32"], results["avx2_6x16"]
	if x != nil && y != nil {
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
				t.Fatalf("C[%d]: AVX-512 %g, AVX2 %g", i, x[i], y[i])
			}
		}
	}
	g := results[goKernel.name]
	for name, r := range results {
		for i := range r {
			if d := math.Abs(float64(r[i] - g[i])); d > 1e-4*(1+math.Abs(float64(g[i]))) {
				t.Fatalf("C[%d]: %s %g, Go %g", i, name, r[i], g[i])
			}
		}
	}
}

// TestSgemmBF16Part: the parts of a product (SgemmBF16Part, as a decode step runs them in its own
// parallel region), in any order, make SgemmBF16's result bit for bit, for one row and for more,
// for every family and every cut from one part to more than the product has panels.
func TestSgemmBF16Part(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	n, k := 517, 203
	w, _ := randMatrix(rng, n, k, 0)
	for _, kern := range availableKernels() {
		withKernel(t, kern, 1)
		var pw PackedBF16
		pw.Pack(w, n, k)
		for _, m := range []int{1, 7} {
			a, _ := randMatrix(rng, m, k, 0)
			c0, _ := randMatrix(rng, m, n, 0)
			want := append([]float32(nil), c0...)
			SgemmBF16(m, 1.5, a, k, &pw, 0.5, want, n)
			for _, parts := range []int{1, 2, 3, pw.Parts(m, 4), 2 * ((n + pw.width - 1) / pw.width)} {
				got := append([]float32(nil), c0...)
				for part := parts - 1; part >= 0; part-- {
					SgemmBF16Part(part, parts, m, 1.5, a, k, &pw, 0.5, got, n)
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s m=%d in %d parts: C[%d] = %g, SgemmBF16 %g", kern.name, m, parts, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestSgemmBF16Repack: packing new weights into the same PackedBF16 replaces the old ones, and a
// narrower matrix leaves no stale columns in the padding.
func TestSgemmBF16Repack(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	w1, _ := randMatrix(rng, 40, 20, 0)
	w2, _ := randMatrix(rng, 37, 20, 0)
	a, _ := randMatrix(rng, 3, 20, 0)
	var pw, fresh PackedBF16
	pw.Pack(w1, 40, 20)
	pw.Pack(w2, 37, 20)
	fresh.Pack(w2, 37, 20)
	got, want := make([]float32, 3*37), make([]float32, 3*37)
	SgemmBF16(3, 1, a, 20, &pw, 0, got, 37)
	SgemmBF16(3, 1, a, 20, &fresh, 0, want, 37)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("C[%d] = %g after repacking, want %g", i, got[i], want[i])
		}
	}
}

// BenchmarkSgemmBF16 compares SgemmBF16 with SgemmPacked at the default model's decoding shapes
// (fused QKV, output, gate+up, down, LM head at Dim 256) and a 24 M model's (Dim 512), for one
// and 32 rows.
func BenchmarkSgemmBF16(b *testing.B) {
	for _, nk := range [][2]int{{512, 256}, {1376, 256}, {256, 688}, {2048, 256}, {1376, 512}, {512, 1376}} {
		for _, m := range []int{1, 32} {
			s := benchShape{fmt.Sprintf("NT_%dx%dx%d", m, nk[0], nk[1]), false, true, m, nk[0], nk[1]}
			a, w, c, lda, _ := s.operands()
			b.Run(s.name+"/f32", func(b *testing.B) {
				var pw PackedWeights
				pw.Pack(w, s.n, s.k)
				b.ResetTimer()
				for range b.N {
					SgemmPacked(s.m, 1, a, lda, &pw, 0, c, s.n)
				}
				reportGflops(b, s)
			})
			b.Run(s.name+"/bf16", func(b *testing.B) {
				var pw PackedBF16
				pw.Pack(w, s.n, s.k)
				b.ResetTimer()
				for range b.N {
					SgemmBF16(s.m, 1, a, lda, &pw, 0, c, s.n)
				}
				reportGflops(b, s)
			})
		}
	}
}

// BenchmarkDecodeProductsBF16 times all of a decode step's batch-1 products (every layer's
// projections and the LM head) with float32 packed weights and with bfloat16 ones, as decoding
// runs them (split across the cores when the tuner finds that faster), and reports the weights'
// bytes streamed per second and, as of-read, the fraction of ReadBandwidth over a buffer of that
// many bytes.
func BenchmarkDecodeProductsBF16(b *testing.B) {
	for _, sz := range []struct {
		name   string
		layers int
		shapes [][2]int // n, k per layer, then the head
	}{
		{"0.13M", 2, [][2]int{{128, 64}, {64, 64}, {384, 64}, {64, 192}, {512, 64}}},
		{"3.4M", 4, [][2]int{{512, 256}, {256, 256}, {1376, 256}, {256, 688}, {2048, 256}}},
		{"24M", 8, [][2]int{{1024, 512}, {512, 512}, {2752, 512}, {512, 1376}, {2048, 512}}},
	} {
		rng := rand.New(rand.NewPCG(1, 1))
		var f32 []*PackedWeights
		var bf []*PackedBF16
		maxN, params := 0, 0
		for l := 0; l <= sz.layers; l++ {
			shapes := sz.shapes[:4]
			if l == sz.layers {
				shapes = sz.shapes[4:]
			}
			for _, s := range shapes {
				w, _ := randMatrix(rng, s[0], s[1], 0)
				p, q := &PackedWeights{}, &PackedBF16{}
				p.Pack(w, s[0], s[1])
				q.Pack(w, s[0], s[1])
				f32, bf = append(f32, p), append(bf, q)
				maxN, params = max(maxN, s[0], s[1]), params+s[0]*s[1]
			}
		}
		a, _ := randMatrix(rng, 1, maxN, 0)
		c := make([]float32, maxN)
		for _, prec := range []string{"f32", "bf16"} {
			b.Run(sz.name+"/"+prec, func(b *testing.B) {
				bytes := 4 * params
				if prec == "bf16" {
					bytes = 2 * params
				}
				read := ReadBandwidth(bytes, 100*time.Millisecond)
				b.ResetTimer()
				for range b.N {
					for i := range f32 {
						n, k := f32[i].Dims()
						if prec == "bf16" {
							SgemmBF16(1, 1, a, k, bf[i], 0, c, n)
						} else {
							SgemmPacked(1, 1, a, k, f32[i], 0, c, n)
						}
					}
				}
				rate := float64(bytes) * float64(b.N) / b.Elapsed().Seconds()
				b.ReportMetric(rate/1e9, "GB/s")
				b.ReportMetric(rate/read, "of-read")
			})
		}
	}
}
