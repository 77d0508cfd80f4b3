package kernels

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// checkPhases runs Phases and checks that every part ran once, that no part of a phase started
// before every part of the phase before it had finished, that phases of one part ran on the
// caller (worker 0), and that no two parts ran at once under one worker number.
func checkPhases(nw int, parts []int, slow func(phase, part int) time.Duration) error {
	counts := make([][]atomic.Int32, len(parts))
	finished := make([]atomic.Int32, len(parts))
	busy := make([]atomic.Bool, max(nw, 1))
	var errMu sync.Mutex
	var first error
	fail := func(format string, args ...any) {
		errMu.Lock()
		defer errMu.Unlock()
		if first == nil {
			first = fmt.Errorf(format, args...)
		}
	}
	for i, n := range parts {
		counts[i] = make([]atomic.Int32, n)
	}
	Phases(nw, parts, func(worker, phase, part int) {
		if worker < 0 || worker >= max(nw, 1) {
			fail("worker %d outside [0, %d)", worker, nw)
			return
		}
		if !busy[worker].CompareAndSwap(false, true) {
			fail("two parts at once under worker %d", worker)
		}
		defer busy[worker].Store(false)
		if phase > 0 && int(finished[phase-1].Load()) != parts[phase-1] {
			fail("phase %d part %d started before phase %d finished", phase, part, phase-1)
		}
		if parts[phase] == 1 && worker != 0 {
			fail("phase %d of one part ran on worker %d", phase, worker)
		}
		if slow != nil {
			time.Sleep(slow(phase, part))
		}
		counts[phase][part].Add(1)
		finished[phase].Add(1)
	})
	for i := range parts {
		for p := range counts[i] {
			if c := counts[i][p].Load(); c != 1 {
				return fmt.Errorf("phase %d part %d ran %d times", i, p, c)
			}
		}
	}
	return first
}

// TestPhasesOrderAndParts: every part of every phase runs once, in phase order, for any number
// of workers and parts, back to back (helpers reused).
func TestPhasesOrderAndParts(t *testing.T) {
	for _, workers := range []int{1, 2, 3, 8} {
		old := workerOverride
		workerOverride = workers
		for _, nw := range []int{0, 1, 2, workers, workers + 2} {
			for _, parts := range [][]int{nil, {1}, {3}, {1, 1, 1}, {4, 1, 2, 7, 1, 1, 3}, {16, 16, 1, 16}} {
				for range 30 {
					if err := checkPhases(nw, parts, nil); err != nil {
						t.Fatalf("workers %d, nw %d, parts %v: %v", workers, nw, parts, err)
					}
				}
			}
		}
		workerOverride = old
	}
}

// TestPhasesHelpersLeaveAndReturn: one-part phases longer than helperSpin send the helpers away,
// and the next phase of several parts calls them back (its parts run on more than one worker).
func TestPhasesHelpersLeaveAndReturn(t *testing.T) {
	old := workerOverride
	workerOverride = 2
	defer func() { workerOverride = old }()
	parts := []int{8, 1, 64, 1, 64}
	var helped [5]atomic.Int32
	for try := 0; try < 20; try++ {
		Phases(2, parts, func(worker, phase, part int) {
			if parts[phase] == 1 {
				time.Sleep(3 * helperSpin)
			} else {
				time.Sleep(20 * time.Microsecond)
			}
			if worker != 0 {
				helped[phase].Add(1)
			}
		})
		if helped[2].Load() > 0 && helped[4].Load() > 0 {
			return
		}
	}
	t.Fatalf("after one-part phases longer than helperSpin, helpers ran %d and %d parts of the phases after them in 20 tries", helped[2].Load(), helped[4].Load())
}

// TestPhasesConcurrentAndNested: chains started from many goroutines at once, and chains
// started inside a part of another, each run every part once in order (the helpers serve one
// region; the others start goroutines).
func TestPhasesConcurrentAndNested(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				parts := []int{1 + (g+i)%5, 1, 2 + i%3}
				var inner atomic.Int32
				err := checkPhases(3, parts, nil)
				if err == nil {
					Phases(2, []int{2, 1}, func(_, phase, _ int) {
						if phase == 0 {
							if e := checkPhases(2, []int{3, 1, 2}, nil); e != nil {
								errs <- e
							}
						}
						inner.Add(1)
					})
					if inner.Load() != 3 {
						err = fmt.Errorf("outer chain ran %d parts, want 3", inner.Load())
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestPhasesCallerSleeps: a caller that waits longer than helperSpin for a helper's part sleeps
// and is woken by the part that completes the phase, every time, and the phases stay in order.
func TestPhasesCallerSleeps(t *testing.T) {
	old := workerOverride
	workerOverride = 2
	defer func() { workerOverride = old }()
	for range 20 {
		var done [3]atomic.Int32
		Phases(2, []int{4, 4, 4}, func(worker, phase, part int) {
			if phase > 0 && done[phase-1].Load() != 4 {
				t.Errorf("phase %d started before phase %d finished", phase, phase-1)
			}
			if worker != 0 {
				time.Sleep(4 * helperSpin) // the caller runs out of parts and waits
			} else {
				time.Sleep(helperSpin / 2) // long enough for the helper to take a part
			}
			done[phase].Add(1)
		})
		for i := range done {
			if done[i].Load() != 4 {
				t.Fatalf("phase %d ran %d parts, want 4", i, done[i].Load())
			}
		}
	}
}
