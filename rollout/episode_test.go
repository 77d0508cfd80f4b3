package rollout

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/traj"
)

var (
	testTokOnce sync.Once
	testTok     *tokenizer.Tokenizer
)

func tok(t testing.TB) *tokenizer.Tokenizer {
	testTokOnce.Do(func() {
		corpus := []string{"task 12 answer 12", "the tool said 7", "<tool_call>{\"name\":\"count\"}</tool_call>", "obs unicode ✓ é"}
		var err error
		testTok, err = tokenizer.Train(corpus, tokenizer.TrainOptions{VocabSize: 400})
		if err != nil {
			panic(err)
		}
	})
	return testTok
}

// stepEnv is a small deterministic environment: the first steps answer as a tool, the last ends
// the episode with reward 1 when the action names the seed.
type stepEnv struct {
	seed     int64
	turns    int
	steps    int
	obsLog   *[]string // observations handed out, in order
	failAt   int       // step number that returns an error (0 = never)
	hang     bool      // Step blocks until ctx is done
	finalObs string
}

func (e *stepEnv) Reset(ctx context.Context, seed int64) (env.Observation, error) {
	e.seed, e.steps = seed, 0
	return env.Observation{System: "You count.", Text: fmt.Sprintf("task %d", seed)}, nil
}

func (e *stepEnv) Step(ctx context.Context, action string) (env.Transition, error) {
	e.steps++
	if e.hang {
		<-ctx.Done()
		return env.Transition{}, ctx.Err()
	}
	if e.steps == e.failAt {
		return env.Transition{}, errors.New("sandbox lost")
	}
	if e.steps < e.turns {
		obs := fmt.Sprintf("<tool_response>%d</tool_response>", e.steps*7)
		if e.obsLog != nil {
			*e.obsLog = append(*e.obsLog, obs)
		}
		return env.Transition{Observation: obs, Role: traj.RoleTool}, nil
	}
	r := 0.0
	if strings.Contains(action, fmt.Sprint(e.seed)) {
		r = 1
	}
	return env.Transition{Observation: e.finalObs, Role: traj.RoleEnv, Reward: r, Done: true}, nil
}

// scriptAgent answers with a tool call until the last turn, then with the task number.
type scriptAgent struct {
	seed  int64
	turn  int
	calls *[]string
}

func (a *scriptAgent) Act(ctx context.Context, obs string) (string, error) {
	a.turn++
	var s string
	if strings.HasPrefix(obs, "<tool_response>") || a.turn == 1 {
		s = fmt.Sprintf("<tool_call>{\"name\":\"count\",\"arguments\":{\"n\":%d}}</tool_call>", a.turn)
	}
	if a.turn >= 3 {
		s = fmt.Sprintf("answer %d ✓", a.seed)
	}
	if a.calls != nil {
		*a.calls = append(*a.calls, s)
	}
	return s, nil
}

func newRunner(t testing.TB, cfg Config) *Runner {
	return &Runner{
		Tok: tok(t),
		Cfg: cfg,
		NewGen: func(task Task) infer.Generator {
			return &AgentGenerator{Agent: &scriptAgent{seed: task.Seed}, Tok: tok(t), Version: 3}
		},
	}
}

