package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countParts runs fanOut(parts) and reports how many times each part ran.
func countParts(parts int) []int32 {
	counts := make([]int32, parts)
	fanOut(parts, func(p int) { atomic.AddInt32(&counts[p], 1) })
	return counts
}

func checkOnce(t *testing.T, what string, counts []int32) {
	t.Helper()
	for p, c := range counts {
		if c != 1 {
			t.Fatalf("%s: part %d ran %d times", what, p, c)
		}
	}
}

// TestFanOutRunsEveryPartOnce: every part runs exactly once whatever the number of parts and
// workers, including more parts than workers and back-to-back regions that reuse the helpers.
func TestFanOutRunsEveryPartOnce(t *testing.T) {
	for _, workers := range []int{1, 2, 3, 8} {
		old := workerOverride
		workerOverride = workers
		for parts := 0; parts <= 20; parts++ {
			for range 50 {
				checkOnce(t, "sequential", countParts(parts))
			}
		}
		workerOverride = old
	}
}

// TestFanOutConcurrentAndNested: regions started from many goroutines at once, and regions
// started inside a region's parts, each run every part once and all return (the helpers serve
// one region; the others start goroutines).
func TestFanOutConcurrentAndNested(t *testing.T) {
	var wg sync.WaitGroup
	var failed atomic.Bool
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				parts := 1 + (g+i)%6
				outer := make([]int32, parts)
				inner := make([]int32, parts*3)
				fanOut(parts, func(p int) {
					atomic.AddInt32(&outer[p], 1)
					fanOut(3, func(q int) { atomic.AddInt32(&inner[p*3+q], 1) })
				})
				for _, c := range append(outer, inner...) {
					if c != 1 {
						failed.Store(true)
					}
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() {
		t.Fatal("a part did not run exactly once")
	}
}

// TestFanOutHelpersExit: helpers do not outlive the work. After regions stop, the goroutine
// count returns to what it was before any helper started (waiting in growing steps, so a busy
// machine only makes the test slower).
func TestFanOutHelpersExit(t *testing.T) {
	old := workerOverride
	workerOverride = 4
	defer func() { workerOverride = old }()
	// settle waits for the count to fall to want, or with want 0 to hold still for longer than
	// helpers idle, and returns it.
	settle := func(want int) int {
		n, prev := runtime.NumGoroutine(), -1
		for wait := time.Millisecond; wait < 8*time.Second; wait *= 2 {
			if (want > 0 && n <= want) || (want == 0 && n == prev && wait > 2*helperIdle) {
				break
			}
			time.Sleep(wait)
			prev, n = n, runtime.NumGoroutine()
		}
		return n
	}
	before := settle(0)
	var started atomic.Bool
	for range 100 {
		fanOut(4, func(int) {
			if runtime.NumGoroutine() > before {
				started.Store(true)
			}
		})
	}
	if !started.Load() {
		t.Fatal("no helper goroutine ran a part")
	}
	if n := settle(before); n > before {
		t.Fatalf("%d goroutines after the regions ended, %d before", n, before)
	}
	// A helper that exited is started again by the next region.
	checkOnce(t, "after exit", countParts(4))
}
