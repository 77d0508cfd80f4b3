package env

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// Defaults of ToolLimits, used where a field is zero.
const (
	DefaultMaxCallsPerTurn = tool.DefaultMaxCalls    // calls one assistant turn may make
	DefaultCallTimeout     = 10 * time.Second        // per tool call
	DefaultMaxArgBytes     = tool.DefaultMaxArgBytes // JSON between the tags
	DefaultMaxResultBytes  = 4 << 10                 // result text shown to the model
)

// ToolLimits bounds the tool calls of one assistant turn. Zero fields take the defaults above.
type ToolLimits struct {
	MaxCallsPerTurn int
	CallTimeout     time.Duration
	MaxArgBytes     int
	MaxResultBytes  int
}

// Validate rejects negative limits.
func (l ToolLimits) Validate() error {
	if l.MaxCallsPerTurn < 0 || l.CallTimeout < 0 || l.MaxArgBytes < 0 || l.MaxResultBytes < 0 {
		return fmt.Errorf("env: tool limits must not be negative: %+v", l)
	}
	return nil
}

// WithDefaults returns l with every zero field set to its default.
func (l ToolLimits) WithDefaults() ToolLimits {
	if l.MaxCallsPerTurn == 0 {
		l.MaxCallsPerTurn = DefaultMaxCallsPerTurn
	}
	if l.CallTimeout == 0 {
		l.CallTimeout = DefaultCallTimeout
	}
	if l.MaxArgBytes == 0 {
		l.MaxArgBytes = DefaultMaxArgBytes
	}
	if l.MaxResultBytes == 0 {
		l.MaxResultBytes = DefaultMaxResultBytes
	}
	return l
}

// toolEnv is the WithTools wrapper.
type toolEnv struct {
	inner  Env
	tools  []tool.Tool
	byName map[string]tool.Tool
	lim    ToolLimits
	prompt string // tool descriptions appended to the system prompt
	// format is the model's tool-call format when it is not Hermes (SetToolFormat, toolformat.go).
	format tool.CallFormat

	reset, done bool
}

// WithTools attaches tools to inner. Reset appends a compact description of the tools to the
// system prompt. Step runs the tool calls of an action that contains any (see tool.ParseCalls)
// and answers with one <tool_response> per call attempt, in order, as a RoleTool transition with
// zero reward; an action without a call goes to inner.Step as the agent's answer.
//
// Malformed calls, unknown tools, tool errors and per-call timeouts are observations
// ("<tool_response>error: ...</tool_response>"), never Go errors. Step returns an error only for
// infrastructure failures: a tool error wrapping tool.ErrInfra, a tool that panics, or ctx ending.
// Calls run one after another under ctx with lim.CallTimeout each; a tool is expected to honour
// its context — one that does not is caught only by WithStepTimeout.
//
// The wrapper owns the tools: Close closes every tool that implements Closer, then inner. A tool
// shared between instances must therefore not implement Close. WithTools panics on invalid limits,
// a nil tool or duplicate names: those are programming errors (validate configured limits first).
func WithTools(inner Env, tools []tool.Tool, lim ToolLimits) Env {
	if err := lim.Validate(); err != nil {
		panic(err)
	}
	e := &toolEnv{inner: inner, tools: tools, byName: make(map[string]tool.Tool, len(tools)), lim: lim.WithDefaults()}
	for _, t := range tools {
		if t == nil {
			panic("env: WithTools: nil tool")
		}
		if _, dup := e.byName[t.Name()]; dup {
			panic(fmt.Sprintf("env: WithTools: duplicate tool %q", t.Name()))
		}
		e.byName[t.Name()] = t
	}
	e.prompt = DescribeTools(tools)
	return e
}

func (e *toolEnv) Reset(ctx context.Context, seed int64) (Observation, error) {
	obs, err := e.inner.Reset(ctx, seed)
	if err != nil {
		return Observation{}, err
	}
	e.reset, e.done = true, false
	if e.prompt != "" && e.format == nil {
		if obs.System != "" {
			obs.System += "\n"
		}
		obs.System += e.prompt
	}
	return obs, nil
}

func (e *toolEnv) Step(ctx context.Context, action string) (Transition, error) {
	switch {
	case !e.reset:
		return Transition{}, ErrNotReset
	case e.done:
		return Transition{}, ErrEpisodeDone
	}
	calls := e.parse(action)
	if calls == nil {
		tr, err := e.inner.Step(ctx, action)
		if err == nil && tr.Done {
			e.done = true
		}
		return tr, err
	}
	tr := Transition{Role: traj.RoleTool, ToolCalls: make([]traj.ToolCall, 0, len(calls))}
	var obs strings.Builder
	for i, c := range calls {
		tc, err := e.run(ctx, c)
		if err != nil {
			return Transition{}, fmt.Errorf("env: tool call %d (%s): %w", i, c.Name, err)
		}
		tr.ToolCalls = append(tr.ToolCalls, tc)
		if i > 0 {
			obs.WriteByte('\n')
		}
		if e.format == nil {
			obs.WriteString("<tool_response>")
		}
		if tc.Error != "" {
			obs.WriteString("error: " + tc.Error)
		} else {
			obs.WriteString(tc.Result)
		}
		if e.format == nil {
			obs.WriteString("</tool_response>")
		}
	}
	tr.Observation = obs.String()
	return tr, nil
}

