package env

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/agentrl/agentrl/traj"
)

// echoEnv records what reaches it: each Step answers "echo:" + action and ends the episode when
// the action is "done".
type echoEnv struct {
	actions []string
	closed  int
}

func (e *echoEnv) Reset(_ context.Context, seed int64) (Observation, error) {
	e.actions = nil
	return Observation{System: "Be brief.", Text: "task " + string(rune('a'+seed%26))}, nil
}

func (e *echoEnv) Step(_ context.Context, action string) (Transition, error) {
	e.actions = append(e.actions, action)
	done := action == "done"
	tr := Transition{Role: traj.RoleEnv, Observation: "echo:" + action, Done: done}
	if done {
		tr.Reward = 1
		tr.Info = map[string]string{InfoSuccess: "true"}
	}
	return tr, nil
}

func (e *echoEnv) Close() error { e.closed++; return nil }

// funcTool is a tool whose Call is a function.
type funcTool struct {
	name   string
	call   func(ctx context.Context, args json.RawMessage) (string, error)
	closed int
}

func (t *funcTool) Name() string        { return t.name }
func (t *funcTool) Description() string { return "test tool " + t.name }
func (t *funcTool) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"number"}}}`)
}
func (t *funcTool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	return t.call(ctx, args)
}
func (t *funcTool) Close() error { t.closed++; return nil }

func echoTool(name string) *funcTool {
	return &funcTool{name: name, call: func(_ context.Context, args json.RawMessage) (string, error) {
		var m map[string]any
		_ = json.Unmarshal(args, &m)
		if s, ok := m["fail"].(string); ok {
			return "", errors.New(s)
		}
		if s, ok := m["repeat"].(string); ok {
			return strings.Repeat(s, 1000), nil
		}
		return name + ":" + string(args), nil
	}}
}
