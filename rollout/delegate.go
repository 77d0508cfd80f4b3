package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// Rewards of sub-episodes (DelegateConfig.Reward).
const (
	// RewardParent: a sub-episode is trained with its parent's outcome only.
	RewardParent = "parent"
	// RewardOwn: a sub-episode's answer is also graded by the environment (env.SubtaskGrader)
	// and that reward is the turn reward of its last turn; sub-tasks the environment cannot
	// grade share the parent's outcome only.
	RewardOwn = "own"
)

// Defaults and bounds of DelegateConfig.
const (
	DefaultDelegateTool  = "delegate"
	DefaultMaxPerTurn    = 4
	DefaultMaxPerEpisode = 8
	MaxDelegateDepth     = 4
	MaxDelegatePerTurn   = 16
	MaxDelegatePerEp     = 256
	// maxAnswerBytes caps a sub-agent's answer shown to its parent.
	maxAnswerBytes = env.DefaultMaxResultBytes
)

// DelegateConfig turns sub-agents on (the rollout block's delegate:). Delegation is an action:
// the policy calls a built-in tool (named Tool) whose argument is a self-contained sub-task,
// {"task": "..."}; a sub-episode of the same policy runs it with a fresh context (a sub-agent's
// system prompt, the environment's tools that Tools allows, and the sub-task as the user
// message), and the sub-agent's answer — its first turn without a tool call — is the tool
// response. The delegate calls of one turn run in parallel; the parent waits for all of them.
// Tool calls of the sub-agents go through one lock per root episode (the environment's tools
// need not be safe for concurrent use); their generation runs in parallel, through the parent's
// generator, which must then be safe for concurrent use (the engine and the remote generator
// are; an AgentGenerator is not: a delegating expert's demonstrations are played by an
// ExpertTree, and other experts' without delegation).
// Sub-agents do not fold. When the root's environment has a simulated latency (env.WithLatency,
// a phase environment's latency block), a sub-agent's turn that calls the environment's tools
// waits a draw of it after the call, outside the lock (env.WithToolLatency): the tools are the
// environment's, and parallel sub-agents wait at once. The draws depend on the task seed and the
// sub-episode's place in the tree only.
//
// A sub-episode is recorded inside its parent's trajectory, as further training samples after
// the parent's own (the mechanism of traj.Trajectory.Samples), with a "sub_episode" meta entry
// linking it to its parent (id, parent id, depth, turn, token range, status, reward, model
// calls, critical path): trained with the parent's outcome, and with Reward own also its graded
// answer as a turn reward. A sub-episode that fails (env_error, timeout) is an error
// observation for its parent and its tokens are not trained. Depth, the number of sub-episodes
// of one root episode and each sub-episode's context are bounded; a call past a bound is an
// error observation. Cancelling the parent cancels its sub-episodes. nil (the default) is no
// delegation: the loop is exactly as without this block.
type DelegateConfig struct {
	// Tool is the delegate tool's name ("delegate" when empty).
	Tool string `yaml:"tool,omitempty"`
	// MaxDepth is how deep sub-agents nest: 1 lets the root delegate and no sub-agent.
	MaxDepth int `yaml:"max_depth"`
	// MaxPerTurn bounds the delegate calls of one turn (4 when 0).
	MaxPerTurn int `yaml:"max_per_turn,omitempty"`
	// MaxPerEpisode bounds the sub-episodes of one root episode, at every depth (8 when 0).
	MaxPerEpisode int `yaml:"max_per_episode,omitempty"`
	// MaxTokens is each sub-episode's max_context (rollout.max_context when 0).
	MaxTokens int `yaml:"max_tokens,omitempty"`
	// Reward is parent or own ("parent" when empty).
	Reward string `yaml:"reward,omitempty"`
	// Tools names the environment's tools a sub-agent may call (all of them when empty).
	Tools []string `yaml:"tools,omitempty"`
}

