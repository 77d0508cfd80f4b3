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
		Envs: all.Builtins(), RunsDir: t.TempDir(), SFTSteps: 20, Arms: "sync,1", Tails: "5", Dist: "lognormal",
		Median: time.Millisecond, Seeds: "1", Steps: 2, Every: 1, Tasks: 4, Samples: 1, Target: 0.5, Quiet: true,
		Set: []string{"phases.rl.rl.groups_per_step=2", "phases.rl.optim.warmup=1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SIMULATED", "async η=1", "sync", "lag-max histogram"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}
