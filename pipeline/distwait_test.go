package pipeline

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env/all"
)

// Item 23 of issue 29: a distributed step that receives nothing it could train is not logged as a
// step (reward 0, success 0%): it waits again, says so, and after maxEmptyWaits group timeouts
// the run stops with an error that says why.
func TestDistributedStepWithNoDataIsNotAStep(t *testing.T) {
	c := tinyConfig(t, t.TempDir(), append(slices.Clone(distSets), "phases.rl.rl.async.workers.group_timeout=200ms")...)
	var out bytes.Buffer
	run, err := NewRun(c, Options{Envs: all.Builtins(), Out: lockedWriter{b: &out, mu: &sync.Mutex{}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err = run.Train(ctx) // no worker ever starts
	if err == nil || !strings.Contains(err.Error(), "no worker is returning") {
		t.Fatalf("train with no worker: err %v, want the run to stop saying no worker returns episodes\n%s", err, out.String())
	}
	if n := countRLLines(run.Dir); n != 0 {
		t.Fatalf("%d RL steps logged with no data", n)
	}
	if got := strings.Count(out.String(), "a step with no data is not trained"); got != maxEmptyWaits-1 {
		t.Fatalf("%d warnings of waiting again, want %d:\n%s", got, maxEmptyWaits-1, out.String())
	}
}

// checkKilledWorkerCounted checks that a worker killed mid-run shows in the metrics by cause
// (item 7 of issue 29): its tasks ran again (dist/tasks_retried), or ran twice when it had stored
// a trajectory but not acknowledged its task (dist/dropped_duplicate).
func checkKilledWorkerCounted(t *testing.T, dir string) {
	t.Helper()
	lines := metricLines(t, dir)
	last := lines[len(lines)-1]
	for i := len(lines) - 1; i >= 0; i-- {
		if lines[i]["phase"] == "rl" && lines[i]["eval"] == nil {
			last = lines[i]
			break
		}
	}
	retried, _ := last["dist/tasks_retried"].(float64)
	dup, _ := last["dist/dropped_duplicate"].(float64)
	if retried == 0 {
		t.Fatalf("a worker killed mid-run left no trace in the metrics: dist/tasks_retried %v, dist/dropped_duplicate %v", last["dist/tasks_retried"], dup)
	}
	t.Logf("killed worker: %v tasks retried, %v duplicates", retried, dup)
}