// Validate reports settings that cannot work with the episode bounds of c.
func (d *DelegateConfig) Validate(c Config) error {
	if !foldToolRE.MatchString(d.tool()) {
		return fmt.Errorf("rollout: delegate.tool %q must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or '_'", d.Tool)
	}
	if c.Context != nil && c.Context.tool() == d.tool() {
		return fmt.Errorf("rollout: delegate.tool and context.tool are both %q", d.tool())
	}
	switch {
	case d.MaxDepth < 1 || d.MaxDepth > MaxDelegateDepth:
		return fmt.Errorf("rollout: delegate.max_depth %d must be in [1, %d]", d.MaxDepth, MaxDelegateDepth)
	case d.MaxPerTurn < 0 || d.MaxPerTurn > MaxDelegatePerTurn:
		return fmt.Errorf("rollout: delegate.max_per_turn %d must be in [0, %d] (0 means %d)", d.MaxPerTurn, MaxDelegatePerTurn, DefaultMaxPerTurn)
	case d.MaxPerEpisode < 0 || d.MaxPerEpisode > MaxDelegatePerEp:
		return fmt.Errorf("rollout: delegate.max_per_episode %d must be in [0, %d] (0 means %d)", d.MaxPerEpisode, MaxDelegatePerEp, DefaultMaxPerEpisode)
	case d.MaxTokens < 0 || d.MaxTokens > c.MaxContext || d.MaxTokens > 0 && d.MaxTokens < 2:
		return fmt.Errorf("rollout: delegate.max_tokens %d must be 0 or in [2, max_context %d]", d.MaxTokens, c.MaxContext)
	}
	switch d.Reward {
	case "", RewardParent, RewardOwn:
	default:
		return fmt.Errorf("rollout: delegate.reward %q must be parent or own", d.Reward)
	}
	seen := map[string]bool{}
	for _, t := range d.Tools {
		if t == "" || seen[t] {
			return fmt.Errorf("rollout: delegate.tools: names must be non-empty and distinct, got %q", d.Tools)
		}
		seen[t] = true
	}
	return nil
}

// ToolName is the delegate tool's name (Tool, or "delegate").
func (d *DelegateConfig) ToolName() string { return d.tool() }

func (d *DelegateConfig) tool() string {
	if d.Tool == "" {
		return DefaultDelegateTool
	}
	return d.Tool
}

func (d *DelegateConfig) perTurn() int {
	if d.MaxPerTurn == 0 {
		return DefaultMaxPerTurn
	}
	return d.MaxPerTurn
}

func (d *DelegateConfig) perEpisode() int {
	if d.MaxPerEpisode == 0 {
		return DefaultMaxPerEpisode
	}
	return d.MaxPerEpisode
}

// subAgentPrompt opens a sub-agent's system prompt.
const subAgentPrompt = "You are a sub-agent: solve the task you are given and reply with the answer alone; it goes back to the agent that asked."

// delegator is one episode's delegation state (Config.Delegate).
type delegator struct {
	cfg   *DelegateConfig
	depth int // 0 for a root episode
	root  *delegateRoot
	tools []tool.Tool // what the episode's sub-agents may call
	grade env.SubtaskGrader
	task  Task
	// children are the finished sub-episodes, in the order their calls were written.
	children []*child
	seq      int // sub-episodes started by this episode
	// calls counts this episode's generate calls; critical the model calls on its longest chain.
	calls, critical int
	total           int // model calls of the episode and all its sub-episodes
}

// delegateRoot is shared by a root episode and all of its sub-episodes.
type delegateRoot struct {
	budget atomic.Int64 // sub-episodes left
	toolMu sync.Mutex   // serializes the sub-agents' tool calls
	id     string       // the root trajectory's
	// latency is the root environment's simulated latency (env.WithLatency), which each
	// sub-agent turn that calls the environment's tools waits too; nil when it has none.
	latency *env.LatencyConfig
}

