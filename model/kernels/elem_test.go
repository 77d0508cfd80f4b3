package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// withElem forces the elementwise implementation for the rest of the test.
func withElem(t *testing.T, k *elemKernel) {
	t.Helper()
	prev := elemOverride
	elemOverride = k
	t.Cleanup(func() { elemOverride = prev })
}

// specialInputs are the values expf treats apart, the edges of its range, and the values
// around them.
func specialInputs() []float32 {
	inf := float32(math.Inf(1))
	xs := []float32{0, float32(math.Copysign(0, -1)), 1, -1, inf, -inf, float32(math.NaN()),
		math.Float32frombits(0x7fc01234), math.Float32frombits(0xffa00001), // NaNs with payloads
		expHi, expLo, 88.72, -87.5, -88, -103, -1e30, 1e30, 1e-30, -1e-30,
		math.Float32frombits(1), math.MaxFloat32, -math.MaxFloat32}
	for _, c := range []float32{expHi, expLo, 0.5 * expLn2Hi, -0.5 * expLn2Hi} {
		b := math.Float32bits(c)
		for d := uint32(1); d < 64; d++ {
			xs = append(xs, math.Float32frombits(b+d), math.Float32frombits(b-d))
		}
	}
	return xs
}

// sameBits reports the first index where two slices differ bit for bit, or −1.
func sameBits(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// TestExpSumMatchesGo: every implementation of expSum gives expSumGo's bits, element and sum,
// for every length around the 16-float block, at every alignment, in place or not, with the
// special inputs mixed in.
func TestExpSumMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	specials := specialInputs()
	for _, k := range availableElemKernels() {
		for n := 0; n <= 70; n++ {
			for _, shift := range []float32{0, 2.5, -3, 90} {
				for off := 0; off < 4; off++ {
					src := make([]float32, n+off)[off:]
					for i := range src {
						src[i] = (rng.Float32()*2 - 1) * 40
						if rng.IntN(4) == 0 {
							src[i] = specials[rng.IntN(len(specials))]
						}
					}
					if rng.IntN(3) == 0 {
						for i := range src { // a row with no NaN or infinity, as softmax sees
							src[i] = (rng.Float32()*2 - 1) * 40
						}
					}
					want := make([]float32, n)
					wantSum := expSumGo(want, src, shift)
					got := make([]float32, n+off+1)[off : off+n]
					gotSum := k.expSum(got, src, shift)
					if i := sameBits(got, want); i >= 0 {
						t.Fatalf("%s n=%d off=%d shift=%v: exp(%v) = %v, want %v", k.name, n, off, shift, src[i], got[i], want[i])
					}
					if math.Float32bits(gotSum) != math.Float32bits(wantSum) {
						t.Fatalf("%s n=%d off=%d shift=%v: sum %v, want %v", k.name, n, off, shift, gotSum, wantSum)
					}
					inPlace := append([]float32(nil), src...)
					if s := k.expSum(inPlace, inPlace, shift); sameBits(inPlace, want) >= 0 || math.Float32bits(s) != math.Float32bits(wantSum) {
						t.Fatalf("%s n=%d: in place differs", k.name, n)
					}
				}
			}
		}
	}
}

// TestExpVecMatchesScalar sweeps float32 bit patterns through each implementation's
// exponential and compares with expf. (Every one of the 2^32 patterns, step 1, takes two
// minutes and passed when the kernels were written.)
func TestExpVecMatchesScalar(t *testing.T) {
	step := uint64(31)
	if testing.Short() {
		step = 997
	}
	const chunk = 1 << 16
	src := make([]float32, 0, chunk)
	want := make([]float32, chunk)
	got := make([]float32, chunk)
	check := func() {
		for i, x := range src {
			want[i] = expf(x - 0) // as expSum computes it: the subtraction quiets a signalling NaN
		}
		for _, k := range availableElemKernels() {
			k.expSum(got, src, 0)
			if i := sameBits(got[:len(src)], want[:len(src)]); i >= 0 {
				t.Fatalf("%s: exp(%v) (bits %#x) = %#x, expf gives %#x", k.name, src[i], math.Float32bits(src[i]),
					math.Float32bits(got[i]), math.Float32bits(want[i]))
			}
		}
		src = src[:0]
	}
	for b := uint64(0); b < 1<<32; b += step {
		src = append(src, math.Float32frombits(uint32(b)))
		if len(src) == chunk {
			check()
		}
	}
	src = append(src, specialInputs()...)
	check()
}

