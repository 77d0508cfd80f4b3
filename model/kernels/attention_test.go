package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// naiveAttention is the textbook definition, one query and one head at a time, in float64.
func naiveAttention(q []float32, ldq int, k, v []float32, ldkv, L, past, nRep, hd int) []float64 {
	out := make([]float64, L*nRep*hd)
	for r := 0; r < nRep; r++ {
		for i := 0; i < L; i++ {
			nk := past + i + 1
			s := make([]float64, nk)
			m := math.Inf(-1)
			for j := 0; j < nk; j++ {
				for d := 0; d < hd; d++ {
					s[j] += float64(q[i*ldq+r*hd+d]) * float64(k[j*ldkv+d])
				}
				s[j] /= math.Sqrt(float64(hd))
				m = math.Max(m, s[j])
			}
			var z float64
			for j := range s {
				s[j] = math.Exp(s[j] - m)
				z += s[j]
			}
			for j := range s {
				for d := 0; d < hd; d++ {
					out[i*nRep*hd+r*hd+d] += s[j] / z * float64(v[j*ldkv+d])
				}
			}
		}
	}
	return out
}

func TestAttentionForwardMatchesNaive(t *testing.T) {
	for _, tc := range []struct{ L, past, nRep, hd int }{
		{1, 0, 1, 4}, {5, 0, 2, 4}, {1, 9, 3, 8}, {70, 0, 1, 4}, {66, 5, 2, 6}, {130, 0, 1, 2},
	} {
		rng := rand.New(rand.NewPCG(7, uint64(tc.L)))
		ldq := tc.nRep*tc.hd + 3
		ldkv := tc.hd + 1
		nk := tc.past + tc.L
		q := randSlice(rng, tc.L*ldq, 1)
		k := randSlice(rng, nk*ldkv, 1)
		v := randSlice(rng, nk*ldkv, 1)
		ldo := tc.nRep * tc.hd
		out := make([]float32, tc.L*ldo)
		lse := make([]float32, tc.L*tc.nRep)
		scratch := make([]float32, AttentionScratch(tc.L, tc.past, tc.hd))
		AttentionForward(out, ldo, lse, tc.nRep, scratch, q, ldq, k, v, ldkv, tc.L, tc.past, tc.nRep, tc.hd)
		want := naiveAttention(q, ldq, k, v, ldkv, tc.L, tc.past, tc.nRep, tc.hd)
		noLSE := make([]float32, len(out))
		AttentionForward(noLSE, ldo, nil, 0, scratch, q, ldq, k, v, ldkv, tc.L, tc.past, tc.nRep, tc.hd)
		for i := range want {
			if math.Abs(float64(out[i])-want[i]) > 1e-5 {
				t.Fatalf("%+v: out[%d] = %v, want %v", tc, i, out[i], want[i])
			}
			if noLSE[i] != out[i] {
				t.Fatalf("%+v: forward without lse differs at %d", tc, i)
			}
		}
	}
}

func TestAttentionGrad(t *testing.T) {
	for _, tc := range []struct{ L, past, nRep, hd int }{{4, 0, 1, 4}, {3, 2, 2, 4}, {67, 0, 1, 2}} {
		rng := rand.New(rand.NewPCG(8, uint64(tc.L)))
		ldq := tc.nRep * tc.hd
		ldkv := tc.hd
		nk := tc.past + tc.L
		q := randSlice(rng, tc.L*ldq, 1.5)
		k := randSlice(rng, nk*ldkv, 1.5)
		v := randSlice(rng, nk*ldkv, 1)
		dout := randSlice(rng, tc.L*ldq, 1)
		out := make([]float32, tc.L*ldq)
		lse := make([]float32, tc.L*tc.nRep)
		scratch := make([]float32, 2*AttentionScratch(tc.L, tc.past, tc.hd))
		loss := func() float64 {
			AttentionForward(out, ldq, lse, tc.nRep, scratch, q, ldq, k, v, ldkv, tc.L, tc.past, tc.nRep, tc.hd)
			return dotLoss(dout, out)
		}
		loss()
		dq := make([]float32, len(q))
		dk := make([]float32, len(k))
		dv := make([]float32, len(v))
		AttentionBackward(dq, dk, dv, scratch, dout, ldq, out, lse, tc.nRep, q, ldq, k, v, ldkv, tc.L, tc.past, tc.nRep, tc.hd)
		checkGrad(t, "attention dq", q, dq, loss)
		checkGrad(t, "attention dk", k, dk, loss)
		checkGrad(t, "attention dv", v, dv, loss)
	}
}
