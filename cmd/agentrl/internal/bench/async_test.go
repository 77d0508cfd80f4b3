package bench

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

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
		Envs: all.Builtins(), RunsDir: t.TempDir(), SFTSteps: 20, Arms: "sync,overlap,1-nopartial", Tails: "5", Dist: "lognormal",
		Median: time.Millisecond, Seeds: "1,2", Steps: 2, Every: 1, Tasks: 4, Samples: 1, Target: 0.5, Quiet: true,
		Set: []string{"phases.rl.rl.groups_per_step=2", "phases.rl.optim.warmup=1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SIMULATED", "async η=1, no partial rollouts", "one-step overlap", "sync", "lag-max histogram", "over seeds"} {
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
	} {
		sets, err := armAsyncSets(arm)
		if err != nil || strings.Join(sets, " ") != want {
			t.Errorf("arm %s: %v %v, want %s", arm, sets, err, want)
		}
	}
	for _, bad := range []string{"0", "fast", "1-partial", "-nopartial"} {
		if _, err := armAsyncSets(bad); err == nil {
			t.Errorf("arm %q accepted", bad)
		}
	}
}
