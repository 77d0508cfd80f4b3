package kernels

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestAttentionCachedSplitInvariant: a row's output must be bit for bit the same whether the
// sequence's queries arrive all at once, one at a time, or in uneven chunks, for every kernel,
// across several attention blocks and key chunks; and it must match the textbook definition.
func TestAttentionCachedSplitInvariant(t *testing.T) {
	for _, kern := range availableKernels() {
		for _, tc := range []struct{ T, nRep, hd int }{{40, 2, 8}, {300, 1, 16}, {600, 2, 32}} {
			withKernel(t, kern, 2)
			rng := rand.New(rand.NewPCG(11, uint64(tc.T)))
			ldq, ldo, ldkv := tc.nRep*tc.hd+3, tc.nRep*tc.hd+2, tc.hd+1
			q := randSlice(rng, tc.T*ldq, 1)
			k := randSlice(rng, tc.T*ldkv, 1)
			v := randSlice(rng, tc.T*ldkv, 1)
			kb := keyBlocks(k, ldkv, tc.T, tc.hd)
			// run computes every row's output with the sequence cut at the given lengths.
			run := func(cuts []int) []float32 {
				out := make([]float32, tc.T*ldo)
				for past, c := 0, 0; past < tc.T; c++ {
					L := min(cuts[c%len(cuts)], tc.T-past)
					scratch := make([]float32, AttentionCachedScratch(L, past, tc.nRep))
					AttentionCached(out[past*ldo:], ldo, scratch, q[past*ldq:], ldq, kb, v, ldkv, L, past, tc.nRep, tc.hd)
					past += L
				}
				return out
			}
			whole := run([]int{tc.T})
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
}

// keyBlocks returns the first hd columns of T keys (rows ld apart) in the key-block layout
// AttentionCached reads; the unused keys of the last block are NaN, which would spread into any
// output that read them.
func keyBlocks(k []float32, ld, T, hd int) []float32 {
	kb := make([]float32, KeyBlocksLen(T, hd))
	for i := range kb {
		kb[i] = float32(math.NaN())
	}
	for j := 0; j < T; j++ {
		StoreKey(kb, j, k[j*ld:j*ld+hd])
	}
	return kb
}

// BenchmarkAttentionCachedDecode is one decode step's attention for one key/value head of the
// default model (2 query heads of 32 over 192 cached keys): the keys and values from L2, and
// from a ring of 64 heads (3 MB) that does not stay there. It reports the cache bytes read per
// second and the nanoseconds of the thread's CPU time per call, which other processes on the
// machine disturb far less than wall time.
func BenchmarkAttentionCachedDecode(b *testing.B) {
	const nRep, hd, past = 2, 32, 191
	for _, heads := range []int{1, 64} {
		b.Run(map[int]string{1: "L2", 64: "ring"}[heads], func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 1))
			q := randSlice(rng, nRep*hd, 1)
			out := make([]float32, nRep*hd)
			scratch := make([]float32, AttentionCachedScratch(1, past, nRep))
			kbs, vs := make([][]float32, heads), make([][]float32, heads)
			for h := range heads {
				k := randSlice(rng, (past+1)*hd, 1)
				kbs[h], vs[h] = keyBlocks(k, hd, past+1, hd), randSlice(rng, (past+1)*hd, 1)
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ResetTimer()
			cpu := threadCPUSeconds()
			for i := range b.N {
				h := i % heads
				AttentionCached(out, hd, scratch, q, hd, kbs[h], vs[h], hd, 1, past, nRep, hd)
			}
			cpu = threadCPUSeconds() - cpu
			b.ReportMetric(float64(2*4*(past+1)*hd)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			if cpu > 0 {
				b.ReportMetric(cpu*1e9/float64(b.N), "cpu-ns/op")
			}
		})
	}
}