// subLatencySeed seeds the simulated latency of the sub-episode id of a root episode of task
// seed: it depends on the task seed and the sub-episode's place in the root's tree (its id less
// the root's), as the root's own latency depends on the task seed alone.
func (r *delegateRoot) subLatencySeed(taskSeed int64, id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(strings.TrimPrefix(id, r.id)))
	return h.Sum64() ^ uint64(taskSeed)*0x9e37_79b9_7f4a_7c15
}

// child is one finished sub-episode.
type child struct {
	t      *traj.Trajectory
	turn   int
	answer string
	sub    *delegator
}

func newDelegator(cfg *DelegateConfig, e env.Env, t Task, depth int, root *delegateRoot, grade env.SubtaskGrader) *delegator {
	if root == nil {
		root = &delegateRoot{id: t.id()}
		root.budget.Store(int64(cfg.perEpisode()))
		if c, ok := env.LatencyOf(e); ok {
			root.latency = &c
		}
	}
	if grade == nil {
		grade = env.SubtaskGraderOf(e)
	}
	d := &delegator{cfg: cfg, depth: depth, root: root, grade: grade, task: t}
	allowed := map[string]bool{}
	for _, n := range cfg.Tools {
		allowed[n] = true
	}
	for _, tl := range env.ToolsOf(e) {
		if lt, ok := tl.(lockedTool); ok && lt.mu == &root.toolMu {
			d.tools = append(d.tools, lt) // a sub-agent's tool, already under the root's lock
		} else if len(allowed) == 0 || allowed[tl.Name()] {
			d.tools = append(d.tools, lockedTool{tl, &root.toolMu})
		}
	}
	return d
}

// canDelegate reports whether this episode's policy may delegate (its depth is under the limit).
func (d *delegator) canDelegate() bool { return d.depth < d.cfg.MaxDepth }

// prompt adds the delegate tool's line to a system prompt.
func (d *delegator) prompt(system string) string {
	if !d.canDelegate() {
		return system
	}
	line := fmt.Sprintf(`%s(task): hand a self-contained sub-task to a sub-agent with a fresh context; its answer comes back as the tool response. The %s calls of one turn (at most %d) run in parallel.`,
		d.cfg.tool(), d.cfg.tool(), d.cfg.perTurn())
	if !strings.Contains(system, tool.OpenTag) {
		line += "\nCall: " + tool.OpenTag + `{"name": ..., "arguments": {...}}` + tool.CloseTag
	}
	if system != "" {
		system += "\n"
	}
	return system + line
}

// find returns the call attempts of action when one of them names the delegate tool.
func (d *delegator) find(action string) ([]tool.Call, bool) {
	if !strings.Contains(action, d.cfg.tool()) {
		return nil, false
	}
	calls := tool.ParseCalls(action, tool.ParseLimits{MaxCalls: d.cfg.perTurn()})
	for _, c := range calls {
		if c.Name == d.cfg.tool() {
			return calls, true
		}
	}
	return nil, false
}

// Delegate arguments that cannot be used.
var (
	ErrDelegateArgs  = errors.New(`arguments must be {"task": "<text>"}`)
	ErrDelegateEmpty = errors.New("the task is empty")
)

// parseDelegateArgs reads {"task": "..."} and returns the task without surrounding space.
func parseDelegateArgs(args json.RawMessage) (string, error) {
	var a struct {
		Task *string `json:"task"`
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return "", fmt.Errorf("%w: %v", ErrDelegateArgs, err)
	}
	if a.Task == nil {
		return "", fmt.Errorf("%w: no task", ErrDelegateArgs)
	}
	s := strings.TrimSpace(*a.Task)
	if s == "" {
		return "", ErrDelegateEmpty
	}
	return s, nil
}

