package pipeline

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/traj"
)

// admissionSim is continuous admission's bookkeeping run in discrete ticks, without an engine:
// every fourth group admitted (k % 4 == 0, a slow task) takes slow ticks to finish, the others
// one; the learner fills steps of B groups with take and trains one step per tick.
type admissionSim struct {
	ticks       int   // until steps steps trained
	trained     []int // the groups trained, in order
	slowTrained int
	admitted    int
	slowAdmit   int
	cancelled   int
	stale       int   // groups taken past the bound
	maxLag      int32 // the largest lag of a trained group's admission version
}

func simulateAdmission(t *testing.T, order string, keep bool, eta, B, steps, slow int) admissionSim {
	t.Helper()
	a := &admission{eta: eta, B: B, order: order, inflight: map[int]*admitted{}}
	finishAt := map[int]int{}
	var s admissionSim
	var fill []*admitted
	isSlow := func(k int) bool { return k%4 == 0 }
	for k, tick := 0, 0; a.trained < steps; tick++ {
		if tick > 100*steps*slow {
			t.Fatalf("order %s: no progress after %d ticks (trained %d steps)", order, tick, a.trained)
		}
		for a.canAdmit() {
			a.inflight[k] = &admitted{k: k, version: a.version, cancel: func() {}}
			a.admitted++
			finishAt[k] = tick + 1
			if isSlow(k) {
				finishAt[k] = tick + slow
				s.slowAdmit++
			}
			s.admitted++
			k++
		}
		keys := slices.Sorted(func(yield func(int) bool) {
			for k := range a.inflight {
				if !yield(k) {
					return
				}
			}
		})
		for _, k := range keys {
			if finishAt[k] <= tick+1 {
				g := a.inflight[k]
				a.remove(k, time.Time{})
				a.finished(g, []*traj.Trajectory{})
			}
		}
		for len(fill) < B {
			g := a.take(a.version, B-len(fill))
			if g == nil {
				break
			}
			if lag := a.version - g.version; lag > int32(eta) && !keep {
				s.stale++
				a.discarded++
				continue
			}
			fill = append(fill, g)
		}
		if len(fill) < B {
			continue
		}
		for _, g := range fill {
			s.trained = append(s.trained, g.k)
			s.maxLag = max(s.maxLag, a.version-g.version)
			if isSlow(g.k) {
				s.slowTrained++
			}
		}
		fill = nil
		a.trained++
		a.version++
		if !keep {
			s.cancelled += len(a.cancelStale(a.version, time.Time{}))
		}
		s.ticks = tick + 1
	}
	return s
}

// In finish order the slow tasks are cancelled in flight and never trained; in bounded order every
// admitted group trains within η versions, so the slow tasks keep their share of the trained
// groups, with nothing stale or cancelled, and the learner waits for a slow group only at its last
// step. The price: here a slow group outlasts η steps, so training all of them waits for them.
func TestAdmissionOrderTrainsSlowTasks(t *testing.T) {
	const eta, B, steps, slow = 2, 4, 60, 8
	finish := simulateAdmission(t, config.OrderFinish, false, eta, B, steps, slow)
	bounded := simulateAdmission(t, config.OrderBounded, false, eta, B, steps, slow)
	strict := simulateAdmission(t, config.OrderAdmission, false, eta, B, steps, slow)
	keep := simulateAdmission(t, config.OrderFinish, true, eta, B, steps, slow)
	share := func(s admissionSim) float64 { return float64(s.slowTrained) / float64(len(s.trained)) }
	t.Logf("finish: %d ticks, slow share %.2f, %d cancelled, %d stale; bounded: %d ticks, %.2f; admission: %d ticks, %.2f; keep: %d ticks, %.2f, lag max %d",
		finish.ticks, share(finish), finish.cancelled, finish.stale, bounded.ticks, share(bounded), strict.ticks, share(strict), keep.ticks, share(keep), keep.maxLag)
	if share(finish) > 0.05 || finish.cancelled == 0 {
		t.Errorf("finish order trained slow tasks at share %.2f with %d groups cancelled: want the slow ones cancelled (the bias)", share(finish), finish.cancelled)
	}
	for _, s := range []struct {
		name string
		s    admissionSim
	}{{"bounded", bounded}, {"admission", strict}} {
		if s.s.cancelled != 0 || s.s.stale != 0 || s.s.maxLag > eta {
			t.Errorf("%s order: %d cancelled, %d stale, lag up to %d: want none past η = %d", s.name, s.s.cancelled, s.s.stale, s.s.maxLag, eta)
		}
		if sh := share(s.s); sh < 0.2 || sh > 0.3 {
			t.Errorf("%s order: slow tasks are %.2f of the trained groups, want their admitted share 0.25", s.name, sh)
		}
	}
	if bounded.ticks > strict.ticks || finish.ticks > bounded.ticks {
		t.Errorf("ticks: finish %d, bounded %d, admission %d: want finish <= bounded <= admission", finish.ticks, bounded.ticks, strict.ticks)
	}
	// Keeping stale groups trains the slow tasks too, later than η allows.
	if keep.cancelled != 0 || keep.maxLag <= eta || share(keep) < 0.15 {
		t.Errorf("keep: %d cancelled, lag max %d, slow share %.2f: want nothing cancelled, lags past η, slow tasks trained", keep.cancelled, keep.maxLag, share(keep))
	}
}

