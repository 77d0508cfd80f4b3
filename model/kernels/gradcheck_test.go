package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// randSlice returns n values uniform in [-scale, scale) from a seeded generator.
func randSlice(rng *rand.Rand, n int, scale float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = (rng.Float32()*2 - 1) * scale
	}
	return x
}

// dotLoss is the scalar Σ w·y in float64 that every gradient check differentiates: its gradient
// with respect to y is w, so dout = w.
func dotLoss(w, y []float32) float64 {
	var s float64
	for i := range w {
		s += float64(w[i]) * float64(y[i])
	}
	return s
}

// checkGrad compares analytic[i] with the central difference of loss over x[i] for every i.
// loss must recompute the forward pass from the current x. float32 forward passes limit the
// accuracy of the difference, so the step is 1e-2 and the tolerance 2e-3 + 1e-2·|g|; a wrong
// term in any backward formula is off by far more.
func checkGrad(t *testing.T, name string, x, analytic []float32, loss func() float64) {
	t.Helper()
	const eps = 1e-2
	bad := 0
	for i := range x {
		orig := x[i]
		x[i] = orig + eps
		lp := loss()
		x[i] = orig - eps
		lm := loss()
		x[i] = orig
		num := (lp - lm) / (2 * eps)
		a := float64(analytic[i])
		if math.Abs(a-num) > 2e-3+1e-2*math.Abs(num) {
			if bad < 5 {
				t.Errorf("%s[%d]: analytic %.6g, numeric %.6g", name, i, a, num)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d gradients disagree", name, bad, len(x))
	}
}

func TestRMSNormGrad(t *testing.T) {
	for _, tc := range []struct{ n, c int }{{1, 4}, {3, 8}, {2, 33}} {
		rng := rand.New(rand.NewPCG(1, uint64(tc.c)))
		x := randSlice(rng, tc.n*tc.c, 2)
		w := randSlice(rng, tc.c, 1.5)
		dout := randSlice(rng, tc.n*tc.c, 1)
		out := make([]float32, tc.n*tc.c)
		rstd := make([]float32, tc.n)
		loss := func() float64 {
			RMSNormForward(out, rstd, x, w, tc.n, tc.c, 1e-5)
			return dotLoss(dout, out)
		}
		loss()
		dx := make([]float32, len(x))
		dw := make([]float32, len(w))
		RMSNormBackward(dx, dw, dout, x, w, rstd, tc.n, tc.c)
		checkGrad(t, "rmsnorm dx", x, dx, loss)
		checkGrad(t, "rmsnorm dw", w, dw, loss)
	}
}

func TestSwiGLUGrad(t *testing.T) {
	for _, tc := range []struct{ n, h int }{{1, 3}, {4, 7}} {
		rng := rand.New(rand.NewPCG(2, uint64(tc.h)))
		gu := randSlice(rng, tc.n*2*tc.h, 3)
		dout := randSlice(rng, tc.n*tc.h, 1)
		out := make([]float32, tc.n*tc.h)
		loss := func() float64 { SwiGLUForward(out, gu, tc.n, tc.h); return dotLoss(dout, out) }
		dgu := make([]float32, len(gu))
		SwiGLUBackward(dgu, dout, gu, tc.n, tc.h)
		checkGrad(t, "swiglu", gu, dgu, loss)
	}
}

func TestEmbeddingGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	const vocab, c, n = 5, 4, 6
	wte := randSlice(rng, vocab*c, 1)
	tokens := []int32{1, 4, 1, 0, 1, 3} // repeats must sum
	dout := randSlice(rng, n*c, 1)
	out := make([]float32, n*c)
	loss := func() float64 { EmbeddingForward(out, tokens, wte, n, c); return dotLoss(dout, out) }
	dwte := make([]float32, len(wte))
	EmbeddingBackward(dwte, dout, tokens, n, c)
	checkGrad(t, "embedding", wte, dwte, loss)
	for j := 0; j < c; j++ { // token 2 never appears
		if dwte[2*c+j] != 0 {
			t.Fatalf("unused token row got gradient %v", dwte[2*c+j])
		}
	}
}

func TestRopeGrad(t *testing.T) {
	const maxSeq, headDim, nHead, n = 16, 8, 3, 4
	rng := rand.New(rand.NewPCG(4, 4))
	cos := make([]float32, maxSeq*headDim/2)
	sin := make([]float32, maxSeq*headDim/2)
	RopeTable(cos, sin, maxSeq, headDim, 10000)
	ld := nHead*headDim + 5 // a stride wider than the heads, as in the fused qkv buffer
	x := randSlice(rng, n*ld, 1)
	pos := []int32{0, 7, 3, 15}
	dout := randSlice(rng, n*ld, 1)
	for r := 0; r < n; r++ { // the padding columns are not RoPE's
		clear(dout[r*ld+nHead*headDim : (r+1)*ld])
	}
	y := make([]float32, len(x))
	loss := func() float64 {
		copy(y, x)
		RopeForward(y, ld, pos, cos, sin, n, nHead, headDim)
		return dotLoss(dout, y)
	}
	dx := append([]float32(nil), dout...)
	RopeBackward(dx, ld, pos, cos, sin, n, nHead, headDim)
	checkGrad(t, "rope", x, dx, loss)
}

// TestRopeRelative checks the property RoPE exists for: the dot product of a rotated query and
// key depends only on the distance between their positions.
func TestRopeRelative(t *testing.T) {
	const maxSeq, headDim = 64, 16
	cos := make([]float32, maxSeq*headDim/2)
	sin := make([]float32, maxSeq*headDim/2)
	RopeTable(cos, sin, maxSeq, headDim, 10000)
	rng := rand.New(rand.NewPCG(5, 5))
	q0 := randSlice(rng, headDim, 1)
	k0 := randSlice(rng, headDim, 1)
	dot := func(pq, pk int32) float64 {
		q := append([]float32(nil), q0...)
		k := append([]float32(nil), k0...)
		RopeForward(q, headDim, []int32{pq}, cos, sin, 1, 1, headDim)
		RopeForward(k, headDim, []int32{pk}, cos, sin, 1, 1, headDim)
		return dotLoss(q, k)
	}
	for _, tc := range []struct{ a, b, c, d int32 }{{5, 2, 40, 37}, {0, 0, 63, 63}, {10, 30, 20, 40}} {
		if x, y := dot(tc.a, tc.b), dot(tc.c, tc.d); math.Abs(x-y) > 1e-4 {
			t.Errorf("q@%d·k@%d = %v but q@%d·k@%d = %v", tc.a, tc.b, x, tc.c, tc.d, y)
		}
	}
	if dot(0, 0) != dotLoss(q0, k0) {
		t.Error("position 0 must not rotate")
	}
}

func TestLogprobEntropyGrad(t *testing.T) {
	const n, vocab = 3, 7
	rng := rand.New(rand.NewPCG(6, 6))
	z := randSlice(rng, n*vocab, 3)
	targets := []int32{0, 6, 3}
	dlp := randSlice(rng, n, 1)
	dh := randSlice(rng, n, 1)
	lp := make([]float32, n)
	h := make([]float32, n)
	lse := make([]float32, n)
	loss := func() float64 {
		LogprobEntropyForward(lp, h, lse, z, targets, n, vocab)
		return dotLoss(dlp, lp) + dotLoss(dh, h)
	}
	loss()
	// Against a direct float64 evaluation of the definitions.
	for i := 0; i < n; i++ {
		var s float64
		for j := 0; j < vocab; j++ {
			s += math.Exp(float64(z[i*vocab+j]))
		}
		var ent float64
		for j := 0; j < vocab; j++ {
			p := math.Exp(float64(z[i*vocab+j])) / s
			ent -= p * math.Log(p)
		}
		want := float64(z[i*vocab+int(targets[i])]) - math.Log(s)
		if math.Abs(float64(lp[i])-want) > 1e-5 || math.Abs(float64(h[i])-ent) > 1e-5 {
			t.Errorf("row %d: logprob %v entropy %v, want %v %v", i, lp[i], h[i], want, ent)
		}
	}
	dz := make([]float32, len(z))
	LogprobEntropyBackward(dz, z, lse, h, targets, dlp, dh, n, vocab)
	checkGrad(t, "logprob+entropy", z, dz, loss)
	// In place gives the same result (forward again: the check left lse for a perturbed z).
	loss()
	LogprobEntropyBackward(dz, z, lse, h, targets, dlp, dh, n, vocab)
	in := append([]float32(nil), z...)
	LogprobEntropyBackward(in, in, lse, h, targets, dlp, dh, n, vocab)
	for i := range in {
		if in[i] != dz[i] {
			t.Fatalf("in-place backward differs at %d: %v vs %v", i, in[i], dz[i])
		}
	}
}

func TestExpf(t *testing.T) {
	worst := 0.0
	for x := -87.0; x < 88.0; x += 0.0137 {
		got := float64(expf(float32(x)))
		want := math.Exp(float64(float32(x)))
		if rel := math.Abs(got-want) / want; rel > worst {
			worst = rel
		}
	}
	if worst > 3e-7 {
		t.Fatalf("expf worst relative error %g", worst)
	}
	for _, tc := range []struct{ x, want float32 }{{0, 1}, {-100, 0}, {float32(math.Inf(-1)), 0}} {
		if got := expf(tc.x); got != tc.want {
			t.Errorf("expf(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
	if !math.IsInf(float64(expf(100)), 1) || !math.IsNaN(float64(expf(float32(math.NaN())))) {
		t.Error("expf must keep +Inf and NaN")
	}
}