func TestEpisodeNeverRetokenizes(t *testing.T) {
	tk := tok(t)
	var obs, acts []string
	r := newRunner(t, DefaultConfig())
	r.NewGen = func(task Task) infer.Generator {
		return &AgentGenerator{Agent: &scriptAgent{seed: task.Seed, calls: &acts}, Tok: tk, Version: 3}
	}
	e := &stepEnv{turns: 3, obsLog: &obs, finalObs: "correct"}
	tr, err := r.Episode(context.Background(), e, Task{Env: "step", Seed: 12})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != traj.StatusOK || tr.Reward != 1 {
		t.Fatalf("status %s reward %v error %q", tr.Status, tr.Reward, tr.Error)
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	// Rebuild the token stream from its pieces: it must be exactly the concatenation.
	want := tk.EncodePrompt("You count.", "task 12")
	for i, a := range acts {
		want = append(want, tk.Encode(a)...)
		want = append(want, tk.EndOfTurn())
		if i < len(obs) {
			want = append(want, tk.EncodeObservation("tool", obs[i])...)
		}
	}
	want = append(want, tk.EncodeFinal("user", "correct")...)
	if !slices.Equal(tr.Tokens, want) {
		t.Fatalf("tokens differ from prompt+completions+observations:\n got %v\nwant %v", tr.Tokens, want)
	}
	if len(tr.Turns) != 3 {
		t.Fatalf("turns = %d, want 3", len(tr.Turns))
	}
	for i, tu := range tr.Turns {
		for j := tu.Start; j < tu.End; j++ {
			if tr.Roles[j] != traj.RoleAssistant || !tr.LossMask[j] || tr.Versions[j] != 3 {
				t.Fatalf("turn %d token %d: role %s mask %v version %d", i, j, tr.Roles[j], tr.LossMask[j], tr.Versions[j])
			}
		}
		for j := tu.End; j < tu.ObsEnd; j++ {
			if tr.LossMask[j] || tr.Versions[j] != traj.NoVersion {
				t.Fatalf("observation token %d: mask %v version %d", j, tr.LossMask[j], tr.Versions[j])
			}
		}
	}
	// The prompt splits into system and user tokens; nothing before the first turn is masked.
	if tr.Roles[0] != traj.RoleSystem || tr.Roles[tr.Turns[0].Start-1] != traj.RoleUser {
		t.Fatalf("prompt roles: first %s last %s", tr.Roles[0], tr.Roles[tr.Turns[0].Start-1])
	}
	if got := tk.Decode(tr.Tokens); !strings.Contains(got, "answer 12 ✓") {
		t.Fatalf("decoded trajectory lacks the answer: %q", got)
	}
}

func TestEpisodeStatuses(t *testing.T) {
	cases := []struct {
		name   string
		cfg    func(*Config)
		env    *stepEnv
		gen    infer.Generator
		status traj.Status
		errSub string
	}{
		{name: "ok", env: &stepEnv{turns: 3}, status: traj.StatusOK},
		{name: "turn limit", cfg: func(c *Config) { c.MaxTurns = 2 }, env: &stepEnv{turns: 3}, status: traj.StatusTruncated, errSub: "turn limit"},
		{name: "context limit", cfg: func(c *Config) { c.MaxContext = 70 }, env: &stepEnv{turns: 3}, status: traj.StatusTruncated},
		{name: "prompt too long", cfg: func(c *Config) { c.MaxContext = 10 }, env: &stepEnv{turns: 3}, status: traj.StatusTruncated, errSub: "no room"},
		{name: "completion cut", cfg: func(c *Config) { c.MaxTokensPerTurn = 3 }, env: &stepEnv{turns: 3}, status: traj.StatusOK},
		{name: "env error", env: &stepEnv{turns: 3, failAt: 2}, status: traj.StatusEnvError, errSub: "sandbox lost"},
		{name: "env hangs", cfg: func(c *Config) { c.EpisodeTimeout = 20 * time.Millisecond }, env: &stepEnv{turns: 3, hang: true}, status: traj.StatusTimeout},
		{name: "generator fails", env: &stepEnv{turns: 3}, gen: failGen{}, status: traj.StatusEnvError, errSub: "generate"},
		{name: "generator bad logprob", env: &stepEnv{turns: 3}, gen: badGen{}, status: traj.StatusEnvError, errSub: "logprob"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if c.cfg != nil {
				c.cfg(&cfg)
			}
			r := newRunner(t, cfg)
			if c.gen != nil {
				r.NewGen, r.Gen = nil, c.gen
			}
			tr, err := r.Episode(context.Background(), c.env, Task{Env: "step", Seed: 5})
			if err != nil {
				t.Fatal(err)
			}
			if tr.Status != c.status || !strings.Contains(tr.Error, c.errSub) {
				t.Fatalf("status %s error %q, want %s containing %q", tr.Status, tr.Error, c.status, c.errSub)
			}
			if err := tr.Validate(); err != nil {
				t.Fatal(err)
			}
			if len(tr.Tokens) > cfg.MaxContext {
				t.Fatalf("%d tokens exceed max_context %d", len(tr.Tokens), cfg.MaxContext)
			}
			if c.status.Failed() && tr.Reward != 0 {
				t.Fatalf("failed episode carries reward %v", tr.Reward)
			}
		})
	}
}