// run executes one parsed call. The returned error is an infrastructure failure; everything the
// model caused is in ToolCall.Error.
func (e *toolEnv) run(ctx context.Context, c tool.Call) (tc traj.ToolCall, err error) {
	tc = traj.ToolCall{Name: c.Name, Arguments: string(c.Arguments)}
	if c.Err != nil {
		tc.Arguments = c.Raw
		tc.Error = c.Err.Error()
		return tc, nil
	}
	t, ok := e.byName[c.Name]
	if !ok {
		tc.Error = fmt.Sprintf("%v %q (available: %s)", tool.ErrUnknownTool, truncate(c.Name, 64), strings.Join(e.names(), ", "))
		return tc, nil
	}
	if err := ctx.Err(); err != nil {
		return tc, err
	}
	callCtx, cancel := context.WithTimeout(ctx, e.lim.CallTimeout)
	defer cancel()
	res, callErr := callTool(callCtx, t, c)
	switch {
	case callErr == nil:
		tc.Result = truncate(res, e.lim.MaxResultBytes)
	case errors.Is(callErr, tool.ErrInfra):
		return tc, callErr
	case ctx.Err() != nil: // the caller's deadline or cancellation, not this call's
		return tc, fmt.Errorf("%w (tool said: %v)", ctx.Err(), callErr)
	case callCtx.Err() != nil:
		tc.Error = fmt.Sprintf("timed out after %v", e.lim.CallTimeout)
	default:
		tc.Error = truncate(callErr.Error(), e.lim.MaxResultBytes)
	}
	return tc, nil
}

// callTool runs t, turning a panic (a bug in the tool, not the model's doing) into an
// infrastructure error so one bad tool cannot take the trainer down.
func callTool(ctx context.Context, t tool.Tool, c tool.Call) (res string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = tool.Infra(fmt.Errorf("tool %s panicked: %v", c.Name, p))
		}
	}()
	return t.Call(ctx, c.Arguments)
}

func (e *toolEnv) names() []string {
	names := make([]string, len(e.tools))
	for i, t := range e.tools {
		names[i] = t.Name()
	}
	return names
}

// Close closes the tools that hold resources, then inner, and reports the first error.
func (e *toolEnv) Close() error {
	var errs []error
	for _, t := range e.tools {
		if c, ok := t.(Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("env: close tool %s: %w", t.Name(), err))
			}
		}
	}
	if err := closeInner(e.inner); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// AttachTools adds tools to e, a fresh environment (before its first Reset), and returns the
// environment to use in its place. When e's tools come from WithTools under this package's
// wrappers (turn limit, step timeout, observation cap) — as those of the built-in environments
// that have tools do — the tools join that wrapper: the model sees one tool list, every tool runs under the
// environment's ToolLimits, and tool turns count toward its turn limit. An environment without
// tools gets a WithTools wrapper with default limits just inside those wrappers. (A tool wrapper
// hidden behind a wrapper from another package cannot be found; the new wrapper then goes
// outside it and its tools would be unreachable, so such environments should attach their
// tools themselves.)
//
// The tools are not owned: Close does not close them, so one tool may serve many instances.
// A nil tool, or a name that is already taken (by e's tools or another of tools), is an error
// naming it, and e is left unchanged.
func AttachTools(e Env, tools []tool.Tool) (Env, error) {
	if len(tools) == 0 {
		return e, nil
	}
	te := findToolEnv(e)
	taken := map[string]bool{}
	if te != nil {
		for name := range te.byName {
			taken[name] = true
		}
	}
	for _, t := range tools {
		if t == nil {
			return nil, errors.New("env: AttachTools: nil tool")
		}
		if taken[t.Name()] {
			return nil, fmt.Errorf("env: AttachTools: tool %q is already attached", t.Name())
		}
		taken[t.Name()] = true
	}
	shared := make([]tool.Tool, len(tools))
	for i, t := range tools {
		shared[i] = sharedTool{t}
	}
	if te != nil {
		te.tools = append(te.tools[:len(te.tools):len(te.tools)], shared...)
		for _, t := range shared {
			te.byName[t.Name()] = t
		}
		te.prompt = DescribeTools(te.tools)
		return e, nil
	}
	// No tool wrapper: put one beneath this package's wrappers, on the bare environment.
	cur := &e
	for p := innerOf(*cur); p != nil; p = innerOf(*cur) {
		cur = p
	}
	*cur = WithTools(*cur, shared, ToolLimits{})
	return e, nil
}

// ToolsOf returns the tools of e's tool wrapper (see AttachTools for where it is looked for),
// or nil when it has none.
func ToolsOf(e Env) []tool.Tool {
	te := findToolEnv(e)
	if te == nil {
		return nil
	}
	return append([]tool.Tool(nil), te.tools...)
}

// findToolEnv returns the WithTools wrapper of e under this package's other wrappers, or nil.
func findToolEnv(e Env) *toolEnv {
	for {
		if w, ok := e.(*toolEnv); ok {
			return w
		}
		p := innerOf(e)
		if p == nil {
			return nil
		}
		e = *p
	}
}

// innerOf returns where this package's turn-limit, step-timeout, observation-cap and
// simulated-latency wrappers hold the environment they wrap, or nil when e is none of them.
func innerOf(e Env) *Env {
	switch w := e.(type) {
	case *turnLimitEnv:
		return &w.inner
	case *timeoutEnv:
		return &w.inner
	case *obsCapEnv:
		return &w.inner
	case *latencyEnv:
		return &w.inner
	case *toolLatencyEnv:
		return &w.inner
	}
	return nil
}

// sharedTool hides a tool's Close from the tool wrapper, which closes the tools it owns.
type sharedTool struct{ tool.Tool }
