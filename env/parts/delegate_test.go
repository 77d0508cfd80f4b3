package parts

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/traj"
)

// scripted plays the policy of a delegating agent on parts: the root delegates each item's cost
// in one turn and sums the answers; a sub-agent looks its item up and answers price × quantity.
type scripted struct{ tok *tokenizer.Tokenizer }

var (
	costRE   = regexp.MustCompile(`cost of (\w+)`)
	recordRE = regexp.MustCompile(`price (\d+), quantity (\d+)`)
	answerRE = regexp.MustCompile(`<tool_response>(\d+)</tool_response>`)
)

func (s scripted) reply(p string) string {
	if strings.Contains(p, "You are a sub-agent") {
		if m := recordRE.FindStringSubmatch(p); m != nil {
			var a, b int
			fmt.Sscan(m[1], &a)
			fmt.Sscan(m[2], &b)
			return fmt.Sprint(a * b)
		}
		item := costRE.FindStringSubmatch(p)[1]
		return fmt.Sprintf(`<tool_call>{"name": "lookup", "arguments": {"item": "%s"}}</tool_call>`, item)
	}
	if ms := answerRE.FindAllStringSubmatch(p, -1); ms != nil {
		sum := 0
		for _, m := range ms {
			var v int
			fmt.Sscan(m[1], &v)
			sum += v
		}
		return fmt.Sprintf("Answer: %d", sum)
	}
	i := strings.LastIndex(p, "Items: ")
	names := strings.Split(strings.SplitN(p[i+len("Items: "):], "<", 2)[0], ", ")
	var b strings.Builder
	for _, n := range names {
		args, _ := json.Marshal(map[string]string{"task": "cost of " + strings.TrimSpace(n)})
		fmt.Fprintf(&b, `<tool_call>{"name": "delegate", "arguments": %s}</tool_call>`, args)
	}
	return b.String()
}

func (s scripted) Generate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	toks := append(s.tok.Encode(s.reply(s.tok.Decode(req.Prompt))), req.Stop[0])
	if len(toks) > req.MaxTokens {
		toks = toks[:req.MaxTokens]
	}
	c := infer.Completion{Tokens: toks, Logprobs: make([]float32, len(toks)), Versions: make([]int32, len(toks))}
	for i := range toks {
		c.Logprobs[i] = -0.1
	}
	return c, nil
}

