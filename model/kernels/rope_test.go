package kernels

import (
	"math/rand/v2"
	"testing"
)

// TestRopeMatchesGo: every implementation of RoPE's rotation, forward and inverse, gives ropeGo's
// bits for heads of 2 to 66 floats (halves on either side of the 16-float block), several heads
// a row, rows farther apart than their heads, at random positions, and leaves the floats between
// rows as they were.
func TestRopeMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 14))
	const maxSeq = 50
	for _, k := range availableElemKernels() {
		for _, hd := range []int{2, 6, 16, 32, 34, 40, 64, 66} {
			cos, sin := make([]float32, maxSeq*hd/2), make([]float32, maxSeq*hd/2)
			RopeTable(cos, sin, maxSeq, hd, 10000)
			for nHead := 1; nHead <= 3; nHead++ {
				for n := 0; n <= 4; n++ {
					ld := nHead*hd + rng.IntN(5)
					pos := make([]int32, n)
					for i := range pos {
						pos[i] = int32(rng.IntN(maxSeq))
					}
					x := randSlice(rng, max(n*ld, 1), 3)
					for _, inverse := range []bool{false, true} {
						want, got := append([]float32(nil), x...), append([]float32(nil), x...)
						ropeGo(want, ld, pos, cos, sin, n, nHead, hd, inverse)
						k.rope(got, ld, pos, cos, sin, n, nHead, hd, inverse)
						if i := sameBits(got, want); i >= 0 {
							t.Fatalf("%s: %s hd=%d heads=%d n=%d ld=%d: x[%d] = %v, want %v",
								k.name, map[bool]string{false: "forward", true: "inverse"}[inverse], hd, nHead, n, ld, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}
