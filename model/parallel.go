package model

import (
	"sync"
	"sync/atomic"
)

// workers runs independent tasks on up to n goroutines, the caller being one of them. Goroutines
// are started per parallel region and waited for before it returns, so none outlives a call
// and the model needs no Close. A start costs about 1 µs: a training step has ~10 regions per
// layer against hundreds of milliseconds of work, and a batch-1 decode Step spawns one goroutine
// per layer (row-wise kernels stay serial below 2·16 rows) against milliseconds, so a persistent
// pool would save well under 0.1%. Every task writes a disjoint part of the output and
// per-worker scratch carries nothing between tasks, so results do not depend on n or on which
// goroutine ran which task.
type workers struct{ n int }

// run calls fn(worker, task) for every task in [0, tasks); worker is in [0, n) and identifies
// the scratch the call may use.
func (w workers) run(tasks int, fn func(worker, task int)) {
	nw := min(w.n, tasks)
	if nw <= 1 {
		for t := 0; t < tasks; t++ {
			fn(0, t)
		}
		return
	}
	var next atomic.Int64
	body := func(worker int) {
		for {
			t := int(next.Add(1) - 1)
			if t >= tasks {
				return
			}
			fn(worker, t)
		}
	}
	var wg sync.WaitGroup
	for i := 1; i < nw; i++ {
		wg.Go(func() { body(i) })
	}
	body(0)
	wg.Wait()
}

// rows splits [0, n) into chunks of at least minRows rows and calls fn(lo, hi) on each in
// parallel; for elementwise and row-wise kernels.
func (w workers) rows(n, minRows int, fn func(lo, hi int)) {
	chunks := min(w.n*4, n/max(minRows, 1))
	if chunks <= 1 || w.n <= 1 {
		fn(0, n)
		return
	}
	w.run(chunks, func(_, c int) { fn(n*c/chunks, n*(c+1)/chunks) })
}
