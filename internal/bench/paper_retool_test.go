package bench

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

// tinySets shrink both arms alike to a run of a second.
func tinySets(runs string) []string {
	return []string{
		"runs_dir=" + runs,
		"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64", "model.max_seq=320",
		"rollout.max_context=320", "rollout.engine_slots=16", "tokenizer.vocab_size=320", "tokenizer.corpus_samples=200",
		"phases.sft.steps=6", "phases.sft.optim.warmup=2", "phases.sft.sft.demos=64", "phases.sft.sft.batch_size=8",
		"phases.rl.steps=2", "phases.rl.optim.warmup=1", "phases.rl.rl.groups_per_step=2", "phases.rl.rl.group_size=4",
		"eval.tasks=8",
	}
}

// The ReTool comparison runs both arms per seed and tabulates each over its runs.
func TestPaperRetool(t *testing.T) {
	var out strings.Builder
	err := PaperRetool(context.Background(), &out, RetoolOptions{Envs: all.Builtins(), Seeds: "1,2", Set: tinySets(t.TempDir()), Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, arm := range retoolArms {
		row := regexp.MustCompile(`(?m)^` + arm + `\s+2\s+\d+\.\d ± \d+\.\d\s+\d+\.\d ± \d+\.\d\s+\d+\.\d ± \d+\.\d$`)
		if !row.MatchString(out.String()) {
			t.Errorf("no row of 2 runs for %s:\n%s", arm, out.String())
		}
	}
	if err := PaperRetool(context.Background(), &out, RetoolOptions{Envs: all.Builtins(), Seeds: "x", Quiet: true}); err == nil {
		t.Error("a bad seed was accepted")
	}
}
