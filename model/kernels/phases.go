package kernels

import (
	"slices"
	"sync/atomic"
	"time"
)

// Phases runs a parallel region of several phases in order, on the calling goroutine and up to
// nw-1 of the pool's helpers: phase i is cut into parts[i] parts, f(worker, i, part) is called
// once for each, and no part of phase i+1 starts before every part of phase i has finished.
// worker, in [0, nw), names the goroutine that makes the call: no two calls with the same worker
// run at once, so it may index per-goroutine scratch. Which goroutine runs which part is not
// fixed, so f must depend only on the phase and the part.
//
// It is fanOut for a chain of dependent steps, such as the products, attention and norms of a
// decode step: a goroutine that finishes its share of a phase waits (spinning) only until the
// phase is complete, then takes parts of the next, so a chain of n phases costs n waits on a
// cache line instead of n regions. Each worker takes first the parts of a contiguous range of
// its own and then the others' (claim), except that a phase of one part is the caller's (worker
// 0): the caller never waits on a helper for work it could do itself, and a helper descheduled
// by the operating system while it held such a part would have held up the whole chain. A
// helper that has waited helperSpin for a phase leaves the region, as it would leave between
// regions, and the caller calls helpers back at the next phase of more than one part: a chain
// of long one-part phases does not keep a core spinning. The region ends when the caller
// has seen the last phase complete, not when every helper has left it: a helper that the
// operating system descheduled before claiming a part holds nothing up, and finds nothing left
// to claim when it runs again; Phases keeps its own copy of parts, so the caller may reuse the
// slice once it returns. With nw ≤ 1 the phases run one after another on the caller.
func Phases(nw int, parts []int, f func(worker, phase, part int)) {
	nw = min(nw, maxWorkers())
	if nw <= 1 {
		for i, n := range parts {
			for p := range n {
				f(0, i, p)
			}
		}
		return
	}
	// A copy of parts: a helper descheduled before the region's end may read them after Phases
	// returns, when the caller may be filling parts for its next region.
	ph := &phased{parts: slices.Clone(parts), f: f, state: make([]phaseState, len(parts)), seats: make([]atomic.Bool, nw),
		ranges: make([]atomic.Uint64, len(parts)*nw), wake: make(chan struct{}, 1)}
	for i, n := range parts {
		for w := range nw {
			ph.ranges[i*nw+w].Store(packRange(w*n/nw, (w+1)*n/nw))
		}
	}
	if !pool.mu.TryLock() {
		// Another region holds the helpers: start goroutines, as fanOut does.
		spawnFanOut(nw, func(p int) {
			if p == 0 {
				ph.lead()
			} else {
				ph.help(0)
			}
		})
		return
	}
	defer pool.mu.Unlock()
	ph.call = func() {
		from := int(ph.at.Load())
		r := &region{parts: int64(nw - 1)}
		r.f = func(int) {
			if !ph.help(from) {
				r.left.Store(true)
			}
		}
		startRegion(r, nw)
	}
	ph.call()
	ph.lead()
}

// phased is one Phases region.
type phased struct {
	parts []int
	f     func(worker, phase, part int)
	state []phaseState
	seats []atomic.Bool // worker numbers held by helpers; 0 is the caller's
	// ranges are the parts of each phase not yet claimed, a range a worker (claim)
	ranges []atomic.Uint64
	at     atomic.Int32  // the phase the caller is in
	left   atomic.Int32  // helpers that left the region before its end
	call   func()        // publishes the region to the pool's helpers again; nil outside the pool
	sleep  atomic.Int32  // 1 + the phase the caller sleeps on (0: none)
	wake   chan struct{} // buffered 1: the token of the goroutine that finished that phase
}

type phaseState struct {
	done atomic.Int64 // parts finished
}

// A phase's parts are dealt out in contiguous ranges, one a worker (ranges[i*nw+w] for phase i
// and worker w: the parts [front, back) not yet claimed, front in the low 32 bits). A worker
// claims from the front of its own range and, when that is empty, from the back of the others:
// each goroutine runs adjacent parts one after another (a product's parts are adjacent runs of
// its weights, so its stream goes on from one part to the next instead of starting again), and
// the parts of a goroutine that is late or never comes are still taken by the others.
func packRange(front, back int) uint64 { return uint64(uint32(front)) | uint64(back)<<32 }

