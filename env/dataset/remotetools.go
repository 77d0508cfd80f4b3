package dataset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// ToolProvider is the remote environment a dataset's episodes call tools on (Config.ToolsFrom):
// New opens one of its sessions (a pool's episode environment, with its deadlines and slots) and
// Tools are the tools its metadata lists.
type ToolProvider struct {
	Name  string
	New   func() (env.Env, error)
	Tools []ToolInfo
}

// ToolInfo is one tool of a ToolProvider, as its server's metadata describes it.
type ToolInfo struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// Errors of an episode whose tools are a remote environment's: each makes the episode env_error.
var (
	// ErrToolSessionDone: the remote session ended (or answered as the environment, not as a
	// tool) before the episode's final answer.
	ErrToolSessionDone = errors.New("dataset: the tool provider's session ended before the final answer")
)

// UseTools makes the dataset's episodes call tools on p, the remote environment its
// Config.ToolsFrom names; it must be called before the dataset's spec is used.
func (d *Data) UseTools(p ToolProvider) error {
	switch {
	case d.Config.ToolsFrom == "":
		return fmt.Errorf("dataset: tools from %s: the dataset names no tools_from", p.Name)
	case p.Name != d.Config.ToolsFrom:
		return fmt.Errorf("dataset: tasks.tools_from is %q, not %q", d.Config.ToolsFrom, p.Name)
	case p.New == nil:
		return fmt.Errorf("dataset: tools from %s: no way to open a session", p.Name)
	case len(p.Tools) == 0:
		return fmt.Errorf("dataset: tasks.tools_from %s: its servers' metadata lists no tools", p.Name)
	}
	ts := make([]tool.Tool, len(p.Tools))
	for i, t := range p.Tools {
		ts[i] = describedTool{t}
	}
	d.provider = &provider{ToolProvider: p, prompt: env.DescribeTools(ts)}
	return nil
}

type provider struct {
	ToolProvider
	prompt string // the tools as the system prompt describes them
}

// describedTool is a remote tool as DescribeTools reads it; it is never called here.
type describedTool struct{ info ToolInfo }

func (t describedTool) Name() string            { return t.info.Name }
func (t describedTool) Description() string     { return t.info.Description }
func (t describedTool) Schema() json.RawMessage { return t.info.Parameters }
func (t describedTool) Call(context.Context, json.RawMessage) (string, error) {
	return "", fmt.Errorf("dataset: tool %s is answered by its remote environment", t.info.Name)
}

// remoteToolEnv is one episode of a dataset whose tools are a remote environment's: Reset opens
// a session there (reset with the episode's seed); a turn with a tool call goes to the session's
// step and its tool observation answers it (a turn whose call attempts are all malformed is
// answered here, with their errors); the first turn without one is graded by the dataset's
// verifier and never sent there. The session is closed at the episode's end, at the
// next Reset, on any error and on Close.
type remoteToolEnv struct {
	task *taskEnv
	p    *provider
	sess env.Env
}

func (e *remoteToolEnv) Reset(ctx context.Context, seed int64) (env.Observation, error) {
	e.end()
	obs, err := e.task.Reset(ctx, seed)
	if err != nil {
		return env.Observation{}, err
	}
	s, err := e.p.New()
	if err == nil {
		e.sess = s
		_, err = s.Reset(ctx, seed)
	}
	if err != nil {
		e.task.cur = nil // not reset: the episode has no session
		e.end()
		return env.Observation{}, fmt.Errorf("dataset: tools from %s: %w", e.p.Name, err)
	}
	if obs.System != "" {
		obs.System += "\n"
	}
	obs.System += e.p.prompt
	return obs, nil
}

func (e *remoteToolEnv) Step(ctx context.Context, action string) (env.Transition, error) {
	switch {
	case e.task.cur == nil:
		return env.Transition{}, env.ErrNotReset
	case e.task.done:
		return env.Transition{}, env.ErrEpisodeDone
	}
	calls := tool.ParseCalls(action, tool.ParseLimits{})
	if calls == nil {
		defer e.end()
		return e.task.Step(ctx, action)
	}
	if malformed(calls) {
		return answerMalformed(calls), nil
	}
	if e.sess == nil {
		return env.Transition{}, fmt.Errorf("dataset: tools from %s: %w", e.p.Name, ErrToolSessionDone)
	}
	tr, err := e.sess.Step(ctx, action)
	switch {
	case err != nil:
		err = fmt.Errorf("dataset: tools from %s: %w", e.p.Name, err)
	case tr.Done:
		err = fmt.Errorf("dataset: tools from %s: %w (its step answered done)", e.p.Name, ErrToolSessionDone)
	case tr.Role != traj.RoleTool:
		err = fmt.Errorf("dataset: tools from %s: %w (its step answered as %q, not as a tool)", e.p.Name, ErrToolSessionDone, tr.Role)
	}
	if err != nil {
		e.end()
		return env.Transition{}, err
	}
	// The server's reward and info are its own task's: the dataset's verifier grades the episode.
	return env.Transition{Observation: tr.Observation, Role: traj.RoleTool, ToolCalls: tr.ToolCalls}, nil
}

// malformed reports whether no call attempt of a turn is well-formed.
func malformed(calls []tool.Call) bool {
	for _, c := range calls {
		if c.Err == nil {
			return false
		}
	}
	return true
}

// answerMalformed answers a turn whose call attempts are all malformed (an unterminated tag, bad
// JSON, …) as the built-in tools' wrapper does, one error response per attempt, without a step on
// the server: there is no call it could run, and a server may take such a turn for an answer.
func answerMalformed(calls []tool.Call) env.Transition {
	tr := env.Transition{Role: traj.RoleTool}
	var obs strings.Builder
	for i, c := range calls {
		tr.ToolCalls = append(tr.ToolCalls, traj.ToolCall{Name: c.Name, Arguments: c.Raw, Error: c.Err.Error()})
		if i > 0 {
			obs.WriteByte('\n')
		}
		obs.WriteString("<tool_response>error: " + c.Err.Error() + "</tool_response>")
	}
	tr.Observation = obs.String()
	return tr
}

// end closes the session, if any.
func (e *remoteToolEnv) end() {
	if e.sess == nil {
		return
	}
	if c, ok := e.sess.(env.Closer); ok {
		c.Close() // the pool counts a failed close; the episode is whole
	}
	e.sess = nil
}

func (e *remoteToolEnv) Close() error {
	e.end()
	return nil
}