// delegateTurn runs the delegate calls of turn tu in parallel and answers with their results.
// done and err are as for turn.
func (ep *episode) delegateTurn(turn int, tu traj.Turn, calls []tool.Call) (done bool, err error) {
	d := ep.deleg
	name := d.cfg.tool()
	tcs := make([]traj.ToolCall, len(calls))
	tasks := make([]string, len(calls))
	mixed := false
	for _, c := range calls {
		if c.Name != "" && c.Name != name {
			mixed = true
		}
	}
	for i, c := range calls {
		tcs[i] = traj.ToolCall{Name: c.Name, Arguments: string(c.Arguments)}
		if c.Err != nil {
			tcs[i].Arguments = c.Raw
		}
		switch {
		case mixed:
			tcs[i].Error = fmt.Sprintf("%s calls cannot share a turn with other tool calls; nothing was run", name)
		case c.Err != nil:
			tcs[i].Error = c.Err.Error()
		case !d.canDelegate():
			tcs[i].Error = fmt.Sprintf("%s: delegation is limited to depth %d", name, d.cfg.MaxDepth)
		default:
			task, perr := parseDelegateArgs(c.Arguments)
			if perr != nil {
				tcs[i].Error = fmt.Sprintf("%s: %v", name, perr)
			} else if d.root.budget.Add(-1) < 0 {
				d.root.budget.Add(1)
				tcs[i].Error = fmt.Sprintf("%s: the limit of %d sub-episodes per episode is reached", name, d.cfg.perEpisode())
			} else {
				tasks[i] = task
			}
		}
	}
	ep.lap(&ep.t.Timings.Tokenize)
	results := make([]*child, len(calls))
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, task := range tasks {
		if task == "" {
			continue
		}
		d.seq++
		seq := d.seq
		wg.Go(func() {
			results[i], errs[i] = ep.r.subEpisode(ep.ectx, ep, task, seq, turn)
		})
	}
	wg.Wait()
	ep.lap(&ep.t.Timings.Env)
	longest := 0
	for i, res := range results {
		if res == nil {
			continue
		}
		if errs[i] != nil {
			// A broken policy or the caller's cancellation ends the parent too.
			return true, ep.fail("delegate", errs[i])
		}
		d.children = append(d.children, res)
		longest = max(longest, res.sub.critical)
		d.total += res.sub.total
		ct := res.t
		switch {
		case ct.Status.Failed():
			tcs[i].Error = fmt.Sprintf("the sub-episode failed (%s): %s", ct.Status, ct.Error)
		case res.answer == "":
			tcs[i].Error = fmt.Sprintf("the sub-episode ended without an answer (%s: %s)", ct.Status, ct.Error)
		default:
			tcs[i].Result = truncateBytes(res.answer, maxAnswerBytes)
		}
	}
	if err := ep.ctx.Err(); err != nil {
		return true, ep.fail("delegate", err)
	}
	d.critical += longest
	var obs strings.Builder
	for i, tc := range tcs {
		if i > 0 {
			obs.WriteByte('\n')
		}
		obs.WriteString("<tool_response>")
		if tc.Error != "" {
			obs.WriteString("error: " + tc.Error)
		} else {
			obs.WriteString(tc.Result)
		}
		obs.WriteString("</tool_response>")
	}
	return ep.answer(turn, tu, env.Transition{Observation: obs.String(), Role: traj.RoleTool, ToolCalls: tcs})
}

// truncateBytes cuts s to at most n bytes on a rune boundary.
func truncateBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…[truncated]"
}

// subEnv is a sub-agent's environment: the sub-task as the user message; the first action
// without a tool call is the answer and ends the sub-episode.
type subEnv struct {
	task   string
	grade  env.SubtaskGrader
	own    bool
	answer string
	done   bool
}

func (e *subEnv) Reset(ctx context.Context, _ int64) (env.Observation, error) {
	return env.Observation{System: subAgentPrompt, Text: e.task}, nil
}

