package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/traj"
)

func foldCall(summary string) string {
	b, _ := json.Marshal(map[string]any{"name": "fold", "arguments": map[string]string{"summary": summary}})
	return "<tool_call>" + string(b) + "</tool_call>"
}

func foldRunner(t *testing.T, fc *ContextConfig, script []string) (*Runner, *recordGen) {
	t.Helper()
	tk := tok(t)
	cfg := DefaultConfig()
	cfg.Context = fc
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	g := &recordGen{tok: tk, script: script}
	return &Runner{Tok: tk, Cfg: cfg, Gen: g}, g
}

// TestFoldAction: a fold closes the sample with the folding turn and opens one whose tokens are
// exactly the next request's prompt: system prompt, task with the summary, the last kept turn.
func TestFoldAction(t *testing.T) {
	tk := tok(t)
	script := []string{
		`<tool_call>{"name":"count","arguments":{"n":1}}</tool_call>`,
		`<tool_call>{"name":"count","arguments":{"n":2}}</tool_call>`,
		foldCall("the tool said 7 then 14"),
		"answer 12",
	}
	r, g := foldRunner(t, &ContextConfig{KeepTurns: 1}, script)
	tr, err := r.Episode(context.Background(), &stepEnv{turns: 3, finalObs: "correct"}, Task{Env: "step", Seed: 12})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != traj.StatusOK || tr.Reward != 1 {
		t.Fatalf("status %s reward %v error %q", tr.Status, tr.Reward, tr.Error)
	}
	if tr.NumSamples() != 2 || len(tr.Turns) != 4 {
		t.Fatalf("samples %v, %d turns; want 2 samples and 4 turns", tr.Samples, len(tr.Turns))
	}
	checkSamples(t, tr, g)
	// The folding turn is the last of the first sample and is trained there.
	lo, _ := tr.Sample(1)
	if tr.Turns[2].End != lo || !tr.LossMask[tr.Turns[2].Start] {
		t.Fatalf("fold turn %d..%d, sample 1 starts at %d", tr.Turns[2].Start, tr.Turns[2].End, lo)
	}
	if tc := tr.Turns[2].ToolCalls; len(tc) != 1 || tc[0].Name != "fold" || tc[0].Error != "" || !strings.HasPrefix(tc[0].Result, "folded ") {
		t.Fatalf("fold turn's tool calls %+v", tc)
	}
	ctx := tk.Decode(tr.Tokens[lo:tr.Turns[3].Start])
	for _, want := range []string{"You count.", "fold(summary)", "task 12", "the tool said 7 then 14", `"n":2`, "<tool_response>14</tool_response>"} {
		if !strings.Contains(ctx, want) {
			t.Fatalf("folded context lacks %q:\n%s", want, ctx)
		}
	}
	if strings.Contains(ctx, `"n":1`) {
		t.Fatalf("folded context keeps turn 1, beyond keep_turns 1:\n%s", ctx)
	}
	if tr.Roles[lo] != traj.RoleSystem {
		t.Fatalf("sample 1 starts with a %s token", tr.Roles[lo])
	}
	folds, _ := Folds(tr)
	if len(folds) != 1 || folds[0][0] != lo || folds[0][1] != tr.Turns[3].Start-lo {
		t.Fatalf("fold tokens %v, want [%d %d]", folds, lo, tr.Turns[3].Start-lo)
	}
	s := MeasureFolds([]*traj.Trajectory{tr})
	if s.Folded != 1 || s.FoldsPerEpisode != 1 || s.SuccessFolded != 1 || s.TokensAfter >= s.TokensBefore {
		t.Fatalf("fold stats %+v", s)
	}
	// The codecs keep the samples and the meta.
	checkBinaryRoundTrip(t, tr)
}

// TestFoldKeepsNothing: keep_turns 0 folds to the opening messages and the summary, and the
// episode may fold again in the new sample.
func TestFoldTwice(t *testing.T) {
	tk := tok(t)
	script := []string{
		`<tool_call>{"name":"count"}</tool_call>`,
		foldCall("first"),
		`<tool_call>{"name":"count"}</tool_call>`,
		foldCall("second"),
		"answer 12",
	}
	r, g := foldRunner(t, &ContextConfig{}, script)
	tr, err := r.Episode(context.Background(), &stepEnv{turns: 3}, Task{Env: "step", Seed: 12})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != traj.StatusOK || tr.NumSamples() != 3 {
		t.Fatalf("status %s (%q), samples %v", tr.Status, tr.Error, tr.Samples)
	}
	checkSamples(t, tr, g)
	lo, _ := tr.Sample(2)
	ctx := tk.Decode(tr.Tokens[lo:tr.Turns[4].Start])
	if !strings.Contains(ctx, "second") || strings.Contains(ctx, "first") || strings.Contains(ctx, `"name":"count"`) {
		t.Fatalf("second fold's context: %q", ctx)
	}
	if f, _ := Folds(tr); len(f) != 2 {
		t.Fatalf("folds %v", f)
	}
}