// Bounded order takes a later-admitted finished group only while the groups that must train by a
// version still fit in the steps up to it.
func TestBoundedTakeReservesLastSteps(t *testing.T) {
	a := &admission{eta: 1, B: 2, order: config.OrderBounded, inflight: map[int]*admitted{}}
	// Groups 0 and 1 were admitted under version 0 and are in flight; 2 and 3 (version 1) finished.
	// At version 1 (the last step for 0 and 1) with two slots, nothing else may be taken.
	for k := range 4 {
		g := &admitted{k: k, version: int32(k / 2), cancel: func() {}}
		if k < 2 {
			a.inflight[k] = g
		} else {
			a.finished(g, nil)
		}
	}
	if g := a.take(1, 2); g != nil {
		t.Fatalf("took group %d while groups 0 and 1 need both slots of their last step", g.k)
	}
	// At version 0, the step before, a slot may go to a later group: 0 and 1 then take the next
	// step's two.
	if g := a.take(0, 2); g == nil || g.k != 2 {
		t.Fatalf("took %v at version 0, want group 2", g)
	}
	// Group 4, admitted late under version 0, finished: with 0, 1 and 4 due by version 1, the
	// last slot at version 0 must go to 4, not to the earlier-admitted 3 (due by version 2).
	a.finished(&admitted{k: 4, version: 0, cancel: func() {}}, nil)
	if g := a.take(0, 1); g == nil || g.k != 4 {
		t.Fatalf("took %v with one slot left at version 0, want group 4", g)
	}
	// Finish order takes what has finished.
	a.order = config.OrderFinish
	if g := a.take(1, 2); g == nil || g.k != 3 {
		t.Fatalf("finish order took %v, want group 3", g)
	}
}

func TestLatencyBiasRatio(t *testing.T) {
	ep := func(d time.Duration) *traj.Trajectory { return &traj.Trajectory{Timings: traj.Timings{Total: d}} }
	var b latencyBias
	if _, ok := b.ratio(); ok {
		t.Fatal("a ratio before anything trained")
	}
	// Trained: 1 s and 3 s (mean 2 s); dropped stale: one of 4 s; cancelled: two after 7 s.
	// Sampled mean (1+3+4+14)/5 = 4.4 s; ratio 2.2.
	b.add([]*traj.Trajectory{ep(time.Second), ep(3 * time.Second)}, 4*time.Second, 1)
	b.cancelled(2, 7*time.Second)
	if r, ok := b.ratio(); !ok || r < 2.2-1e-9 || r > 2.2+1e-9 {
		t.Fatalf("ratio %v %v, want 2.2", r, ok)
	}
}

// Options.StopRL ends a run after the step it says so, with the step's line and checkpoint
// written, in the synchronous loop and under continuous admission.
func TestStopRLEndsTheRunAfterAStep(t *testing.T) {
	for _, async := range []bool{false, true} {
		sets := []string{"phases.rl.steps=5", "checkpoint.every=1"}
		if async {
			sets = append(slices.Clone(asyncSets), sets...)
		}
		c := tinyConfig(t, t.TempDir(), sets...)
		var seen []int
		run, err := NewRun(c, Options{Envs: all.Builtins(), StopRL: func(phase string, step int, line map[string]any) bool {
			if line["step"] != step || line["phase"] != phase {
				t.Errorf("step %d of %s given the line of step %v of %v", step, phase, line["step"], line["phase"])
			}
			seen = append(seen, step)
			return step == 2
		}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Train(context.Background()); !errors.Is(err, ErrStopped) {
			t.Fatalf("async %v: Train returned %v, want ErrStopped", async, err)
		}
		rl := 0
		for _, m := range metricLines(t, run.Dir) {
			if m["phase"] == "rl" {
				rl++
			}
		}
		if !slices.Equal(seen, []int{1, 2}) || rl != 2 {
			t.Fatalf("async %v: StopRL saw steps %v, %d RL lines written; want 1, 2 and 2", async, seen, rl)
		}
		if _, err := os.Stat(filepath.Join(run.Dir, "checkpoints", "rl-p1.s000002")); err != nil {
			entries, _ := os.ReadDir(filepath.Join(run.Dir, "checkpoints"))
			t.Fatalf("async %v: no checkpoint of step 2: %v (have %v)", async, err, entries)
		}
	}
}

// A replay compares a line's warnings without the latency-bias one, which it cannot reproduce.
func TestReplayedWarningsLeaveOutTheLatencyBias(t *testing.T) {
	lat := "latency bias: the episodes sampled last 1.30× as long as those trained (limit 1.20×)"
	if got := replayedWarnings([]any{"exploration collapsing", lat}); !reflect.DeepEqual(got, []any{"exploration collapsing"}) {
		t.Fatalf("got %v", got)
	}
	if got := replayedWarnings([]any{lat}); got != nil {
		t.Fatalf("a line with only the latency warning compares as %v, want absent", got)
	}
	if got := replayedWarnings(nil); got != nil {
		t.Fatalf("absent warnings became %v", got)
	}
}
