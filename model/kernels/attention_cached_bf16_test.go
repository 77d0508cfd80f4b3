package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAttentionCachedBF16: with keys and values in bfloat16, a row's output is bit for bit the
// same whether the queries arrive all at once, one at a time or in uneven chunks, for every
// kernel, over several attention blocks and head widths that take every path of the values
// (full panels, the narrow family, the Go columns); it matches the textbook definition over the
// rounded keys and values, and the AVX-512 and AVX2 kernels agree bit for bit.
func TestAttentionCachedBF16(t *testing.T) {
	results := map[string][][]float32{}
	for _, kern := range availableKernels() {
		for _, tc := range []struct{ T, nRep, hd int }{{40, 2, 8}, {300, 1, 16}, {150, 2, 32}, {90, 3, 40}, {70, 1, 64}} {
			withKernel(t, kern, 2)
			rng := rand.New(rand.NewPCG(11, uint64(tc.T)))
			ldq, ldo, ldkv := tc.nRep*tc.hd+3, tc.nRep*tc.hd+2, tc.hd+1
			q := randSlice(rng, tc.T*ldq, 1)
			k := randSlice(rng, tc.T*ldkv, 1)
			v := randSlice(rng, tc.T*ldkv, 1)
			kb := make([]uint16, KeyBlocksLen(tc.T, tc.hd))
			for i := range kb {
				kb[i] = 0x7fc0 // NaN: a key the kernels must never read into a visible score
			}
			v16 := make([]uint16, tc.T*ldkv)
			for j := 0; j < tc.T; j++ {
				StoreKeyBF16(kb, j, k[j*ldkv:j*ldkv+tc.hd])
				ToBF16(v16[j*ldkv:j*ldkv+tc.hd], v[j*ldkv:j*ldkv+tc.hd])
			}
			run := func(cuts []int) []float32 {
				out := make([]float32, tc.T*ldo)
				for past, c := 0, 0; past < tc.T; c++ {
					L := min(cuts[c%len(cuts)], tc.T-past)
					scratch := make([]float32, AttentionCachedScratch(L, past, tc.nRep))
					AttentionCachedBF16(out[past*ldo:], ldo, scratch, q[past*ldq:], ldq, kb, v16, ldkv, L, past, tc.nRep, tc.hd)
					past += L
				}
				return out
			}
			whole := run([]int{tc.T})
			results[kern.name] = append(results[kern.name], whole)
			RoundBF16(k)
			RoundBF16(v)
			want := naiveAttention(q, ldq, k, v, ldkv, tc.T, 0, tc.nRep, tc.hd)
			for i := 0; i < tc.T; i++ {
				for x := 0; x < tc.nRep*tc.hd; x++ {
					if g, w := whole[i*ldo+x], want[i*tc.nRep*tc.hd+x]; math.Abs(float64(g)-w) > 1e-5 {
						t.Fatalf("%s %+v: out[%d][%d] = %v, want %v", kern.name, tc, i, x, g, w)
					}
				}
			}
			for _, cuts := range [][]int{{1}, {3, 70, 1, 200}, {17}} {
				got := run(cuts)
				for i := 0; i < tc.T; i++ {
					for x := 0; x < tc.nRep*tc.hd; x++ {
						if g, w := got[i*ldo+x], whole[i*ldo+x]; math.Float32bits(g) != math.Float32bits(w) {
							t.Fatalf("%s %+v cut %v: out[%d][%d] = %v, one call gives %v", kern.name, tc, cuts, i, x, g, w)
						}
					}
				}
			}
		}
	}
	x, y := results["avx512_12x32"], results["avx2_6x16"]
	for c := range x {
		if y == nil {
			break
		}
		for i := range x[c] {
			if math.Float32bits(x[c][i]) != math.Float32bits(y[c][i]) && !(math.IsNaN(float64(x[c][i])) && math.IsNaN(float64(y[c][i]))) {
				t.Fatalf("case %d element %d: AVX-512 %g, AVX2 %g", c, i, x[c][i], y[c][i])
			}
		}
	}
}