func (e *subEnv) Step(ctx context.Context, action string) (env.Transition, error) {
	if e.done {
		return env.Transition{}, env.ErrEpisodeDone
	}
	e.done = true
	e.answer = strings.TrimSpace(action)
	tr := env.Transition{Role: traj.RoleEnv, Done: true}
	if e.own && e.grade != nil {
		if r, ok := e.grade.GradeSubtask(e.task, e.answer); ok {
			tr.Reward = r
			tr.Info = map[string]string{env.InfoSuccess: strconv.FormatBool(r > 0)}
		}
	}
	return tr, nil
}

// lockedTool runs a tool under the root episode's lock.
type lockedTool struct {
	tool.Tool
	mu *sync.Mutex
}

func (t lockedTool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.Tool.Call(ctx, args)
}

// subEpisode runs one sub-task of parent as a sub-episode of the same policy.
func (r *Runner) subEpisode(ctx context.Context, parent *episode, task string, seq, turn int) (*child, error) {
	d := parent.deleg
	se := &subEnv{task: task, grade: d.grade, own: d.cfg.Reward == RewardOwn}
	var e env.Env = se
	id := parent.t.ID + "." + strconv.Itoa(seq)
	if len(d.tools) > 0 {
		e = env.WithTools(se, d.tools, env.ToolLimits{})
		if c := d.root.latency; c != nil {
			// The tools are the environment's: a sub-agent's turn that calls them waits its
			// simulated latency, outside the root's tool lock, so parallel sub-agents wait at once.
			e = env.WithToolLatency(e, *c, d.root.subLatencySeed(d.task.Seed, id))
		}
	}
	cr := *r
	cr.Cfg.Context = nil // sub-agents do not fold
	if d.cfg.MaxTokens > 0 {
		cr.Cfg.MaxContext = d.cfg.MaxTokens
	}
	cr.OnEpisode = nil
	t := d.task
	t.Index ^= seq<<16 ^ (d.depth+1)<<28
	sub := &subRun{
		id:    id,
		depth: d.depth + 1,
		root:  d.root,
		grade: d.grade,
		gen:   parent.gen,
	}
	tr, err := cr.episode(ctx, e, t, sub)
	if c, ok := e.(env.Closer); ok {
		_ = c.Close() // the tools are the parent's (shared, not closed)
	}
	return &child{t: tr, turn: turn, answer: se.answer, sub: sub.deleg}, err
}

// subRun is what a sub-episode inherits from its parent.
type subRun struct {
	id    string
	depth int
	root  *delegateRoot
	grade env.SubtaskGrader
	gen   infer.Generator
	deleg *delegator // the sub-episode's own, set when it starts
}

// Meta keys of delegation.
const (
	// MetaSubEpisode is one entry per sub-episode, in the root's trajectory (SubEpisode).
	MetaSubEpisode = "sub_episode"
	// MetaModelCalls is the model calls of the episode and its sub-episodes.
	MetaModelCalls = "model_calls"
	// MetaCriticalCalls is the model calls on the longest chain (the critical path).
	MetaCriticalCalls = "critical_calls"
)

// SubEpisode is one sub-episode recorded in a root trajectory.
type SubEpisode struct {
	ID, Parent string
	Depth      int
	Turn       int // the parent's turn that delegated it
	// Start and End bound its tokens in the root trajectory (Start == End when not trained).
	Start, End int
	Samples    int // training samples it adds
	Status     traj.Status
	Reward     float64 // its own (graded) reward, 0 when not graded
	Calls      int     // model calls, its sub-episodes' included
	Critical   int     // model calls on its longest chain
}

func (s SubEpisode) String() string {
	return fmt.Sprintf("id=%s parent=%s depth=%d turn=%d start=%d end=%d samples=%d status=%s reward=%s calls=%d critical=%d",
		s.ID, s.Parent, s.Depth, s.Turn, s.Start, s.End, s.Samples, s.Status, strconv.FormatFloat(s.Reward, 'g', -1, 64), s.Calls, s.Critical)
}

