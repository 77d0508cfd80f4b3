package rollout

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/traj"
)

// thinkChat is a Conversation that is not prefix-stable: ChatML that drops the <think>…</think>
// text of every assistant turn but the last when it renders the conversation, as Qwen3's template
// drops earlier reasoning. Each Next renders the whole conversation and returns what follows the
// context so far, or, when the render no longer begins with it, the whole render (a split).
type thinkChat struct {
	tok    *tokenizer.Tokenizer
	msgs   []tokenizer.Message
	ctx    []int32 // the current sample: what the policy was given and sampled
	splits int
}

var thinkRE = regexp.MustCompile(`(?s)<think>.*?</think>`)

func (c *thinkChat) render(genPrompt bool) []int32 {
	msgs := slices.Clone(c.msgs)
	last := -1
	for i, m := range msgs {
		if m.Role == "assistant" {
			last = i
		}
	}
	for i, m := range msgs {
		if m.Role == "assistant" && i != last {
			msgs[i].Content = thinkRE.ReplaceAllString(m.Content, "")
		}
	}
	return c.tok.EncodeChat(msgs, genPrompt)
}

func (c *thinkChat) Start(system, user string) ([]int32, int, error) {
	sysLen := 0
	if system != "" {
		c.msgs = append(c.msgs, tokenizer.Message{Role: "system", Content: system})
		sysLen = len(c.tok.EncodeChat(c.msgs, false))
	}
	c.msgs = append(c.msgs, tokenizer.Message{Role: "user", Content: user})
	c.ctx = c.render(true)
	return slices.Clone(c.ctx), sysLen, nil
}

func (c *thinkChat) Next(completion []int32, role, obs string, final bool) ([]int32, bool, error) {
	c.ctx = append(c.ctx, completion...)
	content := strings.TrimSuffix(c.tok.Decode(completion), tokenizer.ImEnd)
	c.msgs = append(c.msgs, tokenizer.Message{Role: "assistant", Content: content}, tokenizer.Message{Role: role, Content: obs})
	full := c.render(!final)
	if len(full) >= len(c.ctx) && slices.Equal(full[:len(c.ctx)], c.ctx) {
		delta := slices.Clone(full[len(c.ctx):])
		c.ctx = full
		return delta, false, nil
	}
	c.splits++
	c.ctx = full
	return slices.Clone(full), true, nil
}

func (c *thinkChat) Stop() []int32 { return []int32{c.tok.EndOfTurn()} }

// recordGen answers with scripted texts and records every request's prompt and every completion.
type recordGen struct {
	tok     *tokenizer.Tokenizer
	script  []string
	prompts [][]int32
	comps   [][]int32
}

func (g *recordGen) Generate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	i := len(g.prompts)
	if i >= len(g.script) {
		return infer.Completion{}, errors.New("script exhausted")
	}
	g.prompts = append(g.prompts, slices.Clone(req.Prompt))
	toks := append(g.tok.Encode(g.script[i]), req.Stop[0])
	finish := infer.FinishStop
	if len(toks) > req.MaxTokens {
		toks, finish = toks[:req.MaxTokens], infer.FinishLength
	}
	g.comps = append(g.comps, toks)
	c := infer.Completion{Tokens: toks, Logprobs: make([]float32, len(toks)), Versions: make([]int32, len(toks)), Finish: finish}
	for j := range toks {
		c.Logprobs[j], c.Versions[j] = -0.25*float32(j%4+1), 4
	}
	return c, nil
}

var thinkScript = []string{
	`<tool_call>{"name":"count"}</tool_call>`,
	"<think>the tool said 7</think>call 2",
	"<think>task 12 answer</think>call 3",
	"<think>obs unicode ✓</think>call 4",
	"answer 12",
}

