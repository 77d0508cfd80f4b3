package pipeline

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// TestRunLogsContextFoldingAndDelegation: a run that folds contexts (here the scaffold asks for
// a summary past 40 tokens, which every calc observation passes) and may delegate logs the
// folding and delegation figures at every RL step and every evaluation, and its replay
// reproduces them.
func TestRunLogsContextFoldingAndDelegation(t *testing.T) {
	var out bytes.Buffer
	// A context of 640 tokens holds calc's expert episodes with the summary requests appended (the
	// expert does not fold), so the start check finds episodes that can succeed.
	sets := append(slices.Clone(replaySets), "model.max_seq=640", "rollout.max_context=640", "rollout.context={trigger: threshold, max_tokens: 40, keep_turns: 1}",
		"rollout.delegate={max_depth: 1, max_tokens: 200, reward: own}")
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
			_, ok := m["eval/delegate_critical_calls"].(float64)
			if _, ok2 := m["eval/context_folds_per_episode"].(float64); !ok || !ok2 {
				t.Fatalf("eval line without the folding figures: %v", m)
			}
			continue
		}
		if m["phase"] != "rl" {
			continue
		}
		steps++
		for _, k := range []string{"context_folds_per_episode", "context_tokens_before_fold", "context_tokens_after_fold", "context_success_folded", "context_success_unfolded", "context_folded_episodes",
			"delegate_sub_episodes_per_episode", "delegate_model_calls", "delegate_critical_calls", "delegate_success_delegated", "delegate_success_alone", "delegate_max_depth", "template_splits"} {
			if _, ok := m["rollout/"+k].(float64); !ok {
				t.Fatalf("step %v: no rollout/%s: %v", m["step"], k, m)
			}
		}
		if c := m["rollout/delegate_critical_calls"].(float64); c < 1 {
			t.Fatalf("step %v: critical path of %v model calls", m["step"], c)
		}
		requests += m["rollout/context_fold_requests_per_episode"].(float64)
	}
	// Each RL step logs its episodes' mean wall time (metricLines leaves timings out).
	data, err := os.ReadFile(filepath.Join(run.Dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(data, []byte(`"time/episode_s":`)); n != 4 {
		t.Fatalf("%d lines with time/episode_s, want one a step", n)
	}
	if steps != 4 || evals == 0 || requests == 0 {
		t.Fatalf("%d rl steps, %d evaluations, %v requests for a summary (every calc observation passes 40 tokens)", steps, evals, requests)
	}
	if !strings.Contains(out.String(), "context: ") || !strings.Contains(out.String(), "delegation: ") {
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

// rollout.delegate.tools naming a tool no environment of the phase has would do nothing: the RL
// phase refuses to start, naming the tools there are.
func TestDelegateToolsMustExist(t *testing.T) {
	sets := append(slices.Clone(replaySets), "rollout.delegate={max_depth: 1, tools: [lookup]}")
	run, err := NewRun(tinyConfig(t, t.TempDir(), sets...), Options{Envs: all.Builtins(), Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Train(context.Background())
	if err == nil || !strings.Contains(err.Error(), `rollout.delegate.tools names "lookup", a tool of none of the phase's environments (their tools: calculator)`) {
		t.Fatalf("err = %v", err)
	}
}

// Where the run delegates and the phase's environment has a delegating expert (parts), the
// supervised phase's demonstrations delegate: every successful one hands its items to
// sub-agents, whose sub-episodes are recorded in it.
func TestDemonstrationsDelegateWhereTheExpertCan(t *testing.T) {
	sets := []string{"phases.sft.envs.0.name=parts", "phases.rl.envs.0.name=parts", "model.max_seq=768", "rollout.max_context=768",
		"rollout.max_tokens_per_turn=128", "phases.sft.sft.noise=0", "phases.rl.steps=1",
		"rollout.delegate={max_depth: 1, max_tokens: 384, reward: own, tools: [lookup]}"}
	run, err := NewRun(tinyConfig(t, t.TempDir(), sets...), Options{Envs: all.Builtins(), Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	demos, delegated := 0, 0
	for _, tr := range readTrajs(t, run.Dir) {
		if !slices.ContainsFunc(tr.Meta, func(kv traj.KV) bool { return kv.Key == "phase" && kv.Value == "sft" }) {
			continue
		}
		demos++
		if rollout.Succeeded(tr) && len(rollout.SubEpisodes(tr)) >= 2 {
			delegated++
		}
	}
	if demos != 64 || delegated < demos/2 {
		t.Fatalf("%d of %d demonstrations delegated and succeeded", delegated, demos)
	}
}