// TestFoldBadInput: every unusable fold is an error observation in the same sample, and the
// episode goes on.
func TestFoldBadInput(t *testing.T) {
	long := strings.Repeat("the tool said 7 ", 2)
	for _, c := range []struct {
		name, action, want string
	}{
		{"empty", foldCall("  "), ErrFoldEmpty.Error()},
		{"missing", `<tool_call>{"name":"fold","arguments":{}}</tool_call>`, "no summary"},
		{"not a string", `<tool_call>{"name":"fold","arguments":{"summary":3}}</tool_call>`, "arguments must be"},
		{"unknown argument", `<tool_call>{"name":"fold","arguments":{"summary":"x","keep":2}}</tool_call>`, "unknown argument"},
		{"overlong", foldCall(long), "over the limit of 4"},
		{"with another call", foldCall("x") + `<tool_call>{"name":"count"}</tool_call>`, "only tool call"},
		{"bad arguments", `<tool_call>{"name":"fold","arguments":[1]}</tool_call>`, "arguments must be a JSON object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, g := foldRunner(t, &ContextConfig{MaxSummaryTokens: 4}, []string{c.action, "answer 12"})
			tr, err := r.Episode(context.Background(), &stepEnv{turns: 1}, Task{Env: "step", Seed: 12})
			if err != nil {
				t.Fatal(err)
			}
			if tr.Status != traj.StatusOK || tr.Reward != 1 || tr.NumSamples() != 1 || len(tr.Turns) != 2 {
				t.Fatalf("status %s (%q) reward %v samples %d turns %d", tr.Status, tr.Error, tr.Reward, tr.NumSamples(), len(tr.Turns))
			}
			checkSamples(t, tr, g)
			tc := tr.Turns[0].ToolCalls
			if len(tc) != 1 || !strings.Contains(tc[0].Error, c.want) {
				t.Fatalf("tool calls %+v, want an error with %q", tc, c.want)
			}
			obs := tok(t).Decode(tr.Tokens[tr.Turns[0].End:tr.Turns[0].ObsEnd])
			if !strings.Contains(obs, "<tool_response>error: ") {
				t.Fatalf("observation %q", obs)
			}
			if f, _ := Folds(tr); len(f) != 0 || len(tr.Meta) != 0 {
				t.Fatalf("a refused fold is recorded: %v %v", f, tr.Meta)
			}
		})
	}
}

// TestFoldThreshold: under the threshold trigger the tool is not listed, a fold before the
// request is refused, the observation that passes max_tokens carries the request, and the fold
// that answers it is accepted.
func TestFoldThreshold(t *testing.T) {
	tk := tok(t)
	script := []string{
		foldCall("early"),
		`<tool_call>{"name":"count"}</tool_call>`,
		foldCall("asked"),
		"answer 12",
	}
	r, g := foldRunner(t, &ContextConfig{Trigger: TriggerThreshold, MaxTokens: 40}, script)
	r.Cfg.MaxContext = 2048
	tr, err := r.Episode(context.Background(), &stepEnv{turns: 2}, Task{Env: "step", Seed: 12})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != traj.StatusOK || tr.NumSamples() != 2 {
		t.Fatalf("status %s (%q), samples %v", tr.Status, tr.Error, tr.Samples)
	}
	checkSamples(t, tr, g)
	if strings.Contains(tk.Decode(g.prompts[0]), "fold(") {
		t.Fatal("the threshold trigger lists the fold tool")
	}
	if tc := tr.Turns[0].ToolCalls; len(tc) != 1 || !strings.Contains(tc[0].Error, "only when asked") {
		t.Fatalf("unasked fold: %+v", tc)
	}
	// The system prompt alone passes 40 tokens: the first observation asks.
	if !strings.Contains(tk.Decode(g.prompts[1]), "call fold with a summary") {
		t.Fatalf("no request for a summary in %q", tk.Decode(g.prompts[1]))
	}
	if tc := tr.Turns[2].ToolCalls; len(tc) != 1 || tc[0].Error != "" {
		t.Fatalf("asked fold: %+v", tc)
	}
	if _, reqs := Folds(tr); reqs < 1 {
		t.Fatalf("requests %d", reqs)
	}
}

