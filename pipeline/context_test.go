package pipeline

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

// TestRunLogsContextFolding: a run that folds contexts (here the scaffold asks for a summary
// past 40 tokens, which every calc episode passes) logs the folding figures at every RL step and
// every evaluation, and its replay reproduces them.
func TestRunLogsContextFolding(t *testing.T) {
	var out bytes.Buffer
	sets := append(slices.Clone(replaySets), "rollout.context={trigger: threshold, max_tokens: 40, keep_turns: 1}")
	run, err := NewRun(tinyConfig(t, t.TempDir(), sets...), Options{Envs: all.Builtins(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	steps, evals, requests := 0, 0, 0.0
	for _, m := range metricLines(t, run.Dir) {
		if m["eval"] != nil {
			evals++
			if _, ok := m["eval/context_folds_per_episode"].(float64); !ok {
				t.Fatalf("eval line without the folding figures: %v", m)
			}
			continue
		}
		if m["phase"] != "rl" {
			continue
		}
		steps++
		for _, k := range []string{"folds_per_episode", "tokens_before_fold", "tokens_after_fold", "success_folded", "success_unfolded", "folded_episodes"} {
			if _, ok := m["rollout/context_"+k].(float64); !ok {
				t.Fatalf("step %v: no rollout/context_%s: %v", m["step"], k, m)
			}
		}
		requests += m["rollout/context_fold_requests_per_episode"].(float64)
	}
	if steps != 4 || evals == 0 || requests == 0 {
		t.Fatalf("%d rl steps, %d evaluations, %v requests for a summary (every calc observation passes 40 tokens)", steps, evals, requests)
	}
	if !strings.Contains(out.String(), "context: ") {
		t.Fatalf("the evaluation does not report folding:\n%s", out.String())
	}
	sum, err := Replay(context.Background(), run.Dir, ReplayOptions{OutDir: t.TempDir(), Opts: Options{Envs: all.Builtins()}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Steps != 4 || sum.Compared != 4 || sum.Mismatch != "" {
		t.Fatalf("replayed %d steps, compared %d: %s", sum.Steps, sum.Compared, sum.Mismatch)
	}
}