// checkSamples checks an episode against what its generator was given and returned: every
// sample's tokens before a turn are exactly that request's prompt, every turn's tokens are
// exactly the completion, and the loss mask covers the completions and nothing else.
func checkSamples(t *testing.T, tr *traj.Trajectory, g *recordGen) {
	t.Helper()
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(tr.Turns) != len(g.prompts) {
		t.Fatalf("%d turns for %d requests", len(tr.Turns), len(g.prompts))
	}
	masked := make([]bool, tr.Len())
	for i, tu := range tr.Turns {
		lo, hi := tr.Sample(tr.SampleOf(tu.Start))
		if !slices.Equal(tr.Tokens[lo:tu.Start], g.prompts[i]) {
			t.Fatalf("turn %d: the sample's tokens before it (%d..%d) are not the request's prompt:\n got %v\nwant %v",
				i, lo, tu.Start, tr.Tokens[lo:tu.Start], g.prompts[i])
		}
		if !slices.Equal(tr.Tokens[tu.Start:tu.End], g.comps[i]) {
			t.Fatalf("turn %d: tokens %v, the generator returned %v", i, tr.Tokens[tu.Start:tu.End], g.comps[i])
		}
		if tu.ObsEnd > hi || hi-lo > 0 && tu.Start >= hi {
			t.Fatalf("turn %d (%d..%d) is not inside its sample %d..%d", i, tu.Start, tu.ObsEnd, lo, hi)
		}
		for j := tu.Start; j < tu.End; j++ {
			masked[j] = true
		}
	}
	for j, m := range tr.LossMask {
		if m != masked[j] {
			t.Fatalf("token %d: loss mask %v, but it is %sa sampled completion token", j, m, map[bool]string{true: "", false: "not "}[masked[j]])
		}
		if m && (tr.Versions[j] != 4 || tr.Logprobs[j] == 0) {
			t.Fatalf("token %d: trained with version %d logprob %v, not the generator's", j, tr.Versions[j], tr.Logprobs[j])
		}
	}
}

func TestConversationSplitsSamples(t *testing.T) {
	tk := tok(t)
	cfg := DefaultConfig()
	var conv *thinkChat
	g := &recordGen{tok: tk, script: thinkScript}
	r := &Runner{Tok: tk, Cfg: cfg, Gen: g, NewConversation: func() Conversation { conv = &thinkChat{tok: tk}; return conv }}
	tr, err := r.Episode(context.Background(), &stepEnv{turns: 5, finalObs: "correct"}, Task{Env: "step", Seed: 12})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != traj.StatusOK || tr.Reward != 1 {
		t.Fatalf("status %s reward %v error %q", tr.Status, tr.Reward, tr.Error)
	}
	// Turns 3 and 4 drop the reasoning of turns 2 and 3: two splits; the one at the final
	// observation opens no sample (nothing would be sampled in it).
	if tr.NumSamples() != 3 || conv.splits != 3 {
		t.Fatalf("samples %v (%d), conversation split %d times; want 3 samples, 3 splits", tr.Samples, tr.NumSamples(), conv.splits)
	}
	checkSamples(t, tr, g)
	// A later sample starts with the re-rendered context: system and user as before, the
	// earlier assistant turns without their reasoning.
	lo, _ := tr.Sample(1)
	if tr.Roles[lo] != traj.RoleSystem {
		t.Fatalf("sample 1 starts with a %s token, want system", tr.Roles[lo])
	}
	text := tk.Decode(tr.Tokens[lo:tr.Turns[3].Start])
	if strings.Contains(text, "the tool said 7") || !strings.Contains(text, "call 2") {
		t.Fatalf("sample 1's context is not the re-render without turn 2's reasoning: %q", text)
	}
	for j := lo; j < tr.Turns[3].Start; j++ {
		if tr.LossMask[j] || tr.Versions[j] != traj.NoVersion {
			t.Fatalf("token %d of the re-rendered context is trained or versioned", j)
		}
	}
	// Both codecs keep the samples.
	checkBinaryRoundTrip(t, tr)
}

// TestConversationPrefixStable: a Conversation that never needs to split gives the tokens of
// the default ChatML path, in one sample.
func TestConversationPrefixStable(t *testing.T) {
	tk := tok(t)
	script := []string{`<tool_call>{"name":"count"}</tool_call>`, "call 2", "answer 12"}
	run := func(nc func() Conversation) (*traj.Trajectory, *recordGen) {
		g := &recordGen{tok: tk, script: script}
		r := &Runner{Tok: tk, Cfg: DefaultConfig(), Gen: g, NewConversation: nc}
		tr, err := r.Episode(context.Background(), &stepEnv{turns: 3, finalObs: "correct"}, Task{Env: "step", Seed: 12})
		if err != nil {
			t.Fatal(err)
		}
		return tr, g
	}
	def, _ := run(nil)
	tr, g := run(func() Conversation { return &thinkChat{tok: tk} })
	if tr.NumSamples() != 1 || !slices.Equal(tr.Tokens, def.Tokens) || !slices.Equal(tr.Roles, def.Roles) {
		t.Fatalf("a prefix-stable conversation gave %d samples, tokens equal to ChatML's: %v", tr.NumSamples(), slices.Equal(tr.Tokens, def.Tokens))
	}
	checkSamples(t, tr, g)
}

