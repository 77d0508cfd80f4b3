package pipeline

import (
	"context"
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

// replaySets make the tiny run's RL steps train (every group kept, an entropy gradient), and
// prune every checkpoint but the phase boundaries and the last.
var replaySets = []string{"phases.rl.rl.loss.entropy_coef=0.01", "phases.rl.rl.dynamic_sampling=null", "phases.rl.steps=4", "checkpoint.every=1", "checkpoint.keep=1"}

// Replaying a recorded synchronous run trains the same updates: every RL metric (loss, gradient
// norm, entropy, shift, advantages, …) is identical to the run's, timings aside, even though
// pruning left only the phase-start checkpoint and the last.
func TestReplayReproducesASyncRun(t *testing.T) {
	sum := replayRun(t, 4, replaySets...)
	lines := metricLines(t, sum.Dir)
	trained := 0
	for _, m := range lines {
		if m["loss/total"] != nil && m["signal/grad_norm"].(float64) > 0 {
			trained++
		}
	}
	if trained == 0 {
		t.Fatal("no replayed step trained: the comparison proves nothing")
	}
}

// An asynchronous run replays too: the staleness bound drops the same episodes and the learner
// makes the same updates on what the producer sampled.
func TestReplayReproducesAnAsyncRun(t *testing.T) {
	replayRun(t, 6, append(asyncSets, "checkpoint.keep=1")...)
}

// replayRun trains the tiny run with sets, replays it, and fails unless all steps RL steps were
// replayed and every one compared identical to the run's.
func replayRun(t *testing.T, steps int, sets ...string) *ReplaySummary {
	t.Helper()
	run, err := NewRun(tinyConfig(t, t.TempDir(), sets...), Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	sum, err := Replay(context.Background(), run.Dir, ReplayOptions{OutDir: t.TempDir(), Opts: Options{Envs: all.Builtins()}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Steps != steps || sum.Compared != steps || sum.Mismatch != "" {
		t.Fatalf("replayed %d steps, compared %d (want %d and %d): %s", sum.Steps, sum.Compared, steps, steps, sum.Mismatch)
	}
	return sum
}

// With dynamic sampling, replay reconstructs the rounds the run drew and drops the groups it
// dropped (the tiny policy solves nothing, so every round is drawn and every group dropped).
func TestReplayReconstructsDynamicSampling(t *testing.T) {
	sum := replayRun(t, 2, "phases.rl.rl.dynamic_sampling.max_rounds=2", "phases.rl.steps=2")
	for _, m := range metricLines(t, sum.Dir) {
		if m["signal/sample_rounds"].(float64) < 1 {
			t.Fatalf("step %v: no sampling round reconstructed", m["step"])
		}
	}
}
