package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// naiveWindowAttention is naiveAttention where query i sees only keys past+i-window+1 … past+i.
func naiveWindowAttention(q []float32, ldq int, k, v []float32, ldkv, L, past, nRep, hd, window int) []float64 {
	out := make([]float64, L*nRep*hd)
	for r := 0; r < nRep; r++ {
		for i := 0; i < L; i++ {
			nk := past + i + 1
			lo := max(0, nk-window)
			s := make([]float64, nk)
			m := math.Inf(-1)
			for j := lo; j < nk; j++ {
				for d := 0; d < hd; d++ {
					s[j] += float64(q[i*ldq+r*hd+d]) * float64(k[j*ldkv+d])
				}
				s[j] /= math.Sqrt(float64(hd))
				m = math.Max(m, s[j])
			}
			var z float64
			for j := lo; j < nk; j++ {
				s[j] = math.Exp(s[j] - m)
				z += s[j]
			}
			for j := lo; j < nk; j++ {
				for d := 0; d < hd; d++ {
					out[i*nRep*hd+r*hd+d] += s[j] / z * float64(v[j*ldkv+d])
				}
			}
		}
	}
	return out
}

// windowCases cover the Go path (head widths 4, 6) and the fused one (16, 32 where the
// assembly kernels run), windows shorter than, equal to and longer than the sequence.
var windowCases = []struct{ L, past, nRep, hd, window int }{
	{9, 0, 1, 4, 3}, {70, 0, 2, 6, 17}, {12, 5, 2, 16, 4}, {40, 0, 1, 16, 1}, {33, 0, 3, 32, 8}, {6, 0, 1, 16, 6}, {5, 2, 2, 4, 100},
}

func TestAttentionWindowMatchesNaive(t *testing.T) {
	for _, tc := range windowCases {
		rng := rand.New(rand.NewPCG(17, uint64(tc.L*100+tc.window)))
		ldq, ldkv, nk := tc.nRep*tc.hd+3, tc.hd+1, tc.past+tc.L
		q := randSlice(rng, tc.L*ldq, 1)
		k := randSlice(rng, nk*ldkv, 1)
		v := randSlice(rng, nk*ldkv, 1)
		ldo := tc.nRep * tc.hd
		out := make([]float32, tc.L*ldo)
		lse := make([]float32, tc.L*tc.nRep)
		scratch := make([]float32, AttentionScratch(tc.L, tc.past, tc.hd))
		AttentionForwardWindow(out, ldo, lse, tc.nRep, scratch, q, ldq, k, v, ldkv, tc.L, tc.past, tc.nRep, tc.hd, tc.window)
		want := naiveWindowAttention(q, ldq, k, v, ldkv, tc.L, tc.past, tc.nRep, tc.hd, tc.window)
		for i := range want {
			if math.Abs(float64(out[i])-want[i]) > 1e-5 {
				t.Fatalf("%+v: out[%d] = %v, want %v", tc, i, out[i], want[i])
			}
		}
		// The cached kernels, f32 and bf16, over the same keys: every row at once, then one at a
		// time, bit for bit alike.
		kb := make([]float32, KeyBlocksLen(nk, tc.hd))
		kb16 := make([]uint16, len(kb))
		vv := make([]float32, nk*tc.hd)
		vv16 := make([]uint16, len(vv))
		for j := 0; j < nk; j++ {
			StoreKey(kb, j, k[j*ldkv:j*ldkv+tc.hd])
			StoreKeyBF16(kb16, j, k[j*ldkv:j*ldkv+tc.hd])
			copy(vv[j*tc.hd:], v[j*ldkv:j*ldkv+tc.hd])
		}
		ToBF16(vv16, vv)
		cs := make([]float32, AttentionCachedScratch(tc.L, tc.past, tc.nRep)+AttentionCachedScratch(1, nk, tc.nRep))
		all, one := make([]float32, len(out)), make([]float32, len(out))
		all16, one16 := make([]float32, len(out)), make([]float32, len(out))
		AttentionCachedWindow(all, ldo, cs, q, ldq, kb, vv, tc.hd, tc.L, tc.past, tc.nRep, tc.hd, tc.window)
		AttentionCachedBF16Window(all16, ldo, cs, q, ldq, kb16, vv16, tc.hd, tc.L, tc.past, tc.nRep, tc.hd, tc.window)
		for i := 0; i < tc.L; i++ {
			qi := make([]float32, ldo) // a decode step's heads are headDim apart
			for r := 0; r < tc.nRep; r++ {
				copy(qi[r*tc.hd:(r+1)*tc.hd], q[i*ldq+r*tc.hd:])
			}
			AttentionCachedWindow(one[i*ldo:], ldo, cs, qi, ldo, kb, vv, tc.hd, 1, tc.past+i, tc.nRep, tc.hd, tc.window)
			AttentionCachedBF16Window(one16[i*ldo:], ldo, cs, qi, ldo, kb16, vv16, tc.hd, 1, tc.past+i, tc.nRep, tc.hd, tc.window)
		}
		for i := range want {
			if math.Abs(float64(all[i])-want[i]) > 1e-5 {
				t.Fatalf("%+v: cached out[%d] = %v, want %v", tc, i, all[i], want[i])
			}
			if all[i] != one[i] || all16[i] != one16[i] {
				t.Fatalf("%+v: cached row by row differs at %d: %v %v (bf16 %v %v)", tc, i, all[i], one[i], all16[i], one16[i])
			}
			if math.Abs(float64(all16[i])-want[i]) > 0.05 {
				t.Fatalf("%+v: bf16 cached out[%d] = %v, want %v", tc, i, all16[i], want[i])
			}
		}
	}
}