// TestConversationMaxContextPerSample: max_context bounds each sample, not the episode.
func TestConversationMaxContextPerSample(t *testing.T) {
	tk := tok(t)
	g := &recordGen{tok: tk, script: thinkScript}
	full := &Runner{Tok: tk, Cfg: DefaultConfig(), Gen: g, NewConversation: func() Conversation { return &thinkChat{tok: tk} }}
	ref, err := full.Episode(context.Background(), &stepEnv{turns: 5, finalObs: "correct"}, Task{Env: "step", Seed: 12})
	if err != nil {
		t.Fatal(err)
	}
	longest := 0
	for k := range ref.NumSamples() {
		lo, hi := ref.Sample(k)
		longest = max(longest, hi-lo)
	}
	if longest >= ref.Len() {
		t.Fatal("the episode is not longer than its longest sample")
	}
	cfg := DefaultConfig()
	cfg.MaxContext = longest + 1
	g = &recordGen{tok: tk, script: thinkScript}
	r := &Runner{Tok: tk, Cfg: cfg, Gen: g, NewConversation: func() Conversation { return &thinkChat{tok: tk} }}
	tr, err := r.Episode(context.Background(), &stepEnv{turns: 5, finalObs: "correct"}, Task{Env: "step", Seed: 12})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != traj.StatusOK || tr.Len() <= cfg.MaxContext {
		t.Fatalf("status %s (%q), %d tokens under max_context %d", tr.Status, tr.Error, tr.Len(), cfg.MaxContext)
	}
	checkSamples(t, tr, g)
	for _, p := range g.prompts {
		if len(p) >= cfg.MaxContext {
			t.Fatalf("a prompt of %d tokens under max_context %d", len(p), cfg.MaxContext)
		}
	}
	// One token less and the last sample no longer fits.
	cfg.MaxContext = longest - 1
	g = &recordGen{tok: tk, script: thinkScript}
	r = &Runner{Tok: tk, Cfg: cfg, Gen: g, NewConversation: func() Conversation { return &thinkChat{tok: tk} }}
	tr, err = r.Episode(context.Background(), &stepEnv{turns: 5, finalObs: "correct"}, Task{Env: "step", Seed: 12})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != traj.StatusTruncated {
		t.Fatalf("status %s (%q), want truncated", tr.Status, tr.Error)
	}
	checkSamples(t, tr, g)
	for k := range tr.NumSamples() {
		if lo, hi := tr.Sample(k); hi-lo > cfg.MaxContext {
			t.Fatalf("sample %d has %d tokens, over max_context %d", k, hi-lo, cfg.MaxContext)
		}
	}
}

type badConv struct {
	chatML
	startErr, nextErr error
	stop              []int32
}

func (c badConv) Start(s, u string) ([]int32, int, error) {
	if c.startErr != nil {
		return nil, 0, c.startErr
	}
	return c.chatML.Start(s, u)
}

func (c badConv) Next(comp []int32, role, obs string, final bool) ([]int32, bool, error) {
	if c.nextErr != nil {
		return nil, false, c.nextErr
	}
	return c.chatML.Next(comp, role, obs, final)
}

func (c badConv) Stop() []int32 { return c.stop }

