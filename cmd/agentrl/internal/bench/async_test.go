package bench

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/all"
)

func TestTimeToTargetAndEqualSamples(t *testing.T) {
	ps := []evalPoint{{pass1: 0.4}, {step: 5, wall: 10, trained: 100, pass1: 0.5}, {step: 10, wall: 30, trained: 200, pass1: 0.7}}
	if got, ok := timeToTarget(ps, 0.6); !ok || math.Abs(got-20) > 1e-9 {
		t.Fatalf("time to 0.6 = %v %v, want 20 (halfway between 10 s and 30 s)", got, ok)
	}
	if got, ok := timeToTarget(ps, 0.3); !ok || got != 0 {
		t.Fatalf("a target met at the start takes %v %v, want 0", got, ok)
	}
	if _, ok := timeToTarget(ps, 0.9); ok {
		t.Fatal("an unreached target was reported reached")
	}
	if got := pass1At(ps, 150); math.Abs(got-0.6) > 1e-9 {
		t.Fatalf("pass@1 at 150 trained = %v, want 0.6", got)
	}
}

// The whole bench, shrunk to seconds: a supervised checkpoint, then a sync and an async arm,
// and the tables that say the latency is simulated.
func TestAsyncBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a supervised checkpoint and two RL arms")
	}
	var out bytes.Buffer
	err := Async(context.Background(), &out, AsyncOptions{
		Envs: all.Builtins(), RunsDir: t.TempDir(), SFTSteps: 20, Arms: "sync,overlap,1-nopartial,2-bounded", Tails: "5", Dist: "lognormal",
		Median: time.Millisecond, Seeds: "1,2", Steps: 2, Every: 1, Tasks: 4, Samples: 1, Target: 0.5, Quiet: true,
		Set: []string{"phases.rl.rl.groups_per_step=2", "phases.rl.optim.warmup=1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SIMULATED", "async η=1, no partial rollouts", "one-step overlap", "async η=2, bounded order", "sync", "lag-max histogram", "paired against sync", "at sync's trained episodes", "standard error"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestMeanIntervalAndArms(t *testing.T) {
	// Mean 2, sample sd 1, n 3: half-width 4.303 · 1/√3 = 2.48.
	if got := meanInterval([]float64{1, 2, 3}, "%.2f"); got != "2.00 ± 2.48" {
		t.Fatalf("meanInterval = %q", got)
	}
	if got := meanInterval([]float64{-1, -3}, "%+.1f"); got != "-2.0 ± 12.7" {
		t.Fatalf("meanInterval = %q", got)
	}
	if meanInterval(nil, "%.1f") != "-" || meanInterval([]float64{4}, "%.1f") != "4.0" {
		t.Fatal("fewer than two values have no interval")
	}
	for arm, want := range map[string]string{
		"sync":        "",
		"overlap":     "phases.rl.rl.async.max_staleness=1 phases.rl.rl.async.mode=overlap",
		"2":           "phases.rl.rl.async.max_staleness=2 phases.rl.rl.async.mode=continuous",
		"4-nopartial": "phases.rl.rl.async.max_staleness=4 phases.rl.rl.async.mode=continuous phases.rl.rl.async.partial_rollouts=false",
		"2-bounded":   "phases.rl.rl.async.max_staleness=2 phases.rl.rl.async.mode=continuous phases.rl.rl.async.order=bounded",
		"1-keep-mask": "phases.rl.rl.async.max_staleness=1 phases.rl.rl.async.mode=continuous phases.rl.rl.async.stale=keep phases.rl.rl.loss.correction.cap=0 phases.rl.rl.loss.correction.mask_low=0.5 phases.rl.rl.loss.correction.mask_high=2",
	} {
		sets, err := armAsyncSets(arm)
		if err != nil || strings.Join(sets, " ") != want {
			t.Errorf("arm %s: %v %v, want %s", arm, sets, err, want)
		}
	}
	if n := asyncArmName("2-bounded-none"); n != "async η=2, bounded order, no IS correction" {
		t.Errorf("name %q", n)
	}
	// Every option makes a valid run config on the bench's base settings, and config
	// validation refuses the combinations that do nothing.
	o := AsyncOptions{RunsDir: t.TempDir(), Dist: "lognormal", Median: time.Millisecond, Steps: 10, Every: 5}
	for _, arm := range []string{"2-nopartial", "2-bounded", "2-admission", "2-keep", "2-mask", "2-nocap", "2-none", "2-bounded-none"} {
		if _, err := config.Load(all.Builtins(), "calc", "", armSets(o, "", arm, 50, 1)); err != nil {
			t.Errorf("arm %s: %v", arm, err)
		}
	}
	if _, err := config.Load(all.Builtins(), "calc", "", armSets(o, "", "2-bounded-keep", 50, 1)); err == nil {
		t.Error("arm 2-bounded-keep accepted: keep does nothing in bounded order")
	}
	for _, bad := range []string{"0", "fast", "1-partial", "-nopartial", "2-keep-keep"} {
		if _, err := armAsyncSets(bad); err == nil {
			t.Errorf("arm %q accepted", bad)
		}
	}
}

// The statistics of the paired comparison: an evaluation's standard error, the steps an
// asynchronous arm is evaluated at, and the per-seed differences to sync with their interval.
func TestAsyncPairedStatistics(t *testing.T) {
	// Tasks' pass@1 0, 1, 0.5, 0.5: sd √(1/6), SE √(1/6)/2 = 0.2041.
	if se := standardError([]float64{0, 1, 0.5, 0.5}); math.Abs(se-0.20412) > 1e-4 {
		t.Fatalf("standard error %v, want 0.2041", se)
	}
	if standardError([]float64{0.5}) != 0 {
		t.Fatal("one task has no standard error")
	}
	// Trained episodes by step: sync's marks 250 and 500 are first reached at steps 3 and 5
	// (the last mark: step 4 before it too, which is also sync's step count); a mark of 900 is
	// never reached.
	trained := map[int]float64{1: 100, 2: 200, 3: 300, 4: 400, 5: 520, 6: 600}
	if got := equalSteps(trained, []float64{250, 500, 900}, 4); !slices.Equal(got, []int{3, 4, 5}) {
		t.Fatalf("equal steps %v, want [3 4 5]", got)
	}
	if got := equalSteps(trained, []float64{150, 250}, 2); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("equal steps %v, want [2 3]", got)
	}
	if got := equalSteps(trained, []float64{100}, 1); !slices.Equal(got, []int{1}) {
		t.Fatalf("equal steps %v, want [1] once", got)
	}
	// Sync trained 1,000 episodes; the arm reached them first at step 11 (1,100), after 950 at
	// step 10: pass@1 interpolated halfway between 60% and 70%.
	ps := []evalPoint{{pass1: 0.4}, {step: 10, trained: 950, pass1: 0.6}, {step: 11, trained: 1100, pass1: 0.7}}
	if e := atSyncEpisodes(ps, 1000); e == nil || e.step != 11 || math.Abs(e.pass1-0.6333333) > 1e-6 {
		t.Fatalf("equal point %+v, want step 11 at 63.3%%", e)
	}
	if atSyncEpisodes(ps, 1200) != nil {
		t.Fatal("a mark never reached has an equal point")
	}
	// Three seeds: sync ends at 70, 80, 60%; the arm at sync's episodes 68, 79, 61% (−2, −1,
	// +1: mean −0.67, sd 1.528, half-width 4.303·1.528/√3 = 3.795); seed 3 never reached them
	// in another arm.
	pt := func(step int, trained, p1 float64) evalPoint {
		return evalPoint{step: step, trained: trained, pass1: p1}
	}
	var rs []*asyncArm
	for i, f := range []float64{0.70, 0.80, 0.60} {
		seed := uint64(i + 1)
		s := &asyncArm{arm: "sync", tail: 50, seed: seed, points: []evalPoint{pt(0, 0, 0.4), pt(10, 1000, f)}}
		a := &asyncArm{arm: "2", tail: 50, seed: seed, points: []evalPoint{pt(0, 0, 0.4), pt(9, 1010, f+[]float64{-0.02, -0.01, 0.01}[i]), pt(10, 1100, f)}, bias: 1.3}
		a.equal, a.atSteps = &a.points[1], &a.points[2]
		b := &asyncArm{arm: "2-bounded", tail: 50, seed: seed, points: []evalPoint{pt(0, 0, 0.4), pt(10, 900, f)}}
		b.atSteps = &b.points[1]
		if seed != 3 {
			b.equal = &b.points[1]
		}
		rs = append(rs, s, a, b)
	}
	ps2 := pairAsync(AsyncOptions{Target: 0.5}, rs)
	if len(ps2) != 2 || ps2[0].arm != "2" || ps2[0].seeds != 3 || ps2[1].notReached != 1 || len(ps2[1].equal) != 2 {
		t.Fatalf("paired %+v %+v", ps2[0], ps2[1])
	}
	if got := meanInterval(ps2[0].equal, "%+.2f"); got != "-0.67 ± 3.79" {
		t.Fatalf("difference at sync's episodes %q, want -0.67 ± 3.79", got)
	}
	if got := meanInterval(ps2[0].steps, "%+.1f"); got != "+0.0 ± 0.0" {
		t.Fatalf("difference at sync's steps %q", got)
	}
	var out bytes.Buffer
	printAsyncPaired(&out, AsyncOptions{Target: 0.5, Steps: 10}, rs)
	for _, want := range []string{"-0.7 ± 3.8", "(1 never reached)", "-2.0, -1.0, +1.0", "1.30 ± 0.00"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("paired table lacks %q:\n%s", want, out.String())
		}
	}
}
