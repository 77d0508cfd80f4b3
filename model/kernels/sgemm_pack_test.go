package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestPackStrips checks both packing layouts against their definitions, including the zero
// padding past w and the k steps left over after the four-wide assembly blocks.
func TestPackStrips(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, width := range []int{4, 6, 12, 16, 32} {
		for _, w := range []int{1, 3, 4, 5, width - 1, width} {
			for _, kb := range []int{1, 3, 4, 7, 16, 33} {
				if w < 1 || w > width {
					continue
				}
				t.Run(fmt.Sprintf("width%d_w%d_kb%d", width, w, kb), func(t *testing.T) {
					ld := max(w, kb) + 2
					src := make([]float32, ld*max(w, kb))
					for i := range src {
						src[i] = float32(rng.NormFloat64())
					}
					got := make([]float32, kb*width)
					for i := range got {
						got[i] = float32(math.NaN()) // every element must be written
					}
					transposeStrip(got, src, ld, kb, w, width)
					for p := 0; p < kb; p++ {
						for r := 0; r < width; r++ {
							want := float32(0)
							if r < w {
								want = src[r*ld+p]
							}
							if g := got[p*width+r]; g != want {
								t.Fatalf("transpose: dst[%d][%d] = %g, want %g", p, r, g, want)
							}
						}
					}
					copyStrip(got, src, ld, kb, w, width)
					for p := 0; p < kb; p++ {
						for c := 0; c < width; c++ {
							want := float32(0)
							if c < w {
								want = src[p*ld+c]
							}
							if g := got[p*width+c]; g != want {
								t.Fatalf("copy: dst[%d][%d] = %g, want %g", p, c, g, want)
							}
						}
					}
				})
			}
		}
	}
}
