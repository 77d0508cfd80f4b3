package pipeline

import (
	"context"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/traj"
)

// asyncSets make the tiny run's RL phase asynchronous with one-step overlap, and (as in
// scheduleSets) keep every group and give the updates a gradient, so each step trains and the
// weights move while the next step samples.
var asyncSets = []string{
	"phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.loss.entropy_coef=0.01", "phases.rl.steps=6",
	"phases.rl.rl.loss.correction.level=token", "phases.rl.rl.loss.correction.cap=2", "phases.rl.rl.async.max_staleness=1",
}

// An asynchronous phase trains every step, and no token it trains on lags the learner by more
// than max_staleness versions.
func TestAsyncPhaseHoldsTheStalenessBound(t *testing.T) {
	c := tinyConfig(t, t.TempDir(), asyncSets...)
	run, err := NewRun(c, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	rl, overlapped := 0, 0
	for _, m := range metricLines(t, run.Dir) {
		if m["phase"] != "rl" {
			continue
		}
		rl++
		if m["signal/effective_batch"] == nil && m["signal/groups_kept"].(float64) > 0 {
			t.Fatalf("step %v kept groups but did not train: %v", m["step"], m)
		}
		lag := m["shift/version_lag_max"].(float64)
		if lag > 1 {
			t.Fatalf("step %v trained on tokens %v versions old, bound 1", m["step"], lag)
		}
		if lag == 1 {
			overlapped++ // sampled while the learner trained the step before
		}
		if _, ok := m["async/dropped_stale"]; !ok {
			t.Fatalf("step %v lacks async/dropped_stale", m["step"])
		}
	}
	if rl != 6 || overlapped == 0 {
		t.Fatalf("%d RL steps logged (want 6), %d of them sampled while the learner trained (want some)", rl, overlapped)
	}
}

func TestAsyncConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"phases.rl.rl.async.max_staleness=0", "phases.rl.rl.loss.correction.level=token"}, "max_staleness must be in [1, 16]"},
		{[]string{"phases.rl.rl.async.max_staleness=1"}, "needs an importance correction"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.async.workers.listen=127.0.0.1:0"}, "dynamic sampling with remote workers is not supported"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.async.workers.listen=127.0.0.1:0", "phases.rl.rl.async.workers.token=secret"}, "${NAME}"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.async.workers.url=nats://h:1", "phases.rl.rl.async.workers.listen=127.0.0.1:0"}, "exactly one of listen"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.async.workers.bogus=1"}, "bogus"},
	} {
		_, err := Load(all.Builtins(), "", "", tc.sets)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.sets, err, tc.want)
		}
	}
}

func TestDropStale(t *testing.T) {
	ep := func(versions ...int32) *traj.Trajectory {
		t := &traj.Trajectory{Versions: append([]int32{traj.NoVersion}, versions...)}
		t.LossMask = make([]bool, len(t.Versions))
		for i := 1; i < len(t.LossMask); i++ {
			t.LossMask[i] = true
		}
		return t
	}
	fresh, mixed, old := ep(5, 5), ep(3, 5), ep(2, 2)
	groups, dropped := dropStale([][]*traj.Trajectory{{fresh, mixed}, {old}}, 5, 2)
	if dropped != 1 || len(groups) != 1 || len(groups[0]) != 2 {
		t.Fatalf("kept %v, dropped %d; want the first group whole and the episode 3 versions old dropped", groups, dropped)
	}
	// The oldest policy token decides: an episode begun at version 2 that continued at 5 is 3 old.
	if _, d := dropStale([][]*traj.Trajectory{{ep(2, 5)}}, 5, 2); d != 1 {
		t.Fatal("an episode is as stale as its oldest policy token")
	}
}