type failGen struct{}

func (failGen) Generate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	return infer.Completion{}, errors.New("server unreachable")
}

type badGen struct{}

func (badGen) Generate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	return infer.Completion{Tokens: []int32{1, 2}, Logprobs: []float32{-1, 3}, Versions: []int32{0, 0}, Finish: infer.FinishStop}, nil
}

func TestRunGroupsOrderAndDeterminism(t *testing.T) {
	r := newRunner(t, DefaultConfig())
	newEnv := func(string) (env.Env, error) { return &stepEnv{turns: 3}, nil }
	tasks := []Task{{Env: "step", Seed: 1, GroupID: 10}, {Env: "step", Seed: 2, GroupID: 11}, {Env: "step", Seed: 3, GroupID: 12}}
	a, err := r.RunGroups(context.Background(), newEnv, tasks, 4, 5)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.RunGroups(context.Background(), newEnv, tasks, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	for g := range tasks {
		if a[g].Task.Seed != tasks[g].Seed || len(a[g].Trajs) != 4 {
			t.Fatalf("group %d: task %+v with %d episodes", g, a[g].Task, len(a[g].Trajs))
		}
		for i, tr := range a[g].Trajs {
			if tr.TaskSeed != tasks[g].Seed || tr.GroupID != tasks[g].GroupID {
				t.Fatalf("group %d episode %d belongs to seed %d group %d", g, i, tr.TaskSeed, tr.GroupID)
			}
			if !slices.Equal(tr.Tokens, b[g].Trajs[i].Tokens) || tr.Reward != b[g].Trajs[i].Reward {
				t.Fatalf("group %d episode %d differs between concurrency 5 and 1", g, i)
			}
		}
	}
}

func TestRunGroupsEnvCreationFailure(t *testing.T) {
	r := newRunner(t, DefaultConfig())
	newEnv := func(string) (env.Env, error) { return nil, errors.New("no sandbox") }
	groups, err := r.RunGroups(context.Background(), newEnv, []Task{{Env: "x", Seed: 1}}, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range groups[0].Trajs {
		if tr.Status != traj.StatusEnvError || !strings.Contains(tr.Error, "no sandbox") {
			t.Fatalf("status %s error %q", tr.Status, tr.Error)
		}
	}
}

func TestRunGroupsCancelStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	r := newRunner(t, Config{MaxTurns: 4, MaxContext: 512, MaxTokensPerTurn: 64, Sampling: infer.Sampling{Temperature: 1}})
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 1)
	newEnv := func(string) (env.Env, error) {
		select {
		case started <- struct{}{}:
		default:
		}
		return &stepEnv{turns: 3, hang: true}, nil
	}
	tasks := make([]Task, 200)
	for i := range tasks {
		tasks[i] = Task{Env: "step", Seed: int64(i), GroupID: uint64(i)}
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.RunGroups(ctx, newEnv, tasks, 8, 256)
		done <- err
	}()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	for i := 0; i < 100 && runtime.NumGoroutine() > before; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines left running (%d before)", n, before)
	}
}

// abandoning answers no request: it returns the context's error as soon as the request's
// context ends, as a remote server's cancelled request does, without a completion.
type abandoning struct{}

func (abandoning) Generate(ctx context.Context, _ infer.Request) (infer.Completion, error) {
	<-ctx.Done()
	return infer.Completion{}, ctx.Err()
}

// A group whose context ends while one member is still decoding, the others finished, comes back
// as the context's error with no group, never as a group short of that member.
func TestRunGroupsCancelledMidDecodeReturnsNoGroup(t *testing.T) {
	r := newRunner(t, DefaultConfig())
	agent := r.NewGen
	r.NewGen = func(task Task) infer.Generator {
		if task.Index == 3 {
			return abandoning{}
		}
		return agent(task)
	}
	finished := make(chan struct{}, 4)
	r.OnEpisode = func() { finished <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for range 3 {
			<-finished
		}
		cancel()
	}()
	newEnv := func(string) (env.Env, error) { return &stepEnv{turns: 3}, nil }
	groups, err := r.RunGroups(ctx, newEnv, []Task{{Env: "step", Seed: 1, GroupID: 1}}, 4, 4)
	if !errors.Is(err, context.Canceled) || groups != nil {
		t.Fatalf("groups %v, err %v; want no group and context.Canceled", groups, err)
	}
}