// TestExpfULP: expf is within 2 ulp of the correctly rounded e^x wherever the result is a
// normal float32, over a dense sweep of its range.
func TestExpfULP(t *testing.T) {
	step := uint32(1)
	if testing.Short() {
		step = 101
	}
	worst := 0.0
	check := func(x float32) {
		want := math.Exp(float64(x))
		if want < 0x1p-126 || want > math.MaxFloat32 {
			return
		}
		ulp := math.Ldexp(1, math.Ilogb(want)-23)
		if d := math.Abs(float64(expf(x))-want) / ulp; d > worst {
			worst = d
		}
	}
	for b := uint32(0); b <= math.Float32bits(expHi); b += step { // 0 … expHi
		check(math.Float32frombits(b))
	}
	for b := uint32(0x80000000); b <= math.Float32bits(expLo); b += step { // −0 … expLo
		check(math.Float32frombits(b))
	}
	if worst > 2 {
		t.Fatalf("expf is %.2f ulp from e^x", worst)
	}
	t.Logf("worst %.3f ulp", worst)
}

// TestSwiGLUMatchesGo: every implementation of the SwiGLU kernels gives the Go bits, NaN
// payloads and signs included.
func TestSwiGLUMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	specials := specialInputs()
	for _, k := range availableElemKernels() {
		for n := 0; n <= 70; n++ {
			g := randSlice(rng, n, 12)
			for i := range g {
				if rng.IntN(5) == 0 {
					g[i] = specials[rng.IntN(len(specials))]
				}
			}
			u, dy := randSlice(rng, n, 2), randSlice(rng, n, 2)
			dg0, du0 := randSlice(rng, n, 1), randSlice(rng, n, 1)

			want, got := make([]float32, n), make([]float32, n)
			swigluForwardGo(want, g, u)
			k.swigluFwd(got, g, u)
			if i := sameBits(got, want); i >= 0 {
				t.Fatalf("%s n=%d: silu(%v)·%v = %v, want %v", k.name, n, g[i], u[i], got[i], want[i])
			}
			wdg, wdu := append([]float32(nil), dg0...), append([]float32(nil), du0...)
			gdg, gdu := append([]float32(nil), dg0...), append([]float32(nil), du0...)
			swigluBackwardGo(wdg, wdu, dy, g, u)
			k.swigluBwd(gdg, gdu, dy, g, u)
			if i := sameBits(gdg, wdg); i >= 0 {
				t.Fatalf("%s n=%d: dg at g=%v is %v, want %v", k.name, n, g[i], gdg[i], wdg[i])
			}
			if i := sameBits(gdu, wdu); i >= 0 {
				t.Fatalf("%s n=%d: du at g=%#x is %#x, want %#x", k.name, n, math.Float32bits(g[i]), math.Float32bits(gdu[i]), math.Float32bits(wdu[i]))
			}
			// The set variant: clearing to +0 and adding, whatever dg and du held (NaN here).
			clear(wdg)
			clear(wdu)
			swigluBackwardGo(wdg, wdu, dy, g, u)
			for i := range gdg {
				gdg[i], gdu[i] = float32(math.NaN()), float32(math.Copysign(0, -1))
			}
			k.swigluBwdSet(gdg, gdu, dy, g, u)
			if i := sameBits(gdg, wdg); i >= 0 {
				t.Fatalf("%s n=%d: set dg at g=%v is %v, want %v", k.name, n, g[i], gdg[i], wdg[i])
			}
			if i := sameBits(gdu, wdu); i >= 0 {
				t.Fatalf("%s n=%d: set du at g=%v is %#x, want %#x", k.name, n, g[i], math.Float32bits(gdu[i]), math.Float32bits(wdu[i]))
			}
		}
	}
}

// TestMaxScaleMatchGo: every implementation's max is maxGo's (up to the sign of a zero
// maximum, with NaN rows NaN) and its scale is scaleGo's, at every length around the block.
func TestMaxScaleMatchGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	specials := specialInputs()
	for _, k := range availableElemKernels() {
		for n := 1; n <= 70; n++ {
			for trial := 0; trial < 8; trial++ {
				x := randSlice(rng, n, 30)
				switch trial {
				case 1:
					x[rng.IntN(n)] = specials[rng.IntN(len(specials))]
				case 2:
					for i := range x {
						x[i] = -x[i]*x[i] - 1 // all negative: masked lanes must not read as a larger 0
					}
				case 3:
					x[rng.IntN(n)] = float32(math.NaN())
				}
				want, got := maxGo(x), k.max(x)
				if math.Float32bits(got) != math.Float32bits(want) && !(got == 0 && want == 0) && !(got != got && want != want) {
					t.Fatalf("%s n=%d trial %d: max %v, want %v", k.name, n, trial, got, want)
				}
				a := rng.Float32() * 3
				w, g := append([]float32(nil), x...), append([]float32(nil), x...)
				scaleGo(w, a)
				k.scale(g, a)
				if i := sameBits(g, w); i >= 0 {
					t.Fatalf("%s n=%d: %v·%v = %v, want %v", k.name, n, x[i], a, g[i], w[i])
				}
			}
		}
	}
}