func unpackRange(r uint64) (front, back int) { return int(uint32(r)), int(r >> 32) }

// claim takes a part of phase i for worker, or returns -1 once none is left.
func (ph *phased) claim(worker, i int) int {
	nw := len(ph.seats)
	rs := ph.ranges[i*nw : (i+1)*nw]
	for r := &rs[worker]; ; {
		v := r.Load()
		f, b := unpackRange(v)
		if f >= b {
			break
		}
		if r.CompareAndSwap(v, packRange(f+1, b)) {
			return f
		}
	}
	for k := 1; k < nw; k++ {
		for r := &rs[(worker+k)%nw]; ; {
			v := r.Load()
			f, b := unpackRange(v)
			if f >= b {
				break
			}
			if r.CompareAndSwap(v, packRange(f, b-1)) {
				return b - 1
			}
		}
	}
	return -1
}

// lead runs the chain as the caller, worker 0.
func (ph *phased) lead() {
	called := int32(0)
	for i, n := range ph.parts {
		ph.at.Store(int32(i))
		if n > 1 && ph.call != nil {
			if l := ph.left.Load(); l > called {
				called = l
				ph.call()
			}
		}
		ph.work(0, i)
		ph.leadWait(i)
	}
}

// leadWait returns once phase i is complete. The caller spins for helperSpin, then sleeps until
// the goroutine that finishes the phase wakes it: a helper still in the middle of its part
// after helperSpin is one the operating system has not been running, and where the process
// has fewer cores than goroutines (a shared machine) the caller's spinning would take the core
// from it.
func (ph *phased) leadWait(i int) {
	if ph.wait(i, helperSpin) {
		return
	}
	ph.sleep.Store(int32(i + 1))
	if ph.state[i].done.Load() >= int64(ph.parts[i]) && ph.sleep.CompareAndSwap(int32(i+1), 0) {
		return // finished between the spin and the store above
	}
	<-ph.wake
}

// help runs the chain from phase from on as a helper, under a free worker number, until the
// end (true) or until it has waited helperSpin for a phase (false), as long as a helper spins
// between regions, after which it parks at once. A batch-1 decode step's waits are a
// microsecond or two; a longer one is a stretch the caller runs alone (a one-part phase: the
// one-part products of a small model) or a part whose goroutine the operating system took off
// its core, and a spinning helper would hold a P, or a core, that others could use. Shorter
// waits cost more than they saved: leaving after 3 µs, a helper parked in every small product
// of `agentrl bench serve`'s 0.13 M model and came back a wake-up later, and on a quiet machine
// that in-process engine made 78–82 thousand tokens/s instead of 110–120; leaving while a
// shared phase's other parts ran left a batch-32 product's parts to the caller alone.
func (ph *phased) help(from int) bool {
	w := 1
	for ; w < len(ph.seats) && !ph.seats[w].CompareAndSwap(false, true); w++ {
	}
	if w == len(ph.seats) {
		return true // every number is taken: enough helpers are in the region
	}
	for i := from; i < len(ph.parts); i++ {
		if ph.parts[i] > 1 { // a phase of one part is the caller's
			ph.work(w, i)
		}
		if !ph.wait(i, helperSpin) {
			ph.seats[w].Store(false)
			ph.left.Add(1)
			return false
		}
	}
	ph.seats[w].Store(false)
	return true
}

// work claims and runs parts of phase i until none is left.
func (ph *phased) work(worker, i int) {
	st, n := &ph.state[i], int64(ph.parts[i])
	for {
		p := ph.claim(worker, i)
		if p < 0 {
			return
		}
		ph.f(worker, i, p)
		if st.done.Add(1) == n && ph.sleep.CompareAndSwap(int32(i+1), 0) {
			ph.wake <- struct{}{}
		}
	}
}

// wait returns true once every part of phase i has finished, or false once it has waited
// limit (0: no limit).
func (ph *phased) wait(i int, limit time.Duration) bool {
	st, n := &ph.state[i], int64(ph.parts[i])
	return spinUntil(func() bool { return st.done.Load() >= n }, limit)
}
