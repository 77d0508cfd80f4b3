package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// sumEnv asks for the sum of two pairs; the answer is right when it names the total. It grades
// the sub-tasks "add a b".
type sumEnv struct{}

func (sumEnv) Reset(ctx context.Context, seed int64) (env.Observation, error) {
	return env.Observation{System: "You add.", Text: "add 2 3 and 4 5, then sum"}, nil
}

func (sumEnv) Step(ctx context.Context, action string) (env.Transition, error) {
	r := 0.0
	if strings.Contains(action, "14") {
		r = 1
	}
	return env.Transition{Reward: r, Done: true, Role: traj.RoleEnv}, nil
}

var addRE = regexp.MustCompile(`add (\d+) (\d+)`)

func (sumEnv) GradeSubtask(task, answer string) (float64, bool) {
	m := addRE.FindStringSubmatch(task)
	if m == nil {
		return 0, false
	}
	a, _ := strconv.Atoi(m[1])
	b, _ := strconv.Atoi(m[2])
	if strings.TrimSpace(answer) == strconv.Itoa(a+b) {
		return 1, true
	}
	return 0, true
}

func delegateCall(task string) string {
	b, _ := json.Marshal(map[string]any{"name": "delegate", "arguments": map[string]string{"task": task}})
	return "<tool_call>" + string(b) + "</tool_call>"
}

// funcGen answers each request with reply(prompt text), safe for concurrent use.
type funcGen struct {
	t     *testing.T
	reply func(ctx context.Context, prompt string) (string, error)
	mu    sync.Mutex
	calls int
}

func (g *funcGen) Generate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	text, err := g.reply(ctx, tok(g.t).Decode(req.Prompt))
	if err != nil {
		return infer.Completion{}, err
	}
	toks := append(tok(g.t).Encode(text), req.Stop[0])
	if len(toks) > req.MaxTokens {
		toks = toks[:req.MaxTokens]
	}
	c := infer.Completion{Tokens: toks, Logprobs: make([]float32, len(toks)), Versions: make([]int32, len(toks))}
	for i := range toks {
		c.Logprobs[i], c.Versions[i] = -0.5, 4
	}
	return c, nil
}

// lastUser is the text of the last user message of a ChatML prompt.
func lastUser(p string) string {
	i := strings.LastIndex(p, "<|im_start|>user\n")
	if i < 0 {
		return ""
	}
	s := p[i+len("<|im_start|>user\n"):]
	if j := strings.Index(s, "<|im_end|>"); j >= 0 {
		s = s[:j]
	}
	return s
}

