package dataset

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/envtest"
	"github.com/agentrl/agentrl/traj"
)

// fakeSessions stands in for a remote environment's pool: each session answers a step as a
// tool (or as done, with done), recording the seeds reset, the actions stepped and the closes.
type fakeSessions struct {
	mu             sync.Mutex // the shared suite plays instances in parallel
	done           bool
	seeds, actions []string
	open, closes   int
}

type fakeSession struct{ f *fakeSessions }

func (s fakeSession) Reset(_ context.Context, seed int64) (env.Observation, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.seeds = append(s.f.seeds, string(rune('0'+seed%10)))
	s.f.open++
	return env.Observation{Text: "the server's own task"}, nil
}

func (s fakeSession) Step(_ context.Context, action string) (env.Transition, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.actions = append(s.f.actions, action)
	return env.Transition{Observation: "<tool_response>42</tool_response>", Role: traj.RoleTool, Reward: 0.5, Done: s.f.done,
		ToolCalls: []traj.ToolCall{{Name: "adder", Result: "42"}}}, nil
}

func (s fakeSession) Close() error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.open--
	s.f.closes++
	return nil
}

func (f *fakeSessions) provider() ToolProvider {
	return ToolProvider{Name: "srv", New: func() (env.Env, error) { return fakeSession{f}, nil },
		Tools: []ToolInfo{{Name: "adder", Description: "Adds.", Parameters: []byte(`{"properties": {"a": {}, "b": {}}}`)}}}
}

// A dataset whose tools are a remote environment's: a session per episode, reset with its seed;
// tool turns go to it and its reward is ignored; the answer is graded here and never sent; the
// session is closed at the end, on an error and on Close.
func TestToolsFrom(t *testing.T) {
	c := cfg(write(t, "d.jsonl", jsonlOf(40)))
	c.ToolsFrom = "srv"
	d, err := Load(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Spec("x").New(); err == nil || !strings.Contains(err.Error(), "not open") {
		t.Fatalf("an episode before UseTools: %v", err)
	}
	f := &fakeSessions{}
	if err := d.UseTools(ToolProvider{Name: "other", New: f.provider().New, Tools: f.provider().Tools}); err == nil {
		t.Fatal("a provider of another name was taken")
	}
	if err := d.UseTools(ToolProvider{Name: "srv", New: f.provider().New}); err == nil || !strings.Contains(err.Error(), "lists no tools") {
		t.Fatalf("a provider without tools: %v", err)
	}
	if err := d.UseTools(f.provider()); err != nil {
		t.Fatal(err)
	}
	spec := d.Spec("x")
	envtest.Run(t, spec)
	if f.open != 0 {
		t.Fatalf("%d sessions left open by the suite", f.open)
	}
	f.seeds, f.actions, f.closes = nil, nil, 0
	ctx := context.Background()
	e, _ := spec.New()
	obs, err := e.Reset(ctx, 3)
	if err != nil || !strings.Contains(obs.System, "adder(a, b): Adds.") || obs.Text != d.Tasks[3].Prompt {
		t.Fatalf("reset: %+v %v", obs, err)
	}
	call := `<tool_call>{"name": "adder", "arguments": {"a": 1, "b": 2}}</tool_call>`
	tr, err := e.Step(ctx, call)
	if err != nil || tr.Done || tr.Role != traj.RoleTool || tr.Reward != 0 || tr.Observation != "<tool_response>42</tool_response>" || len(tr.ToolCalls) != 1 {
		t.Fatalf("a tool turn: %+v %v", tr, err)
	}
	// A turn whose call attempts are all malformed is answered here, not stepped on the server.
	tr, err = e.Step(ctx, `<tool_call>{"name": "adder", `)
	if err != nil || tr.Done || tr.Role != traj.RoleTool || !strings.HasPrefix(tr.Observation, "<tool_response>error: ") ||
		len(tr.ToolCalls) != 1 || tr.ToolCalls[0].Error == "" || len(f.actions) != 1 {
		t.Fatalf("a malformed call: %+v %v, %d steps sent", tr, err, len(f.actions))
	}
	tr, err = e.Step(ctx, d.Tasks[3].Answer)
	if err != nil || !tr.Done || tr.Reward != 1 {
		t.Fatalf("the answer: %+v %v", tr, err)
	}
	if len(f.seeds) != 1 || f.seeds[0] != "3" || len(f.actions) != 1 || f.actions[0] != call || f.closes != 1 || f.open != 0 {
		t.Fatalf("the session saw seeds %v, actions %q, %d closes, %d open", f.seeds, f.actions, f.closes, f.open)
	}
	// A session that ends before the answer fails the episode and is closed.
	f.done = true
	e.Reset(ctx, 4)
	if _, err := e.Step(ctx, call); !errors.Is(err, ErrToolSessionDone) || f.open != 0 {
		t.Fatalf("a session done early: %v, %d open", err, f.open)
	}
	// Close ends an episode in its middle.
	f.done = false
	e.Reset(ctx, 5)
	e.Step(ctx, call)
	e.(env.Closer).Close()
	if f.open != 0 {
		t.Fatalf("%d sessions open after Close", f.open)
	}

	bad := cfg("x.jsonl")
	bad.ToolsFrom, bad.Tools = "srv", []string{"calculator"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("tools and tools_from: %v", err)
	}
	bad.ToolsFrom, bad.Tools = "no such", nil
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "tools_from") {
		t.Fatalf("a bad name: %v", err)
	}
	bad.ToolsFrom, bad.MaxTurns, bad.Demo = "srv", 6, "call"
	if err := bad.Validate(); err != nil {
		t.Fatalf("max_turns and demo with tools_from: %v", err)
	}
}