func TestRunGroupsManyInFlight(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 400
	}
	r := newRunner(t, DefaultConfig())
	newEnv := func(string) (env.Env, error) { return &stepEnv{turns: 3}, nil }
	tasks := make([]Task, n/8)
	for i := range tasks {
		tasks[i] = Task{Env: "step", Seed: int64(i), GroupID: uint64(i)}
	}
	groups, err := r.RunGroups(context.Background(), newEnv, tasks, 8, n)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		for _, tr := range g.Trajs {
			if tr.Status != traj.StatusOK || tr.Reward != 1 {
				t.Fatalf("episode %s: status %s reward %v (%s)", tr.ID, tr.Status, tr.Reward, tr.Error)
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []func(*Config){
		func(c *Config) { c.MaxTurns = 0 },
		func(c *Config) { c.MaxContext = 1 },
		func(c *Config) { c.MaxTokensPerTurn = 0 },
		func(c *Config) { c.EpisodeTimeout = -1 },
		func(c *Config) { c.Sampling.Temperature = -1 },
		func(c *Config) { c.Sampling.TopP = 1.5 },
		func(c *Config) { c.Sampling.TopK = -2 },
		func(c *Config) { c.Sampling.Temperature = float32(math.Inf(1)) },
		func(c *Config) { c.Sampling.TopP = float32(math.NaN()) },
	}
	for i, f := range bad {
		c := DefaultConfig()
		f(&c)
		if c.Validate() == nil {
			t.Errorf("case %d: invalid config accepted: %+v", i, c)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

// A completion cut by the per-turn limit is closed with an end-of-turn token that is not
// trained on, and the environment judges the cut action.
func TestCutCompletionIsClosedNotTrained(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxTokensPerTurn = 3
	r := newRunner(t, cfg)
	tr, err := r.Episode(context.Background(), &stepEnv{turns: 3}, Task{Env: "step", Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	eot := tok(t).EndOfTurn()
	for i, tu := range tr.Turns {
		last := tu.End - 1
		if tr.Tokens[last] != eot || tr.LossMask[last] || tr.Versions[last] != traj.NoVersion {
			t.Fatalf("turn %d: last token %d mask %v version %d, want an untrained end-of-turn", i, tr.Tokens[last], tr.LossMask[last], tr.Versions[last])
		}
		if n := tu.End - tu.Start; n != 4 {
			t.Fatalf("turn %d has %d tokens, want 3 sampled + 1 closing", i, n)
		}
	}
}

// The loop reuses its working buffers from episode to episode; a finished trajectory must own
// its slices, so later episodes cannot change it.
func TestTrajectoriesOwnTheirSlices(t *testing.T) {
	r := newRunner(t, DefaultConfig())
	newEnv := func(string) (env.Env, error) { return &stepEnv{turns: 3}, nil }
	tasks := make([]Task, 20)
	for i := range tasks {
		tasks[i] = Task{Env: "step", Seed: int64(i), GroupID: uint64(i)}
	}
	first, err := r.RunGroups(context.Background(), newEnv, tasks, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	var saved [][]int32
	for _, g := range first {
		for _, tr := range g.Trajs {
			saved = append(saved, slices.Clone(tr.Tokens))
		}
	}
	for i := range tasks {
		tasks[i].Seed += 1000
	}
	if _, err := r.RunGroups(context.Background(), newEnv, tasks, 2, 3); err != nil {
		t.Fatal(err)
	}
	i := 0
	for _, g := range first {
		for _, tr := range g.Trajs {
			if !slices.Equal(tr.Tokens, saved[i]) {
				t.Fatalf("%s changed after later episodes ran", tr.ID)
			}
			i++
		}
	}
}

// A generator whose call failed may still hold the prompt it was lent (an engine shutting
// down); the loop must not hand that buffer to another episode.
type holdGen struct {
	held *[]int32
}

func (g holdGen) Generate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	*g.held = req.Prompt
	return infer.Completion{}, errors.New("engine closed")
}

func TestFailedGeneratorKeepsItsPrompt(t *testing.T) {
	var held []int32
	r := newRunner(t, DefaultConfig())
	r.NewGen, r.Gen = nil, holdGen{held: &held}
	tr, err := r.Episode(context.Background(), &stepEnv{turns: 3}, Task{Env: "step", Seed: 1})
	if err != nil || tr.Status != traj.StatusEnvError {
		t.Fatalf("status %s, err %v", tr.Status, err)
	}
	want := slices.Clone(held)
	r2 := newRunner(t, DefaultConfig())
	for i := 0; i < 20; i++ {
		if _, err := r2.Episode(context.Background(), &stepEnv{turns: 3}, Task{Env: "step", Seed: int64(100 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(held, want) {
		t.Fatal("the prompt lent to a failed generator was reused by later episodes")
	}
}

// barrierGen holds every call until n calls are waiting at once.
type barrierGen struct {
	n       int
	mu      sync.Mutex
	waiting int
	release chan struct{}
	tok     *tokenizer.Tokenizer
}

func (g *barrierGen) Generate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	g.mu.Lock()
	g.waiting++
	if g.waiting == g.n {
		close(g.release)
	}
	g.mu.Unlock()
	select {
	case <-g.release:
	case <-ctx.Done():
		return infer.Completion{}, ctx.Err()
	}
	return infer.Completion{Tokens: []int32{g.tok.EndOfTurn()}, Logprobs: []float32{0}, Versions: []int32{0}, Finish: infer.FinishStop}, nil
}

// Workers start lazily, but episodes that wait on the generator still reach the concurrency.
func TestRunGroupsReachesConcurrencyWhenEpisodesWait(t *testing.T) {
	const n = 300
	gen := &barrierGen{n: n, release: make(chan struct{}), tok: tok(t)}
	r := &Runner{Gen: gen, Tok: tok(t), Cfg: DefaultConfig()}
	tasks := make([]Task, n)
	for i := range tasks {
		tasks[i] = Task{Env: "step", Seed: int64(i), GroupID: uint64(i)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	newEnv := func(string) (env.Env, error) { return &stepEnv{turns: 1}, nil }
	if _, err := r.RunGroups(ctx, newEnv, tasks, 1, n); err != nil {
		t.Fatalf("%d episodes never waited at once: %v", n, err)
	}
}

// brokenGen is a generator whose policy has broken weights: every call fails as the local
// engine does on non-finite logits.
type brokenGen struct{}

func (brokenGen) Generate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	return infer.Completion{}, fmt.Errorf("infer: %w at version 4: weights are broken", infer.ErrNonFinite)
}

// A broken policy is not an environment failure: the episode returns the error instead of an
// env_error status, and RunGroups stops with it rather than returning a batch of failed episodes.
func TestBrokenPolicyStopsRollout(t *testing.T) {
	r := newRunner(t, DefaultConfig())
	r.NewGen, r.Gen = nil, brokenGen{}
	tr, err := r.Episode(context.Background(), &stepEnv{turns: 3}, Task{Env: "step", Seed: 5})
	if !errors.Is(err, infer.ErrNonFinite) || !strings.Contains(err.Error(), "version 4") {
		t.Fatalf("Episode: err = %v (status %s %q), want infer.ErrNonFinite", err, tr.Status, tr.Error)
	}
	newEnv := func(string) (env.Env, error) { return &stepEnv{turns: 3}, nil }
	tasks := make([]Task, 20)
	for i := range tasks {
		tasks[i] = Task{Env: "step", Seed: int64(i), GroupID: uint64(i)}
	}
	groups, err := r.RunGroups(context.Background(), newEnv, tasks, 4, 8)
	if !errors.Is(err, infer.ErrNonFinite) || groups != nil {
		t.Fatalf("RunGroups: %d groups, err = %v, want infer.ErrNonFinite", len(groups), err)
	}
}