func TestConversationErrors(t *testing.T) {
	tk := tok(t)
	eot := []int32{tk.EndOfTurn()}
	for name, c := range map[string]badConv{
		"start":   {chatML: chatML{tk}, startErr: errors.New("template raised"), stop: eot},
		"next":    {chatML: chatML{tk}, nextErr: errors.New("template raised"), stop: eot},
		"no stop": {chatML: chatML{tk}},
	} {
		g := &recordGen{tok: tk, script: thinkScript}
		r := &Runner{Tok: tk, Cfg: DefaultConfig(), Gen: g, NewConversation: func() Conversation { return c }}
		tr, err := r.Episode(context.Background(), &stepEnv{turns: 5}, Task{Env: "step", Seed: 1})
		if err != nil || tr.Status != traj.StatusEnvError || tr.Validate() != nil {
			t.Errorf("%s: err %v status %s (%q)", name, err, tr.Status, tr.Error)
		}
	}
}

// TestRunGroupsSplitConcurrent: episodes that split, run concurrently, each keep their samples
// (go test -race covers the per-episode conversations and pooled buffers).
func TestRunGroupsSplitConcurrent(t *testing.T) {
	tk := tok(t)
	r := &Runner{Tok: tk, Cfg: DefaultConfig(), NewConversation: func() Conversation { return &thinkChat{tok: tk} }}
	var mu sync.Mutex
	gens := map[string]*recordGen{}
	r.NewGen = func(task Task) infer.Generator {
		g := &recordGen{tok: tk, script: thinkScript}
		mu.Lock()
		gens[task.id()] = g
		mu.Unlock()
		return g
	}
	newEnv := func(string) (env.Env, error) { return &stepEnv{turns: 5, finalObs: "correct"}, nil }
	tasks := []Task{{Env: "step", Seed: 12, GroupID: 1}, {Env: "step", Seed: 5, GroupID: 2}}
	groups, err := r.RunGroups(context.Background(), newEnv, tasks, 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		for _, tr := range g.Trajs {
			if tr.NumSamples() != 3 {
				t.Fatalf("%s: %d samples, want 3", tr.ID, tr.NumSamples())
			}
			checkSamples(t, tr, gens[tr.ID])
		}
	}
}

// thinkAgent writes its reasoning before every action but the first.
type thinkAgent struct{ turn int }

func (a *thinkAgent) Act(ctx context.Context, obs string) (string, error) {
	a.turn++
	if a.turn == 1 {
		return "call 1", nil
	}
	return "<think>the tool said 7</think>call", nil
}

func TestCheckShapes(t *testing.T) {
	tk := tok(t)
	think := func() Conversation { return &thinkChat{tok: tk} }
	sc, err := CheckShapes(context.Background(), think, tk, &stepEnv{turns: 4, finalObs: "correct"}, &thinkAgent{}, 12, 8)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"observation (tool) after turn 3", "final (user) after turn 4"}
	if sc.Turns != 4 || !slices.Equal(sc.Splits, want) {
		t.Fatalf("turns %d splits %q, want 4 and %q", sc.Turns, sc.Splits, want)
	}
	sc, err = CheckShapes(context.Background(), func() Conversation { return chatML{tk} }, tk, &stepEnv{turns: 4, finalObs: "correct"}, &thinkAgent{}, 12, 8)
	if err != nil || len(sc.Splits) != 0 || sc.Turns != 4 {
		t.Fatalf("ChatML: turns %d splits %q (err %v)", sc.Turns, sc.Splits, err)
	}
	bad := func() Conversation {
		return badConv{chatML: chatML{tk}, nextErr: errors.New("raised"), stop: []int32{tk.EndOfTurn()}}
	}
	if _, err := CheckShapes(context.Background(), bad, tk, &stepEnv{turns: 4}, &thinkAgent{}, 12, 8); !errors.Is(err, ErrRender) {
		t.Fatalf("a failing render: err %v, want ErrRender", err)
	}
	if _, err := CheckShapes(context.Background(), think, tk, &stepEnv{turns: 4, failAt: 2}, &thinkAgent{}, 12, 8); err == nil || errors.Is(err, ErrRender) {
		t.Fatalf("a failing environment: err %v", err)
	}
}

// checkBinaryRoundTrip fails the test unless tr comes back equal from the binary codec.
func checkBinaryRoundTrip(t *testing.T, tr *traj.Trajectory) {
	t.Helper()
	b, err := tr.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var back traj.Trajectory
	if err := back.UnmarshalBinary(b); err != nil || !traj.Equal(tr, &back) {
		t.Fatalf("binary round trip: %v", err)
	}
}