// ParseSubEpisode reads SubEpisode.String's form.
func ParseSubEpisode(v string) (SubEpisode, error) {
	var s SubEpisode
	seen := 0
	for _, f := range strings.Fields(v) {
		k, val, ok := strings.Cut(f, "=")
		if !ok {
			return s, fmt.Errorf("rollout: sub-episode field %q is not key=value", f)
		}
		var err error
		switch k {
		case "id":
			s.ID = val
		case "parent":
			s.Parent = val
		case "depth":
			s.Depth, err = strconv.Atoi(val)
		case "turn":
			s.Turn, err = strconv.Atoi(val)
		case "start":
			s.Start, err = strconv.Atoi(val)
		case "end":
			s.End, err = strconv.Atoi(val)
		case "samples":
			s.Samples, err = strconv.Atoi(val)
		case "status":
			s.Status, err = traj.ParseStatus(val)
		case "reward":
			s.Reward, err = strconv.ParseFloat(val, 64)
		case "calls":
			s.Calls, err = strconv.Atoi(val)
		case "critical":
			s.Critical, err = strconv.Atoi(val)
		default:
			return s, fmt.Errorf("rollout: unknown sub-episode field %q", k)
		}
		if err != nil {
			return s, fmt.Errorf("rollout: sub-episode field %s: %w", k, err)
		}
		seen++
	}
	if seen != 11 || s.ID == "" || s.Parent == "" || s.Start > s.End || s.Start < 0 {
		return s, fmt.Errorf("rollout: sub-episode %q lacks fields or has a bad range", v)
	}
	return s, nil
}

// SubEpisodes returns the sub-episodes t records, in the order recorded (a parent's before its
// own sub-episodes'). Entries it cannot read are skipped.
func SubEpisodes(t *traj.Trajectory) []SubEpisode {
	var out []SubEpisode
	for _, kv := range t.Meta {
		if kv.Key == MetaSubEpisode {
			if s, err := ParseSubEpisode(kv.Value); err == nil {
				out = append(out, s)
			}
		}
	}
	return out
}

// attach appends the episode's sub-episodes to t, the episode's finished trajectory: each one
// that did not fail becomes further samples of t, and every one a meta entry; then the model
// call counts.
func (d *delegator) attach(t *traj.Trajectory) {
	d.total += d.calls
	for _, c := range d.children {
		ct := c.t
		s := SubEpisode{ID: ct.ID, Parent: t.ID, Depth: d.depth + 1, Turn: c.turn, Start: t.Len(), End: t.Len(), Status: ct.Status, Calls: c.sub.total, Critical: c.sub.critical}
		if c.sub.cfg.Reward == RewardOwn {
			s.Reward = ct.Reward
		}
		var inner []traj.KV
		if !ct.Status.Failed() && ct.Len() > 0 {
			off := t.Len()
			s.Samples = ct.NumSamples()
			t.AppendSamples(ct)
			if c.sub.cfg.Reward == RewardOwn && len(ct.Turns) > 0 {
				t.Turns[len(t.Turns)-1].Reward += ct.Reward
			}
			s.End = t.Len()
			// The sub-episode's own sub-episodes, moved to their place in t.
			for _, g := range SubEpisodes(ct) {
				g.Start += off
				g.End += off
				inner = append(inner, traj.KV{Key: MetaSubEpisode, Value: g.String()})
			}
		} else {
			for _, g := range SubEpisodes(ct) {
				g.Start, g.End, g.Samples = s.Start, s.Start, 0
				inner = append(inner, traj.KV{Key: MetaSubEpisode, Value: g.String()})
			}
		}
		t.Meta = append(t.Meta, traj.KV{Key: MetaSubEpisode, Value: s.String()})
		t.Meta = append(t.Meta, inner...)
	}
	if d.depth == 0 {
		t.Meta = append(t.Meta,
			traj.KV{Key: MetaModelCalls, Value: strconv.Itoa(d.total)},
			traj.KV{Key: MetaCriticalCalls, Value: strconv.Itoa(d.critical)})
	}
}