// TestAttentionSameOnEveryElemKernel: attention forward and backward, the cached attention and
// the LM-head kernels give the same bits whichever elementwise implementation runs.
func TestAttentionSameOnEveryElemKernel(t *testing.T) {
	const L, past, nRep, hd, vocab = 70, 5, 2, 16, 37
	rng := rand.New(rand.NewPCG(10, 10))
	ld := nRep * hd
	q, dout := randSlice(rng, L*ld, 2), randSlice(rng, L*ld, 1)
	k, v := randSlice(rng, (past+L)*hd, 2), randSlice(rng, (past+L)*hd, 1)
	logits := randSlice(rng, L*vocab, 8)
	targets := make([]int32, L)
	for i := range targets {
		targets[i] = int32(rng.IntN(vocab))
	}
	run := func() [][]float32 {
		out, lse := make([]float32, L*ld), make([]float32, L*nRep)
		AttentionForward(out, ld, lse, nRep, make([]float32, AttentionScratch(L, past, hd)), q, ld, k, v, hd, L, past, nRep, hd)
		dq, dk, dv := make([]float32, L*ld), make([]float32, (past+L)*hd), make([]float32, (past+L)*hd)
		AttentionBackward(dq, dk, dv, make([]float32, 2*AttentionScratch(L, past, hd)), dout, ld, out, lse, nRep, q, ld, k, v, hd, L, past, nRep, hd)
		cached := make([]float32, L*ld)
		AttentionCached(cached, ld, make([]float32, AttentionCachedScratch(L, past, nRep)), q, ld, keyBlocks(k, hd, past+L, hd), v, hd, L, past, nRep, hd)
		lp, ent, hlse := make([]float32, L), make([]float32, L), make([]float32, L)
		LogprobEntropyForward(lp, ent, hlse, logits, targets, L, vocab)
		dz := make([]float32, L*vocab)
		LogprobEntropyBackward(dz, logits, hlse, ent, targets, dout[:L], dout[L:2*L], L, vocab)
		return [][]float32{out, lse, dq, dk, dv, cached, lp, ent, hlse, dz}
	}
	withElem(t, &goElem)
	want := run()
	for _, ek := range availableElemKernels() {
		elemOverride = ek
		for i, got := range run() {
			if j := sameBits(got, want[i]); j >= 0 {
				t.Fatalf("%s: result %d differs at %d: %v, Go gives %v", ek.name, i, j, got[j], want[i][j])
			}
		}
	}
}

// TestSoftmaxGradMatchesGo: every implementation of softmaxGrad gives softmaxGradGo's bits, the
// probabilities and the score gradients, at every length around the block and alignment, with
// the special inputs mixed into the scores.
func TestSoftmaxGradMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	specials := specialInputs()
	for _, k := range availableElemKernels() {
		for n := 0; n <= 70; n++ {
			for off := 0; off < 3; off++ {
				p := make([]float32, n+off)[off:]
				for i := range p {
					p[i] = (rng.Float32()*2 - 1) * 30
					if rng.IntN(5) == 0 {
						p[i] = specials[rng.IntN(len(specials))]
					}
				}
				ds := randSlice(rng, n, 2)
				shift, d, scale := rng.Float32()*4-2, rng.Float32()-0.5, 0.25*rng.Float32()
				wp, wds := append([]float32(nil), p...), append([]float32(nil), ds...)
				softmaxGradGo(wp, wds, shift, d, scale)
				gp, gds := append(make([]float32, off), p...)[off:], append([]float32(nil), ds...)
				k.softmaxGrad(gp, gds, shift, d, scale)
				if i := sameBits(gp, wp); i >= 0 {
					t.Fatalf("%s n=%d: p[%d] from %v is %v, want %v", k.name, n, i, p[i], gp[i], wp[i])
				}
				if i := sameBits(gds, wds); i >= 0 {
					t.Fatalf("%s n=%d: ds[%d] from p %v, ds %v is %v, want %v", k.name, n, i, p[i], ds[i], gds[i], wds[i])
				}
			}
		}
	}
}

// TestExpMomentsMatchesGo: every implementation of expMoments gives expMomentsGo's two float64
// sums bit for bit, at every length around the block and alignment, special inputs included.
func TestExpMomentsMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 14))
	specials := specialInputs()
	for _, k := range availableElemKernels() {
		for n := 0; n <= 70; n++ {
			for off := 0; off < 3; off++ {
				x := make([]float32, n+off)[off:]
				for i := range x {
					x[i] = (rng.Float32()*2 - 1) * 20
					if rng.IntN(6) == 0 {
						x[i] = specials[rng.IntN(len(specials))]
					}
				}
				shift := rng.Float32()*10 - 5
				ws, wsz := expMomentsGo(x, shift)
				gs, gsz := k.expMoments(x, shift)
				same := func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) || a != a && b != b }
				if !same(gs, ws) || !same(gsz, wsz) {
					t.Fatalf("%s n=%d off=%d: sums %v %v, want %v %v", k.name, n, off, gs, gsz, ws, wsz)
				}
			}
		}
	}
}
