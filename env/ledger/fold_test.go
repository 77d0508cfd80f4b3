package ledger

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/traj"
)

// At level 3 the history (8 pages) outgrows max_context: the expert played without folding is truncated,
// and with the scaffold's request for a summary it folds its running balance and solves the
// task in several samples, each within max_context.
func TestExpertFoldsWhereHistoryOutgrowsContext(t *testing.T) {
	spec := specAt(3)
	tok, err := tokenizer.Train(spec.Corpus(300), tokenizer.TrainOptions{VocabSize: 400})
	if err != nil {
		t.Fatal(err)
	}
	run := func(fc *rollout.ContextConfig, seed int64) *traj.Trajectory {
		cfg := rollout.DefaultConfig()
		cfg.MaxTurns, cfg.MaxContext, cfg.MaxTokensPerTurn = 16, 1024, 96
		cfg.Context = fc
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		runner := &rollout.Runner{Tok: tok, Cfg: cfg}
		runner.Gen = &rollout.AgentGenerator{Agent: spec.Expert(seed, 0, rand.New(rand.NewPCG(1, 2))), Tok: tok, Version: 1}
		e, _ := spec.New()
		tr, err := runner.Episode(context.Background(), e, rollout.Task{Env: Name, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Validate(); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	truncated, solved := 0, 0
	for seed := int64(0); seed < 4; seed++ {
		if tr := run(nil, seed); tr.Status == traj.StatusTruncated {
			truncated++
		}
		tr := run(&rollout.ContextConfig{Trigger: rollout.TriggerThreshold, MaxTokens: 600}, seed)
		folds, _ := rollout.Folds(tr)
		t.Logf("seed %d: status %s %q reward %v folds %v samples %d turns %d", seed, tr.Status, tr.Error, tr.Reward, folds, tr.NumSamples(), len(tr.Turns))
		if rollout.Succeeded(tr) && len(folds) > 0 && tr.NumSamples() == len(folds)+1 {
			solved++
		}
		for k := range tr.NumSamples() {
			if lo, hi := tr.Sample(k); hi-lo > 1024 {
				t.Fatalf("seed %d: sample %d has %d tokens", seed, k, hi-lo)
			}
		}
	}
	if truncated != 4 || solved != 4 {
		t.Fatalf("without folding %d of 4 truncated, with folding %d of 4 solved; want 4 and 4", truncated, solved)
	}
}
