package kernels

import (
	"runtime"
	"slices"
	"time"
)

// ReadBandwidth measures the physical limit of a batch-1 decode step: the bytes per second at
// which this machine reads a buffer of the given size, with the fastest read kernel this CPU
// runs (eight streams, eight independent vector adds from memory per 512 bytes; readGo without
// the assembly). A batch-1 step reads every weight once, so weights×tokens/s over this rate, for
// a buffer of the weights' size, is the fraction of the limit that decoding reaches. Whole
// passes over the buffer are timed for at least minTime (and at least six of each kind), in
// turns of three split among the goroutines that run the kernels (FanOut, up to GOMAXPROCS)
// and three on one, each turn after an untimed pass; the result is the faster kind's median.
// Both kinds count because the decode path takes whichever is faster at the time (gemvTune):
// on a quiet machine every core adds its share of the bandwidth, while on one where other
// processes keep the cores busy one goroutine reads faster than several.
func ReadBandwidth(bytes int, minTime time.Duration) float64 {
	n := max(roundUp(bytes/4, 128), 128)
	buf := getBuf(n)
	defer putBuf(buf)
	x := *buf
	for i := range x {
		x[i] = 1
	}
	read := activeElem().read
	nw := maxWorkers()
	sums := make([]float32, 2*nw)
	pass := func(parts int) {
		fanOut(parts, func(p int) {
			lo, hi := p*(n/128)/parts*128, (p+1)*(n/128)/parts*128
			if p == parts-1 {
				hi = n
			}
			sums[p] = read(x[lo:hi])
		})
	}
	kinds := []int{1}
	if split := min(n/128, 2*nw); split > 1 {
		kinds = append(kinds, split)
	}
	rates := make([][]float64, len(kinds))
	start := time.Now()
	for iter := 0; (len(rates[0]) < 6 || time.Since(start) < minTime) && iter < 100000; iter++ {
		for i, parts := range kinds {
			// An untimed pass first: it wakes the helpers that slept through the other kind's
			// passes, and brings back into the caches what those passes evicted.
			pass(parts)
			for range 3 {
				t0 := time.Now()
				pass(parts)
				if d := time.Since(t0).Seconds(); d > 0 {
					rates[i] = append(rates[i], float64(4*n)/d)
				}
			}
		}
	}
	runtime.KeepAlive(sums)
	best := 0.0
	for _, r := range rates {
		if len(r) > 0 {
			slices.Sort(r)
			best = max(best, r[len(r)/2])
		}
	}
	return best
}

// readGo is the portable read kernel: eight independent sums, so the loads are not serialized
// behind one chain of adds.
func readGo(x []float32) float32 {
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	for len(x) >= 8 {
		s0 += x[0]
		s1 += x[1]
		s2 += x[2]
		s3 += x[3]
		s4 += x[4]
		s5 += x[5]
		s6 += x[6]
		s7 += x[7]
		x = x[8:]
	}
	for _, v := range x {
		s0 += v
	}
	return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
}
