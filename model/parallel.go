package model

import (
	"sync/atomic"

	"github.com/agentrl/agentrl/model/kernels"
)

// workers runs independent tasks on up to n goroutines, the caller being one of them, through
// kernels.FanOut: its helpers stay between parallel regions, since on the shared VM waking an
// idle thread for every region cost ~20 µs, against regions of tens of microseconds in a decode
// step. Every task writes a disjoint part of the output and per-worker scratch carries nothing
// between tasks, so results do not depend on n or on which goroutine ran which task.
type workers struct{ n int }

// run calls fn(worker, task) for every task in [0, tasks); worker is in [0, n) and identifies
// the scratch the call may use: no two calls with the same worker run at once.
func (w workers) run(tasks int, fn func(worker, task int)) {
	nw := min(w.n, tasks)
	if nw <= 1 {
		for t := 0; t < tasks; t++ {
			fn(0, t)
		}
		return
	}
	var next atomic.Int64
	kernels.FanOut(nw, func(worker int) {
		for {
			t := int(next.Add(1) - 1)
			if t >= tasks {
				return
			}
			fn(worker, t)
		}
	})
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