// adder is the policy of the tests: the root delegates both additions in one turn and sums the
// answers; a sub-agent adds (after waiting, when wait is set, for its sibling to be asked too).
func adder(wait *sync.WaitGroup) func(ctx context.Context, p string) (string, error) {
	return func(ctx context.Context, p string) (string, error) {
		if strings.Contains(p, subAgentPrompt) {
			if wait != nil && !strings.Contains(p, "<|im_start|>assistant\n<") {
				wait.Done()
				done := make(chan struct{})
				go func() { wait.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					return "", errors.New("the sibling sub-episode never started: delegations do not run in parallel")
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
			m := addRE.FindStringSubmatch(lastUser(p))
			if m == nil {
				return "no idea", nil
			}
			a, _ := strconv.Atoi(m[1])
			b, _ := strconv.Atoi(m[2])
			return strconv.Itoa(a + b), nil
		}
		if !strings.Contains(p, "<tool_response>") {
			return delegateCall("add 2 3") + delegateCall("add 4 5"), nil
		}
		return "14", nil
	}
}

func delegateRunner(t *testing.T, dc *DelegateConfig, reply func(context.Context, string) (string, error)) (*Runner, *funcGen) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Delegate = dc
	cfg.MaxContext, cfg.MaxTokensPerTurn = 2048, 400
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	g := &funcGen{t: t, reply: reply}
	return &Runner{Tok: tok(t), Cfg: cfg, Gen: g}, g
}

// solvedSum plays sum's task of seed 1 with r and fails the test unless the episode is valid and
// solved.
func solvedSum(t *testing.T, r *Runner) *traj.Trajectory {
	t.Helper()
	tr, err := r.Episode(context.Background(), sumEnv{}, Task{Env: "sum", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != traj.StatusOK || tr.Reward != 1 {
		t.Fatalf("status %s (%q) reward %v", tr.Status, tr.Error, tr.Reward)
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestDelegateParallel(t *testing.T) {
	var wait sync.WaitGroup
	wait.Add(2)
	r, g := delegateRunner(t, &DelegateConfig{MaxDepth: 1, Reward: RewardOwn}, adder(&wait))
	tr := solvedSum(t, r)
	if tc := tr.Turns[0].ToolCalls; len(tc) != 2 || tc[0].Result != "5" || tc[1].Result != "9" {
		t.Fatalf("the delegations answered %+v", tc)
	}
	subs := SubEpisodes(tr)
	if len(subs) != 2 || tr.NumSamples() != 3 {
		t.Fatalf("%d sub-episodes, %d samples", len(subs), tr.NumSamples())
	}
	for k, s := range subs {
		if s.Parent != tr.ID || s.Depth != 1 || s.Turn != 0 || s.Status != traj.StatusOK || s.Samples != 1 || s.Reward != 1 || s.Calls != 1 || s.Critical != 1 {
			t.Fatalf("sub-episode %d: %+v", k, s)
		}
		lo, hi := tr.Sample(k + 1)
		if s.Start != lo || s.End != hi {
			t.Fatalf("sub-episode %d spans %d..%d, its sample %d..%d", k, s.Start, s.End, lo, hi)
		}
		text := tok(t).Decode(tr.Tokens[lo:hi])
		if !strings.Contains(text, subAgentPrompt) || !strings.Contains(text, []string{"add 2 3", "add 4 5"}[k]) {
			t.Fatalf("sub-episode %d's tokens: %q", k, text)
		}
		// Its one turn is trained and carries its graded reward.
		last := tr.Turns[len(tr.Turns)-2+k]
		if !tr.LossMask[last.Start] || last.Reward != 1 {
			t.Fatalf("sub-episode %d's turn %+v", k, last)
		}
	}
	meta := map[string]string{}
	for _, kv := range tr.Meta {
		meta[kv.Key] = kv.Value
	}
	if meta[MetaModelCalls] != "4" || meta[MetaCriticalCalls] != "3" || g.calls != 4 {
		t.Fatalf("model calls %s, critical %s (generator called %d times); want 4 and 3", meta[MetaModelCalls], meta[MetaCriticalCalls], g.calls)
	}
	st := MeasureDelegation([]*traj.Trajectory{tr})
	if st.Delegated != 1 || st.SubEpisodesPerEpisode != 2 || st.CriticalCalls != 3 || st.ModelCalls != 4 || st.SuccessDelegated != 1 || st.MaxDepth != 1 {
		t.Fatalf("stats %+v", st)
	}
	if SubEpisodeSamples(tr) != 2 {
		t.Fatalf("sub-episode samples %d", SubEpisodeSamples(tr))
	}
	checkBinaryRoundTrip(t, tr)
}

// TestDelegateParentReward: with reward parent the sub-episodes' turns carry no reward of
// their own.
func TestDelegateParentReward(t *testing.T) {
	r, _ := delegateRunner(t, &DelegateConfig{MaxDepth: 1}, adder(nil))
	tr, err := r.Episode(context.Background(), sumEnv{}, Task{Env: "sum", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tu := range tr.Turns {
		if tu.Reward != 0 {
			t.Fatalf("turn %+v has a reward with reward parent", tu)
		}
	}
	for _, s := range SubEpisodes(tr) {
		if s.Reward != 0 {
			t.Fatalf("sub-episode %+v", s)
		}
	}
}

// TestDelegateNested: a sub-agent delegates in turn up to max_depth; past it the call is an
// error observation.
func TestDelegateNested(t *testing.T) {
	reply := func(ctx context.Context, p string) (string, error) {
		switch {
		case strings.Contains(p, subAgentPrompt) && !strings.Contains(p, "<tool_response>"):
			return delegateCall("deeper " + lastUser(p)), nil
		case strings.Contains(p, subAgentPrompt):
			return "done", nil
		case !strings.Contains(p, "<tool_response>"):
			return delegateCall("go"), nil
		}
		return "14", nil
	}
	r, _ := delegateRunner(t, &DelegateConfig{MaxDepth: 2}, reply)
	tr, err := r.Episode(context.Background(), sumEnv{}, Task{Env: "sum", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	subs := SubEpisodes(tr)
	if len(subs) != 2 || subs[0].Depth != 1 || subs[1].Depth != 2 || subs[1].Parent != subs[0].ID {
		t.Fatalf("sub-episodes %+v", subs)
	}
	if subs[1].Start < subs[0].Start || subs[1].End > subs[0].End || subs[0].Samples != 2 || tr.NumSamples() != 3 {
		t.Fatalf("the depth-2 sub-episode %+v is not inside its parent %+v (samples %v)", subs[1], subs[0], tr.Samples)
	}
	// The depth-2 sub-agent was refused: its delegate call came back as an error.
	text := tok(t).Decode(tr.Tokens[subs[1].Start:subs[1].End])
	if !strings.Contains(text, "delegation is limited to depth 2") || strings.Contains(text, "delegate(task)") {
		t.Fatalf("depth-2 sub-episode: %q", text)
	}
	// The depth-1 sub-agent's 2 turns, and below its first the depth-2 sub-agent's 2 (the
	// refused call and the answer).
	if subs[0].Critical != 4 || subs[0].Calls != 4 {
		t.Fatalf("the depth-1 sub-episode's critical path is %d calls of %d, want 4 of 4", subs[0].Critical, subs[0].Calls)
	}
}

func TestDelegateBadInput(t *testing.T) {
	for _, c := range []struct {
		name, action, want string
		dc                 DelegateConfig
	}{
		{"empty task", delegateCall(" "), ErrDelegateEmpty.Error(), DelegateConfig{MaxDepth: 1}},
		{"no task", `<tool_call>{"name":"delegate","arguments":{}}</tool_call>`, "no task", DelegateConfig{MaxDepth: 1}},
		{"unknown argument", `<tool_call>{"name":"delegate","arguments":{"task":"x","how":1}}</tool_call>`, "arguments must be", DelegateConfig{MaxDepth: 1}},
		{"mixed", delegateCall("add 1 1") + `<tool_call>{"name":"count"}</tool_call>`, "cannot share a turn", DelegateConfig{MaxDepth: 1}},
		{"count limit", delegateCall("add 1 1") + delegateCall("add 2 2"), "limit of 1 sub-episodes", DelegateConfig{MaxDepth: 1, MaxPerEpisode: 1}},
		{"per turn", delegateCall("add 1 1") + delegateCall("add 2 2"), "too many tool calls", DelegateConfig{MaxDepth: 1, MaxPerTurn: 1}},
		{"context", delegateCall("add 1 1"), "without an answer", DelegateConfig{MaxDepth: 1, MaxTokens: 20}},
	} {
		t.Run(c.name, func(t *testing.T) {
			first := true
			var mu sync.Mutex
			reply := func(ctx context.Context, p string) (string, error) {
				if strings.Contains(p, subAgentPrompt) {
					return "2", nil
				}
				mu.Lock()
				defer mu.Unlock()
				if first {
					first = false
					return c.action, nil
				}
				return "14", nil
			}
			r, _ := delegateRunner(t, &c.dc, reply)
			tr := solvedSum(t, r)
			found := false
			for _, tc := range tr.Turns[0].ToolCalls {
				found = found || strings.Contains(tc.Error, c.want)
			}
			if !found {
				t.Fatalf("tool calls %+v, want an error with %q", tr.Turns[0].ToolCalls, c.want)
			}
		})
	}
}

// TestDelegateChildFails: a sub-episode whose generator fails is an error observation; the
// parent goes on and the failed sub-episode's tokens are not trained.
func TestDelegateChildFails(t *testing.T) {
	reply := func(ctx context.Context, p string) (string, error) {
		if strings.Contains(p, subAgentPrompt) {
			return "", errors.New("server lost")
		}
		if !strings.Contains(p, "<tool_response>") {
			return delegateCall("add 1 1"), nil
		}
		return "14", nil
	}
	r, _ := delegateRunner(t, &DelegateConfig{MaxDepth: 1}, reply)
	tr, err := r.Episode(context.Background(), sumEnv{}, Task{Env: "sum", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != traj.StatusOK || tr.NumSamples() != 1 {
		t.Fatalf("status %s samples %d", tr.Status, tr.NumSamples())
	}
	if tc := tr.Turns[0].ToolCalls; len(tc) != 1 || !strings.Contains(tc[0].Error, "failed (env_error)") {
		t.Fatalf("tool calls %+v", tc)
	}
	subs := SubEpisodes(tr)
	if len(subs) != 1 || subs[0].Status != traj.StatusEnvError || subs[0].Start != subs[0].End {
		t.Fatalf("sub-episodes %+v", subs)
	}
	if st := MeasureDelegation([]*traj.Trajectory{tr}); st.FailedSubEpisodes != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestDelegateCancel: cancelling the parent mid-delegation cancels its sub-episodes and the
// episode returns at once.
func TestDelegateCancel(t *testing.T) {
	started := make(chan struct{}, 2)
	reply := func(ctx context.Context, p string) (string, error) {
		if strings.Contains(p, subAgentPrompt) {
			started <- struct{}{}
			<-ctx.Done()
			return "", ctx.Err()
		}
		return delegateCall("a") + delegateCall("b"), nil
	}
	r, _ := delegateRunner(t, &DelegateConfig{MaxDepth: 1}, reply)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		<-started
		cancel()
	}()
	done := make(chan error, 1)
	go func() {
		_, err := r.Episode(ctx, sumEnv{}, Task{Env: "sum", Seed: 1})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want cancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the episode did not return after its context was cancelled")
	}
}

// TestDelegateTimeout: a sub-episode that runs past the episode timeout ends the parent as a
// timeout, never a hang.
func TestDelegateTimeout(t *testing.T) {
	reply := func(ctx context.Context, p string) (string, error) {
		if strings.Contains(p, subAgentPrompt) {
			<-ctx.Done()
			return "", ctx.Err()
		}
		return delegateCall("a"), nil
	}
	r, _ := delegateRunner(t, &DelegateConfig{MaxDepth: 1}, reply)
	r.Cfg.EpisodeTimeout = 50 * time.Millisecond
	tr, err := r.Episode(context.Background(), sumEnv{}, Task{Env: "sum", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != traj.StatusTimeout {
		t.Fatalf("status %s (%q)", tr.Status, tr.Error)
	}
}

func TestDelegateConfigValidate(t *testing.T) {
	base := DefaultConfig()
	for _, c := range []struct {
		dc   DelegateConfig
		want string
	}{
		{DelegateConfig{MaxDepth: 1}, ""},
		{DelegateConfig{MaxDepth: 2, MaxPerTurn: 3, MaxPerEpisode: 9, MaxTokens: 200, Reward: "own", Tools: []string{"calculator"}}, ""},
		{DelegateConfig{}, "max_depth"},
		{DelegateConfig{MaxDepth: 9}, "max_depth"},
		{DelegateConfig{MaxDepth: 1, MaxPerTurn: 99}, "max_per_turn"},
		{DelegateConfig{MaxDepth: 1, MaxPerEpisode: -1}, "max_per_episode"},
		{DelegateConfig{MaxDepth: 1, MaxTokens: base.MaxContext + 1}, "max_tokens"},
		{DelegateConfig{MaxDepth: 1, Reward: "mine"}, "reward"},
		{DelegateConfig{MaxDepth: 1, Tools: []string{"a", "a"}}, "tools"},
		{DelegateConfig{MaxDepth: 1, Tool: "fold"}, "both"},
	} {
		cfg := base
		cfg.Context = &ContextConfig{}
		cfg.Delegate = &c.dc
		err := cfg.Validate()
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.dc, err, c.want)
		}
	}
}

func FuzzDelegateArgs(f *testing.F) {
	for _, s := range []string{`{"task":"x"}`, `{}`, `{"task":""}`, `{"task":1}`, `{"task":"a","b":1}`, `[`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		task, err := parseDelegateArgs(json.RawMessage(s))
		if err == nil && (task == "" || strings.TrimSpace(task) != task) {
			t.Fatalf("task %q accepted from %q", task, s)
		}
		if err != nil && !errors.Is(err, ErrDelegateArgs) && !errors.Is(err, ErrDelegateEmpty) {
			t.Fatalf("error %v", err)
		}
	})
}

func FuzzParseSubEpisode(f *testing.F) {
	f.Add(SubEpisode{ID: "a.1", Parent: "a", Depth: 1, Start: 3, End: 9, Samples: 1, Calls: 2, Critical: 2}.String())
	f.Add("id=x parent=y")
	f.Add("")
	f.Fuzz(func(t *testing.T, v string) {
		s, err := ParseSubEpisode(v)
		if err != nil {
			return
		}
		back, err := ParseSubEpisode(s.String())
		if err != nil || back != s {
			t.Fatalf("%q → %+v → %q → %+v, %v", v, s, s.String(), back, err)
		}
	})
}

// TestDelegateToolLatency: a sub-agent's turn that calls the environment's tools waits the
// environment's simulated latency (its draws fixed by the task seed and the sub-episode's place),
// outside the root's tool lock, so the sub-agents of one turn wait at once: the delegation turn
// takes about one latency, not one per sub-agent; an answer waits none.
func TestDelegateToolLatency(t *testing.T) {
	calc, err := tool.NewCalculator(tool.CalcLimits{})
	if err != nil {
		t.Fatal(err)
	}
	lat := env.LatencyConfig{Dist: "lognormal", Median: 150 * time.Millisecond, P99OverP50: 1.5}
	r, _ := delegateRunner(t, &DelegateConfig{MaxDepth: 1}, func(ctx context.Context, p string) (string, error) {
		if strings.Contains(p, subAgentPrompt) {
			m := addRE.FindStringSubmatch(lastUser(p))
			if strings.Contains(p, "<tool_response>") {
				i := strings.LastIndex(p, "<tool_response>") + len("<tool_response>")
				return p[i : i+strings.Index(p[i:], "</tool_response>")], nil
			}
			b, _ := json.Marshal(map[string]any{"name": "calculator", "arguments": map[string]string{"expression": m[1] + "+" + m[2]}})
			return "<tool_call>" + string(b) + "</tool_call>", nil
		}
		if !strings.Contains(p, "<tool_response>") {
			return delegateCall("add 2 3") + delegateCall("add 4 5") + delegateCall("add 1 1") + delegateCall("add 0 0"), nil
		}
		return "14", nil
	})
	e := env.WithLatency(env.WithTools(sumEnv{}, []tool.Tool{calc}, env.ToolLimits{}), lat)
	play := func() *traj.Trajectory {
		tr, err := r.Episode(context.Background(), e, Task{Env: "sum", Seed: 7})
		if err != nil || tr.Status != traj.StatusOK || tr.Reward != 1 {
			t.Fatalf("status %s (%q) reward %v, err %v", tr.Status, tr.Error, tr.Reward, err)
		}
		return tr
	}
	tr := play()
	subs := SubEpisodes(tr)
	if len(subs) != 4 {
		t.Fatalf("%d sub-episodes", len(subs))
	}
	// Each sub-agent waited its own draw, after its one tool call and not after its answer.
	var sum, longest time.Duration
	root := &delegateRoot{id: Task{Env: "sum", Seed: 7}.id()}
	for k, s := range subs {
		d := env.ToolLatencies(lat, root.subLatencySeed(7, s.ID), 1)[0]
		sum, longest = sum+d, max(longest, d)
		if k > 0 && d == env.ToolLatencies(lat, root.subLatencySeed(7, subs[0].ID), 1)[0] {
			t.Errorf("sub-episodes %s and %s draw the same latency %v", s.ID, subs[0].ID, d)
		}
	}
	if answers := tr.Turns[0].ToolCalls; answers[0].Result != "5" || answers[2].Result != "2" {
		t.Fatalf("the delegations answered %+v", answers)
	}
	// The parent's environment time is its one Step's latency (the answer; the delegation turn
	// does not reach the environment) and the delegation turn: at least the longest sub-agent
	// draw, and well under their sum (a serial wait).
	own := env.LatencyOfEpisode(lat, 7, 1)[0]
	if got := tr.Timings.Env - own; got < longest || got > (longest+sum)/2 {
		t.Fatalf("the delegation turn took %v; the sub-agents' latencies: longest %v, sum %v", got, longest, sum)
	}
	// Another play of the same task draws the same latencies: its sub-episodes' ids and seeds are
	// the same.
	if got := SubEpisodes(play()); got[3].ID != subs[3].ID {
		t.Fatalf("sub-episode ids %v and %v", got, subs)
	}
}
