package ledger

import (
	"context"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env"
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
		tr := expertEpisode(t, spec, tok, 16, 1024, fc, seed)
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

// At the settings of `agentrl bench paper folding` (the ledger preset's max_context 768 and 15
// turns, a fold requested past 400 tokens, no turns kept), the expert folds after the pages
// that take the context past the threshold and solves every task of the default mix (2-6
// pages), each sample within max_context; without folding, the ledgers of more than three pages
// are truncated.
func TestExpertFoldsAtBenchSettings(t *testing.T) {
	spec := Spec()
	tok, err := tokenizer.Train(spec.Corpus(300), tokenizer.DefaultTrainOptions(512)) // as a run trains its own
	if err != nil {
		t.Fatal(err)
	}
	run := func(fc *rollout.ContextConfig, seed int64) *traj.Trajectory {
		return expertEpisode(t, spec, tok, 15, 768, fc, seed)
	}
	long := 0
	for seed := int64(0); seed < 12; seed++ {
		pages := len(newTask(seed, 0).pages)
		tr := run(&rollout.ContextConfig{Trigger: rollout.TriggerBoth, MaxTokens: 400, KeepTurns: 0, MaxSummaryTokens: 32}, seed)
		folds, _ := rollout.Folds(tr)
		if !rollout.Succeeded(tr) || len(folds) == 0 {
			t.Fatalf("seed %d (%d pages): folding: status %s %q reward %v folds %d", seed, pages, tr.Status, tr.Error, tr.Reward, len(folds))
		}
		for k := range tr.NumSamples() {
			if lo, hi := tr.Sample(k); hi-lo > 768 {
				t.Fatalf("seed %d: sample %d has %d tokens", seed, k, hi-lo)
			}
		}
		if pages > 3 {
			long++
			if tr := run(nil, seed); tr.Status != traj.StatusTruncated {
				t.Fatalf("seed %d (%d pages): without folding: status %s", seed, pages, tr.Status)
			}
		}
	}
	if long == 0 {
		t.Fatal("no ledger of more than three pages among the seeds")
	}
}

// The statement's last balance is the answer: the last "balance N" of the question and the
// pages (each closes with it, the last with "closing balance"), as the expert's summaries write
// it too.
func TestAnswerIsTheLastBalance(t *testing.T) {
	re := regexp.MustCompile(`balance (-?\d+)`)
	for seed := int64(0); seed < 50; seed++ {
		for _, l := range append([]int{0}, Levels...) {
			tk := newTask(seed, l)
			ms := re.FindAllStringSubmatch(tk.question()+"\n"+strings.Join(tk.pages, "\n"), -1)
			if len(ms) == 0 || ms[len(ms)-1][1] != strconv.Itoa(tk.balance) {
				t.Fatalf("seed %d level %d: last balance %v, answer %d", seed, l, ms[len(ms)-1:], tk.balance)
			}
			for p, page := range tk.pages {
				want := tk.account + " balance " + strconv.Itoa(tk.after[p])
				if p == len(tk.pages)-1 {
					want = tk.account + " closing balance " + strconv.Itoa(tk.after[p])
				}
				if !strings.HasSuffix(page, "\n"+want) {
					t.Fatalf("seed %d level %d page %d: it does not close with %q", seed, l, p+1, want)
				}
			}
		}
	}
}

// expertEpisode plays spec's expert on task seed (level 0's draw of the expert's noise) under a
// rollout of maxTurns turns, maxContext tokens, 96 tokens a turn and the context scaffold fc.
func expertEpisode(t *testing.T, spec env.Spec, tok *tokenizer.Tokenizer, maxTurns, maxContext int, fc *rollout.ContextConfig, seed int64) *traj.Trajectory {
	t.Helper()
	cfg := rollout.DefaultConfig()
	cfg.MaxTurns, cfg.MaxContext, cfg.MaxTokensPerTurn = maxTurns, maxContext, 96
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
	return tr
}
