package envtest

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

func (s *suite) testParallel(t *testing.T) {
	ctx := context.Background()
	seeds := sampleSeeds(s.spec.Train, s.opts.Parallel)
	var wg sync.WaitGroup
	for g := range s.opts.Parallel {
		wg.Go(func() {
			e, err := s.spec.New()
			if err != nil {
				t.Errorf("goroutine %d: New: %v", g, err)
				return
			}
			defer closeEnv(t, e)
			for i := range 2 {
				seed := seeds[(g+i)%len(seeds)]
				ep, err := safePlay(ctx, e, s.spec.Expert(seed, NoisyNoise, expertRNG(seed)), seed, s.opts.MaxSteps)
				if err != nil {
					t.Errorf("goroutine %d seed %d: %v", g, seed, err)
					return
				}
				if !ep.Done {
					t.Errorf("goroutine %d seed %d: episode did not end", g, seed)
				}
			}
		})
	}
	wg.Wait()
}

// settledGoroutines waits for the goroutine count to stop falling to at most want (or, with want
// 0, to stop changing) and returns it. It sleeps in growing steps rather than failing on a clock:
// a busy machine only makes it wait longer.
func settledGoroutines(want int) int {
	n, prev := runtime.NumGoroutine(), -1
	for wait := time.Millisecond; wait < 4*time.Second; wait *= 2 {
		if (want > 0 && n <= want) || (want == 0 && n == prev) {
			return n
		}
		runtime.GC()
		time.Sleep(wait)
		prev, n = n, runtime.NumGoroutine()
	}
	return n
}

func checkLeaks(t *testing.T, baseline int) {
	if n := settledGoroutines(baseline); n > baseline {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("%d goroutines left after every instance was closed, %d before: leaked stacks follow\n%s", n, baseline, buf)
	}
}
