package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The parallel regions of a decode step or a training step are short (tens of microseconds to
// milliseconds) and come back to back. Starting a goroutine per region makes the runtime wake an
// idle thread every time, and on the shared Zen 4 VM that wake-up alone measured ~20 µs: a
// 20 µs task run on two workers took 41 µs. So the regions run on helper goroutines that stay
// between regions: after a region a helper spins for helperSpin (spinUntil: yielding to any
// other runnable goroutine every few microseconds, so it delays no one for long), then parks; a
// parked helper that stays idle for helperIdle exits, so nothing lingers in a process that
// stopped computing.
//
// One region at a time uses the helpers. A region that starts while another holds them (another
// goroutine's product, or a region nested in a region's work) starts goroutines as before, so
// regions never wait for each other and nesting cannot deadlock.

const (
	helperSpin = 30 * time.Microsecond
	helperIdle = 100 * time.Millisecond
)

// helper states.
const (
	helperRunning int32 = iota // working or spinning: it will see the next region by itself
	helperParked               // blocked on wake
	helperGone                 // exited; the next region starts it again
)

type helper struct {
	state atomic.Int32
	wake  chan struct{} // buffered 1: the token of the caller that moved state parked → running
}

// region is one fanOut: parts are claimed one at a time by the caller and the helpers.
type region struct {
	f     func(part int)
	parts int64
	next  atomic.Int64 // the next unclaimed part
	done  atomic.Int64 // parts finished
	left  atomic.Bool  // a helper left before the end (Phases): it parks at once
}

var pool struct {
	mu      sync.Mutex // held by the region that uses the helpers
	cur     atomic.Pointer[region]
	helpers []*helper // guarded by mu; grows to maxWorkers()-1
}

// fanOut runs f(0..parts-1), each exactly once, on the calling goroutine and up to
// maxWorkers()-1 helpers, and returns when all have finished. Which goroutine runs which part
// is not fixed, so f must depend only on its part.
func fanOut(parts int, f func(part int)) {
	if parts <= 1 {
		if parts == 1 {
			f(0)
		}
		return
	}
	if !pool.mu.TryLock() {
		spawnFanOut(parts, f)
		return
	}
	defer pool.mu.Unlock()
	r := &region{f: f, parts: int64(parts)}
	startRegion(r, parts)
	r.work()
	// The parts left are running on helpers; each is a share of the region's work.
	spinUntil(func() bool { return r.done.Load() >= r.parts }, 0)
}

// startRegion publishes r to the helpers and makes sure need-1 of them look at it. The caller
// holds pool.mu.
func startRegion(r *region, need int) {
	need = min(need, maxWorkers()) - 1
	for len(pool.helpers) < need {
		h := &helper{wake: make(chan struct{}, 1)}
		h.state.Store(helperGone)
		pool.helpers = append(pool.helpers, h)
	}
	pool.cur.Store(r)
	for _, h := range pool.helpers[:need] {
		h.start()
	}
}

// A goroutine that waits for a region or a phase spins: it loads the cache line it waits on
// spinTurns times (about a microsecond), then looks at the clock, gives up once it has waited
// its limit, and yields (runtime.Gosched) when yieldGap has passed since it last did. A yield on
// every turn, as the pool did, made a goroutine see a new region or a finished phase only after
// a pass through the scheduler, ~0.3 µs and a lock of the global run queue each time. yieldGap
// bounds how long a spinning goroutine delays others queued on its P.
const (
	spinTurns = 256
	yieldGap  = 5 * time.Microsecond
)

// spinUntil returns true once cond holds, or false once it has spun for limit (0: no limit).
func spinUntil(cond func() bool, limit time.Duration) bool {
	var start, yielded time.Time
	for turn := 1; !cond(); turn++ {
		if turn%spinTurns != 0 {
			continue
		}
		now := time.Now()
		if start.IsZero() {
			start, yielded = now, now
			continue
		}
		if limit > 0 && now.Sub(start) > limit {
			return false
		}
		if now.Sub(yielded) >= yieldGap {
			runtime.Gosched()
			yielded = now
		}
	}
	return true
}

// work claims and runs parts until none is left.
func (r *region) work() {
	for {
		p := r.next.Add(1) - 1
		if p >= r.parts {
			return
		}
		r.f(int(p))
		r.done.Add(1)
	}
}

// start makes sure h will look at the current region: a running helper will by itself, a parked
// one is woken, a gone one is started.
func (h *helper) start() {
	for {
		switch h.state.Load() {
		case helperRunning:
			return
		case helperParked:
			if h.state.CompareAndSwap(helperParked, helperRunning) {
				h.wake <- struct{}{}
				return
			}
		case helperGone:
			if h.state.CompareAndSwap(helperGone, helperRunning) {
				go h.loop()
				return
			}
		}
	}
}

// loop runs regions until the helper has been idle for helperIdle.
func (h *helper) loop() {
	timer := time.NewTimer(helperIdle)
	defer timer.Stop()
	var last *region
	spin := helperSpin
	for {
		r := h.await(last, timer, spin)
		if r == nil {
			return
		}
		last = r
		r.work()
		spin = helperSpin
		if r.left.Load() {
			// It left a chain of phases in a long stretch that the caller runs alone: park, and
			// let the caller call it back (Phases).
			spin = 0
		}
	}
}

// await returns the first region other than last, spinning for spin (none: 0) and then
// parking; nil means the helper stayed parked for helperIdle and is gone.
func (h *helper) await(last *region, timer *time.Timer, spin time.Duration) *region {
	var r *region
	if spin > 0 && spinUntil(func() bool { r = pool.cur.Load(); return r != last }, spin) {
		return r
	}
	h.state.Store(helperParked)
	// A region published before the store above is seen here; one published after it sees
	// the parked state and sends a wake token (sequentially consistent atomics).
	if r := pool.cur.Load(); r != last {
		if h.state.CompareAndSwap(helperParked, helperRunning) {
			return r
		}
		<-h.wake // a caller moved the state first: take its token
		return pool.cur.Load()
	}
	timer.Reset(helperIdle)
	select {
	case <-h.wake:
		timer.Stop()
		return pool.cur.Load()
	case <-timer.C:
		if h.state.CompareAndSwap(helperParked, helperGone) {
			return nil
		}
		<-h.wake
		return pool.cur.Load()
	}
}

// spawnFanOut is fanOut on fresh goroutines, for regions that find the helpers in use.
func spawnFanOut(parts int, f func(part int)) {
	var wg sync.WaitGroup
	wg.Add(parts - 1)
	for p := 1; p < parts; p++ {
		go func() {
			defer wg.Done()
			f(p)
		}()
	}
	f(0)
	wg.Wait()
}

// Workers is how many goroutines the kernels' parallel regions use: GOMAXPROCS.
func Workers() int { return maxWorkers() }

// FanOut runs f(0..parts-1), each exactly once, in parallel on the calling goroutine and up to
// Workers()-1 helper goroutines kept between calls (see pool.go), and returns when all have
// finished. Which goroutine runs which part is not fixed.
func FanOut(parts int, f func(part int)) { fanOut(parts, f) }