// TestFoldTooLong: a folded context that does not fit in max_context truncates the episode.
func TestFoldTooLong(t *testing.T) {
	script := []string{foldCall("the tool said 7"), "answer 12"}
	r, _ := foldRunner(t, &ContextConfig{}, script)
	tr, err := r.Episode(context.Background(), &stepEnv{turns: 1}, Task{Env: "step", Seed: 12})
	if err != nil {
		t.Fatal(err)
	}
	folds, _ := Folds(tr)
	if len(folds) != 1 || folds[0][1] <= folds[0][0] {
		t.Fatalf("folds %v: want one that lengthens the context (the summary's framing)", folds)
	}
	// The same episode with max_context at the folded length: the fold itself fits, its
	// context does not.
	r, _ = foldRunner(t, &ContextConfig{}, script)
	r.Cfg.MaxContext = folds[0][1]
	tr, err = r.Episode(context.Background(), &stepEnv{turns: 1}, Task{Env: "step", Seed: 12})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != traj.StatusTruncated || !strings.Contains(tr.Error, "folded context") || tr.NumSamples() != 1 {
		t.Fatalf("status %s error %q samples %d", tr.Status, tr.Error, tr.NumSamples())
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestFoldWithSplittingTemplate: folding renders through the run's Conversation.
func TestFoldWithSplittingTemplate(t *testing.T) {
	tk := tok(t)
	r, g := foldRunner(t, &ContextConfig{KeepTurns: 2}, []string{
		`<tool_call>{"name":"count"}</tool_call>`,
		"<think>the tool said 7</think>call 2",
		foldCall("seven"),
		"answer 12",
	})
	r.NewConversation = func() Conversation { return &thinkChat{tok: tk} }
	tr, err := r.Episode(context.Background(), &stepEnv{turns: 3}, Task{Env: "step", Seed: 12})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != traj.StatusOK {
		t.Fatalf("status %s (%q)", tr.Status, tr.Error)
	}
	checkSamples(t, tr, g)
}

// TestFoldOffUnchanged: a config without a context block runs the episode as before: no fold
// tool in the prompt, a fold call goes to the environment, no meta.
func TestFoldOffUnchanged(t *testing.T) {
	tk := tok(t)
	r, g := foldRunner(t, nil, []string{foldCall("x"), "answer 12"})
	tr, err := r.Episode(context.Background(), &stepEnv{turns: 2}, Task{Env: "step", Seed: 12})
	if err != nil {
		t.Fatal(err)
	}
	if tr.NumSamples() != 1 || len(tr.Meta) != 0 || strings.Contains(tk.Decode(g.prompts[0]), "fold(") || len(tr.Turns[0].ToolCalls) != 0 {
		t.Fatalf("folding acted while off: samples %d meta %v", tr.NumSamples(), tr.Meta)
	}
}

func TestContextConfigValidate(t *testing.T) {
	base := DefaultConfig()
	for _, c := range []struct {
		fc   ContextConfig
		want string
	}{
		{ContextConfig{}, ""},
		{ContextConfig{Trigger: "both", MaxTokens: 300, KeepTurns: 2, Tool: "summarize"}, ""},
		{ContextConfig{Trigger: "sometimes"}, "trigger"},
		{ContextConfig{MaxTokens: 100}, "does nothing"},
		{ContextConfig{Trigger: "threshold"}, "max_tokens"},
		{ContextConfig{Trigger: "threshold", MaxTokens: base.MaxContext}, "max_tokens"},
		{ContextConfig{KeepTurns: -1}, "keep_turns"},
		{ContextConfig{KeepTurns: base.MaxTurns}, "keep_turns"},
		{ContextConfig{MaxSummaryTokens: base.MaxContext}, "max_summary_tokens"},
		{ContextConfig{Tool: "a b"}, "context.tool"},
	} {
		cfg := base
		cfg.Context = &c.fc
		err := cfg.Validate()
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.fc, err, c.want)
		}
	}
}

func TestMeasureFolds(t *testing.T) {
	ts := []*traj.Trajectory{
		{Status: traj.StatusOK, Reward: 1, Meta: []traj.KV{{Key: MetaFolds, Value: "2"}, {Key: MetaFoldTokens, Value: "300>100,200>50"}, {Key: MetaFoldRequests, Value: "1"}}},
		{Status: traj.StatusOK, Reward: 0, Meta: []traj.KV{{Key: MetaFolds, Value: "1"}, {Key: MetaFoldTokens, Value: "100>50"}, {Key: MetaFoldRequests, Value: "0"}}},
		{Status: traj.StatusOK, Reward: 1},
		{Status: traj.StatusTruncated},
	}
	s := MeasureFolds(ts)
	want := FoldStats{Episodes: 4, Folded: 2, Folds: 3, FoldsPerEpisode: 0.75, TokensBefore: 200, TokensAfter: 200.0 / 3, RequestsPerEpisode: 0.25, SuccessFolded: 0.5, SuccessUnfolded: 0.5}
	if s != want {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
	if m := s.Metrics("rollout/"); m["rollout/context_folds_per_episode"] != 0.75 || len(m) != 7 {
		t.Fatalf("metrics %v", m)
	}
	if z := MeasureFolds(nil); z != (FoldStats{}) {
		t.Fatalf("no episodes: %+v", z)
	}
}

func FuzzFoldArgs(f *testing.F) {
	for _, s := range []string{`{"summary":"x"}`, `{}`, `{"summary":""}`, `{"summary":null}`, `{"summary":"a","b":1}`, `[`, `{"summary":"\u0000"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sum, err := parseFoldArgs(json.RawMessage(s))
		if err == nil && strings.TrimSpace(sum) != sum || err == nil && sum == "" {
			t.Fatalf("summary %q accepted from %q", sum, s)
		}
		if err != nil && !errors.Is(err, ErrFoldArgs) && !errors.Is(err, ErrFoldEmpty) {
			t.Fatalf("error %v is neither ErrFoldArgs nor ErrFoldEmpty", err)
		}
	})
}
