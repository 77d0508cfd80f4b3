package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

func call(name, args string) string {
	return fmt.Sprintf(`<tool_call>{"name": %q, "arguments": %s}</tool_call>`, name, args)
}

func TestWithToolsReset(t *testing.T) {
	e := WithTools(&echoEnv{}, []tool.Tool{echoTool("calc"), echoTool("search")}, ToolLimits{})
	obs, err := e.Reset(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	want := "Be brief.\ncalc(zeta, alpha): test tool calc\nsearch(zeta, alpha): test tool search\n" +
		`Call: <tool_call>{"name": ..., "arguments": {...}}</tool_call>`
	if obs.System != want {
		t.Errorf("system prompt\n%s\nwant\n%s", obs.System, want)
	}
	if obs.Text != "task b" {
		t.Errorf("text %q", obs.Text)
	}
	plain := WithTools(&echoEnv{}, nil, ToolLimits{})
	if obs, _ := plain.Reset(context.Background(), 1); obs.System != "Be brief." {
		t.Errorf("no tools: system %q", obs.System)
	}
}

func TestWithToolsStep(t *testing.T) {
	slow := &funcTool{name: "slow", call: func(ctx context.Context, _ json.RawMessage) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	}}
	infra := &funcTool{name: "infra", call: func(context.Context, json.RawMessage) (string, error) {
		return "", fmt.Errorf("start: %w", tool.Infra(errors.New("no sandbox")))
	}}
	panicky := &funcTool{name: "panicky", call: func(context.Context, json.RawMessage) (string, error) { panic("bug") }}
	tools := []tool.Tool{echoTool("echo"), slow, infra, panicky}
	lim := ToolLimits{MaxCallsPerTurn: 2, CallTimeout: 20 * time.Millisecond, MaxResultBytes: 64}
	cases := []struct {
		name      string
		action    string
		obs       string // wanted observation; "" with answer set means the action reached the inner env
		answer    bool
		calls     []traj.ToolCall
		errIs     error // wanted Step error
		errSubstr string
	}{
		{name: "answer", action: "Answer: 4", obs: "echo:Answer: 4", answer: true},
		{name: "one call", action: "x " + call("echo", `{"a": 1}`),
			obs:   `<tool_response>echo:{"a": 1}</tool_response>`,
			calls: []traj.ToolCall{{Name: "echo", Arguments: `{"a": 1}`, Result: `echo:{"a": 1}`}}},
		{name: "two calls", action: call("echo", `{}`) + call("echo", `{"b":2}`),
			obs: "<tool_response>echo:{}</tool_response>\n<tool_response>echo:{\"b\":2}</tool_response>"},
		{name: "tool error", action: call("echo", `{"fail": "bad input"}`), obs: "<tool_response>error: bad input</tool_response>"},
		{name: "unknown tool", action: call("nope", `{}`),
			obs: `<tool_response>error: unknown tool "nope" (available: echo, slow, infra, panicky)</tool_response>`},
		{name: "malformed", action: "<tool_call>{oops}</tool_call>",
			obs: "<tool_response>error: tool call is not a JSON object: syntax error at byte 2</tool_response>"},
		{name: "unterminated", action: "<tool_call>{",
			obs: "<tool_response>error: unterminated <tool_call>: no </tool_call> before the end of the turn</tool_response>"},
		{name: "too many", action: strings.Repeat(call("echo", `{}`), 3),
			obs: "<tool_response>echo:{}</tool_response>\n<tool_response>echo:{}</tool_response>\n" +
				"<tool_response>error: too many tool calls: at most 2 per turn, the rest were ignored</tool_response>"},
		{name: "result truncated", action: call("echo", `{"repeat": "ab"}`),
			obs: "<tool_response>" + strings.Repeat("ab", 25) + "…[truncated]</tool_response>"},
		{name: "call timeout", action: call("slow", `{}`), obs: "<tool_response>error: timed out after 20ms</tool_response>"},
		{name: "infra failure", action: call("infra", `{}`), errIs: tool.ErrInfra, errSubstr: "no sandbox"},
		{name: "panic", action: call("panicky", `{}`), errIs: tool.ErrInfra, errSubstr: "panicked: bug"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inner := &echoEnv{}
			e := WithTools(inner, tools, lim)
			if _, err := e.Reset(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
			tr, err := e.Step(context.Background(), tc.action)
			if tc.errIs != nil {
				if !errors.Is(err, tc.errIs) || !strings.Contains(fmt.Sprint(err), tc.errSubstr) {
					t.Fatalf("error %v, want %v containing %q", err, tc.errIs, tc.errSubstr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tr.Observation != tc.obs {
				t.Errorf("observation\n%q\nwant\n%q", tr.Observation, tc.obs)
			}
			if reached := len(inner.actions) > 0; reached != tc.answer {
				t.Errorf("action reached inner env: %v, want %v", reached, tc.answer)
			}
			if !tc.answer && (tr.Role != traj.RoleTool || tr.Done || tr.Reward != 0) {
				t.Errorf("tool transition %+v: want RoleTool, not done, reward 0", tr)
			}
			if tc.calls != nil && fmt.Sprint(tr.ToolCalls) != fmt.Sprint(tc.calls) {
				t.Errorf("tool calls %+v, want %+v", tr.ToolCalls, tc.calls)
			}
		})
	}
}

func TestWithToolsEpisode(t *testing.T) {
	ctx := context.Background()
	echo := echoTool("echo")
	inner := &echoEnv{}
	e := WithTools(inner, []tool.Tool{echo}, ToolLimits{})
	if _, err := e.Step(ctx, "x"); !errors.Is(err, ErrNotReset) {
		t.Errorf("step before reset: %v", err)
	}
	if _, err := e.Reset(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if tr, err := e.Step(ctx, "done"); err != nil || !tr.Done {
		t.Fatalf("done step: %+v %v", tr, err)
	}
	if _, err := e.Step(ctx, call("echo", "{}")); !errors.Is(err, ErrEpisodeDone) {
		t.Errorf("tool call after done: %v", err)
	}
	if _, err := e.Reset(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Step(ctx, "again"); err != nil {
		t.Errorf("step after a new reset: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.Step(cancelled, call("echo", "{}")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	if err := e.(Closer).Close(); err != nil || echo.closed != 1 || inner.closed != 1 {
		t.Errorf("Close: %v, tool closed %d, inner closed %d", err, echo.closed, inner.closed)
	}
}

func TestWithToolsPanicsOnMisuse(t *testing.T) {
	for name, f := range map[string]func(){
		"negative limit": func() { WithTools(&echoEnv{}, nil, ToolLimits{MaxResultBytes: -1}) },
		"nil tool":       func() { WithTools(&echoEnv{}, []tool.Tool{nil}, ToolLimits{}) },
		"duplicate":      func() { WithTools(&echoEnv{}, []tool.Tool{echoTool("a"), echoTool("a")}, ToolLimits{}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func TestDescribeToolsSchemaOrder(t *testing.T) {
	for _, tc := range []struct {
		schema string
		want   []string
	}{
		{`{"properties":{"b":{},"a":{"type":"x"},"c":1}}`, []string{"b", "a", "c"}},
		{`{"type":"object"}`, nil},
		{`not json`, nil},
		{`{"properties":[1]}`, nil},
		{`{"properties":{}}`, nil},
	} {
		if got := argNames(json.RawMessage(tc.schema)); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v, want %v", tc.schema, got, tc.want)
		}
	}
}

// AttachTools adds tools to the tool wrapper under the turn limit (one tool list in the prompt,
// built-in tools still reachable, tool turns counted), inserts a wrapper beneath the turn limit
// when there is none, refuses a taken name without changing the environment, and never closes
// the tools it attached.
func TestAttachTools(t *testing.T) {
	ctx := context.Background()
	builtin, extra := echoTool("calc"), echoTool("mcp_echo")
	inner := &echoEnv{}
	e, err := AttachTools(WithTurnLimit(WithTools(inner, []tool.Tool{builtin}, ToolLimits{}), 2), []tool.Tool{extra})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(toolNames(ToolsOf(e))); got != "[calc mcp_echo]" {
		t.Fatalf("tools after attaching: %s", got)
	}
	obs, err := e.Reset(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(obs.System, "Call:") != 1 || !strings.Contains(obs.System, "calc(") || !strings.Contains(obs.System, "mcp_echo(") {
		t.Fatalf("system prompt lists the tools once each:\n%s", obs.System)
	}
	tr, err := e.Step(ctx, call("mcp_echo", `{"a":1}`)+call("calc", `{}`))
	if err != nil || tr.Observation != "<tool_response>mcp_echo:{\"a\":1}</tool_response>\n<tool_response>calc:{}</tool_response>" {
		t.Fatalf("calls: %q %v", tr.Observation, err)
	}
	if tr, err := e.Step(ctx, call("mcp_echo", `{}`)); err != nil || !tr.Done || tr.Info[InfoTruncated] != TruncatedTurnLimit {
		t.Fatalf("the second tool turn must hit the turn limit: %+v %v", tr, err)
	}
	if err := e.(Closer).Close(); err != nil || builtin.closed != 1 || extra.closed != 0 || inner.closed != 1 {
		t.Fatalf("Close: %v; built-in closed %d, attached closed %d (want 1, 0), inner %d", err, builtin.closed, extra.closed, inner.closed)
	}

	// No tool wrapper: one goes beneath the turn limit.
	bare := &echoEnv{}
	e, err = AttachTools(WithStepTimeout(WithTurnLimit(bare, 1), time.Minute), []tool.Tool{extra})
	if err != nil {
		t.Fatal(err)
	}
	if len(ToolsOf(e)) != 1 {
		t.Fatalf("no tool wrapper inserted: %v", ToolsOf(e))
	}
	if _, err := e.Reset(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if tr, err := e.Step(ctx, call("mcp_echo", `{}`)); err != nil || !tr.Done || len(bare.actions) != 0 {
		t.Fatalf("a tool turn under a limit of 1 must end the episode without reaching the task: %+v %v %v", tr, err, bare.actions)
	}
	if _, err := AttachTools(bare, []tool.Tool{extra}); err != nil {
		t.Fatalf("an environment with no wrapper at all: %v", err)
	}

	// Taken names and nil tools.
	base := WithTools(&echoEnv{}, []tool.Tool{builtin}, ToolLimits{})
	for name, tools := range map[string][]tool.Tool{
		"clash with a built-in tool": {echoTool("calc")},
		"clash among the new tools":  {echoTool("x"), echoTool("x")},
		"nil tool":                   {nil},
	} {
		if _, err := AttachTools(base, tools); err == nil {
			t.Errorf("%s: accepted", name)
		} else if name != "nil tool" && !strings.Contains(err.Error(), "already attached") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got := fmt.Sprint(toolNames(ToolsOf(base))); got != "[calc]" {
		t.Fatalf("a refused attachment changed the environment: %s", got)
	}
}

func toolNames(tools []tool.Tool) []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = t.Name()
	}
	return out
}