// Delegating each item to a sub-agent solves parts: the sub-agents call the environment's
// lookup tool, their answers are graded as sub-tasks (reward own), and the root's critical path
// is its two turns plus the longest sub-episode's two.
func TestDelegatingSolvesParts(t *testing.T) {
	tok, err := tokenizer.Train(Spec().Corpus(200), tokenizer.TrainOptions{VocabSize: 400})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rollout.DefaultConfig()
	cfg.MaxContext, cfg.MaxTokensPerTurn = 2048, 400
	cfg.Delegate = &rollout.DelegateConfig{MaxDepth: 1, Reward: rollout.RewardOwn, Tools: []string{"lookup"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := &rollout.Runner{Tok: tok, Cfg: cfg, Gen: scripted{tok}}
	for seed := int64(0); seed < 3; seed++ {
		tr := solvedEpisode(t, r, New(2), seed)
		solvedSubEpisodes(t, tr, seed)
		st := rollout.MeasureDelegation([]*traj.Trajectory{tr})
		if st.CriticalCalls != 4 || st.ModelCalls != float64(2+2*ItemsAt(2)) {
			t.Fatalf("seed %d: critical path %v of %v model calls", seed, st.CriticalCalls, st.ModelCalls)
		}
	}
}

// A sub-agent gets only the tools delegate.tools allows: without lookup its lookups fail and
// its answer is graded wrong.
func TestDelegateToolsAreFiltered(t *testing.T) {
	tok, err := tokenizer.Train(Spec().Corpus(200), tokenizer.TrainOptions{VocabSize: 400})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rollout.DefaultConfig()
	cfg.MaxContext, cfg.MaxTokensPerTurn = 2048, 400
	cfg.Delegate = &rollout.DelegateConfig{MaxDepth: 1, Reward: rollout.RewardOwn, Tools: []string{"calculator"}}
	r := &rollout.Runner{Tok: tok, Cfg: cfg, Gen: scripted{tok}}
	tr, err := r.Episode(context.Background(), New(1), rollout.Task{Env: Name, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rollout.SubEpisodes(tr) {
		if s.Reward != 0 {
			t.Fatalf("a sub-agent without lookup: %+v", s)
		}
	}
	if strings.Contains(tok.Decode(tr.Tokens[tr.Samples[0]:]), "lookup(") {
		t.Fatal("the sub-agent's prompt lists lookup")
	}
}

// The expert's demonstrations: where the run delegates, the root hands every item to a
// sub-agent in one turn ("cost of ITEM"), each sub-agent (played by the same expert's Sub,
// through one rollout.ExpertTree) looks its item up and answers its cost, graded right, and the
// root adds the answers with the calculator and solves the task; without delegation it looks
// the items up itself and solves it too.
func TestExpertDemonstratesDelegation(t *testing.T) {
	spec := specAt(2)
	tok, err := tokenizer.Train(spec.Corpus(200), tokenizer.TrainOptions{VocabSize: 400})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rollout.DefaultConfig()
	cfg.MaxContext, cfg.MaxTokensPerTurn = 1024, 160
	cfg.Delegate = &rollout.DelegateConfig{MaxDepth: 1, Reward: rollout.RewardOwn, Tools: []string{"lookup"}, MaxTokens: 512}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for seed := int64(0); seed < 3; seed++ {
		rng := rand.New(rand.NewPCG(1, 2))
		r := &rollout.Runner{Tok: tok, Cfg: cfg, Gen: &rollout.ExpertTree{Root: spec.DelegatingExpert(seed, 0, rng, "delegate"), Tok: tok}}
		e, _ := spec.New()
		tr := solvedEpisode(t, r, e, seed)
		if n := strings.Count(tok.Decode(tr.Tokens[:tr.Samples[0]]), `"name": "delegate"`); n != ItemsAt(2) {
			t.Fatalf("seed %d: %d delegate calls for %d items", seed, n, ItemsAt(2))
		}
		solvedSubEpisodes(t, tr, seed)

		single := &rollout.Runner{Tok: tok, Cfg: rollout.DefaultConfig(), Gen: &rollout.AgentGenerator{Agent: spec.Expert(seed, 0, rng), Tok: tok}}
		single.Cfg.MaxContext, single.Cfg.MaxTokensPerTurn = 1024, 160
		e, _ = spec.New()
		tr, err = single.Episode(context.Background(), e, rollout.Task{Env: Name, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		if !rollout.Succeeded(tr) || len(rollout.SubEpisodes(tr)) != 0 || !strings.Contains(tok.Decode(tr.Tokens), `"name": "calculator"`) {
			t.Fatalf("seed %d, single agent: status %s reward %v", seed, tr.Status, tr.Reward)
		}
	}
	// A sub-task the expert did not write has no expert.
	x := spec.DelegatingExpert(1, 0, rand.New(rand.NewPCG(1, 2)), "delegate")
	if _, err := x.Sub("cost of nothing"); err == nil {
		t.Fatal("a sub-task naming no item got an expert")
	}
}

// solvedEpisode plays task seed of e through r and fails the test unless the episode is valid
// and solved.
func solvedEpisode(t *testing.T, r *rollout.Runner, e env.Env, seed int64) *traj.Trajectory {
	t.Helper()
	tr, err := r.Episode(context.Background(), e, rollout.Task{Env: Name, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	if !rollout.Succeeded(tr) {
		t.Fatalf("seed %d: status %s (%q) reward %v", seed, tr.Status, tr.Error, tr.Reward)
	}
	return tr
}

// solvedSubEpisodes fails the test unless the level-2 episode tr delegated one sub-episode per
// item, each solved in two calls (the lookup and the answer).
func solvedSubEpisodes(t *testing.T, tr *traj.Trajectory, seed int64) {
	t.Helper()
	subs := rollout.SubEpisodes(tr)
	if len(subs) != ItemsAt(2) {
		t.Fatalf("seed %d: %d sub-episodes for %d items", seed, len(subs), ItemsAt(2))
	}
	for _, s := range subs {
		if s.Status != traj.StatusOK || s.Reward != 1 || s.Calls != 2 {
			t.Fatalf("seed %d: sub-episode %+v", seed, s)
		}
	}
}