func TestAttentionWindowGrad(t *testing.T) {
	for _, tc := range []struct{ L, past, nRep, hd, window int }{{6, 0, 1, 4, 2}, {5, 2, 2, 4, 3}, {20, 0, 2, 16, 5}, {67, 0, 1, 2, 9}} {
		rng := rand.New(rand.NewPCG(18, uint64(tc.L)))
		ldq, ldkv, nk := tc.nRep*tc.hd, tc.hd, tc.past+tc.L
		q := randSlice(rng, tc.L*ldq, 1.5)
		k := randSlice(rng, nk*ldkv, 1.5)
		v := randSlice(rng, nk*ldkv, 1)
		dout := randSlice(rng, tc.L*ldq, 1)
		out := make([]float32, tc.L*ldq)
		lse := make([]float32, tc.L*tc.nRep)
		scratch := make([]float32, 2*AttentionScratch(tc.L, tc.past, tc.hd))
		loss := func() float64 {
			AttentionForwardWindow(out, ldq, lse, tc.nRep, scratch, q, ldq, k, v, ldkv, tc.L, tc.past, tc.nRep, tc.hd, tc.window)
			return dotLoss(dout, out)
		}
		loss()
		dq, dk, dv := make([]float32, len(q)), make([]float32, len(k)), make([]float32, len(v))
		AttentionBackwardWindow(dq, dk, dv, scratch, dout, ldq, out, lse, tc.nRep, q, ldq, k, v, ldkv, tc.L, tc.past, tc.nRep, tc.hd, tc.window)
		checkGrad(t, "window attention dq", q, dq, loss)
		checkGrad(t, "window attention dk", k, dk, loss)
		checkGrad(t, "window attention dv", v, dv, loss)
	}
}

func TestRopeTableFreqsMatchesRopeTable(t *testing.T) {
	const maxSeq, hd, theta = 50, 12, 10000
	c1, s1 := make([]float32, maxSeq*hd/2), make([]float32, maxSeq*hd/2)
	c2, s2 := make([]float32, maxSeq*hd/2), make([]float32, maxSeq*hd/2)
	RopeTable(c1, s1, maxSeq, hd, theta)
	f := make([]float64, hd/2)
	for i := range f {
		f[i] = math.Pow(theta, -float64(2*i)/hd)
	}
	RopeTableFreqs(c2, s2, maxSeq, f)
	for i := range c1 {
		if c1[i] != c2[i] || s1[i] != s2[i] {
			t.Fatalf("entry %d: %v,%v vs %v,%v", i, c1[i], s1[i], c2[i], s2[i])
		}
	}
}
