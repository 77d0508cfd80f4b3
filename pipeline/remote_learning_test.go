package pipeline

import (
	"context"
	"fmt"
	"testing"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/remote/remotetest"
)

// The long tier: the calc preset's recipe (cold start on the expert's demonstrations, then GRPO)
// on the Python reference environment over HTTP learns it: held-out success rises well above the
// untrained policy's after the supervised phase, and RL raises it further (0% → 48% → 93% held-out sampled pass@1 when written).
func TestRemoteEnvLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("long tier: a run of a few thousand steps against the Python reference environment")
	}
	u := remotetest.StartArith(t)
	entry := fmt.Sprintf("[{name: arith, weight: 1, remote: {url: %q}}]", u)
	c, err := config.Load(testEnvs(), "calc", "", []string{
		"runs_dir=" + t.TempDir(), "name=arith",
		"phases.sft.envs=" + entry, "phases.rl.envs=[{name: arith, weight: 1}]",
		"phases.sft.steps=1500", "phases.rl.steps=30", "eval.tasks=100", "eval.samples=2",
		"tokenizer.corpus_samples=2000",
	})
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuilder
	run, err := NewRun(c, Options{Envs: testEnvs(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := run.Train(context.Background())
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Logf("%s", out.String())
	before, sft, rl := successOf(sum.Evals[0]), successOf(sum.Evals[1]), successOf(sum.Evals[2])
	t.Logf("held-out success: untrained %.2f, after SFT %.2f, after RL %.2f", before, sft, rl)
	if sft < before+0.3 || rl < sft+0.1 {
		t.Fatalf("held-out success: untrained %.2f, after SFT %.2f, after RL %.2f: want SFT ≥ untrained + 0.3 and RL ≥ SFT + 0.1", before, sft, rl)
	}
}

// successOf is the sampled pass@1 of the report's first environment (greedy when not sampled).
func successOf(rep EvalReport) float64 {
	if len(rep.Envs) == 0 {
		return 0
	}
	if p := rep.Envs[0].Pass1Sampled; p != nil {
		return *p
	}
	return rep.Envs[0].Pass1Greedy
}
