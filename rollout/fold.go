package rollout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// folder is one episode's context-folding state (Config.Context).
type folder struct {
	cfg *ContextConfig
	// system and user are the opening messages (the system prompt with the fold tool's line),
	// from which every folded context is rebuilt.
	system, user string
	// hist is the turns of the current context since the last fold whose observation continued
	// the episode: the candidates for KeepTurns.
	hist     []histTurn
	folds    [][2]int // context length before and after each fold
	requests int      // observations that carried the request for a summary
	asked    bool     // a request is outstanding (the threshold triggers)
}

// histTurn is one kept turn: the completion's tokens (a slice of the episode's buffer, which
// only grows while the episode runs) and the observation that answered it.
type histTurn struct {
	completion []int32
	role, obs  string
}

// newFolder starts the folding state of an episode whose opening messages are system and user,
// and returns the system prompt the policy is given (with the fold tool's line when it is
// listed).
func newFolder(cfg *ContextConfig, system, user string) (*folder, string) {
	if cfg.listed() {
		line := fmt.Sprintf("%s(summary): replace the conversation so far with your own summary of it (at most %d tokens); the task and your last %d turns are kept.",
			cfg.tool(), cfg.maxSummary(), cfg.KeepTurns)
		if !strings.Contains(system, tool.OpenTag) {
			line += "\nCall: " + tool.OpenTag + `{"name": ..., "arguments": {...}}` + tool.CloseTag
		}
		if system != "" {
			system += "\n"
		}
		system += line
	}
	return &folder{cfg: cfg, system: system, user: user}, system
}

// find returns the fold call of action, if it makes one, and every call attempt of the action.
func (f *folder) find(action string) (fold tool.Call, calls []tool.Call, ok bool) {
	if !strings.Contains(action, f.cfg.tool()) {
		return tool.Call{}, nil, false
	}
	calls = tool.ParseCalls(action, tool.ParseLimits{})
	for _, c := range calls {
		if c.Name == f.cfg.tool() {
			return c, calls, true
		}
	}
	return tool.Call{}, nil, false
}

// summary checks a fold call and returns its summary, or the error the policy is shown.
func (f *folder) summary(c tool.Call, calls []tool.Call, tok *tokenizer.Tokenizer) (string, error) {
	name := f.cfg.tool()
	switch {
	case len(calls) > 1:
		return "", fmt.Errorf("%s must be the only tool call of its turn (this turn made %d); nothing was run", name, len(calls))
	case !f.cfg.listed() && !f.asked:
		return "", fmt.Errorf("%s is available only when asked for a summary", name)
	case c.Err != nil:
		return "", c.Err
	}
	s, err := parseFoldArgs(c.Arguments)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if n := len(tok.Encode(s)); n > f.cfg.maxSummary() {
		return "", fmt.Errorf("%s: the summary has %d tokens, over the limit of %d", name, n, f.cfg.maxSummary())
	}
	return s, nil
}

// Fold arguments that cannot be used.
var (
	ErrFoldArgs    = errors.New(`arguments must be {"summary": "<text>"}`)
	ErrFoldEmpty   = errors.New("the summary is empty")
	errFoldUnknown = errors.New("unknown argument")
)

// parseFoldArgs reads {"summary": "..."} (the tool parser has checked it is a JSON object) and
// returns the summary without surrounding space.
func parseFoldArgs(args json.RawMessage) (string, error) {
	var a struct {
		Summary *string `json:"summary"`
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		if strings.Contains(err.Error(), "unknown field") {
			return "", fmt.Errorf("%w (%w: %v)", ErrFoldArgs, errFoldUnknown, err)
		}
		return "", fmt.Errorf("%w: %v", ErrFoldArgs, err)
	}
	if a.Summary == nil {
		return "", fmt.Errorf("%w: no summary", ErrFoldArgs)
	}
	s := strings.TrimSpace(*a.Summary)
	if s == "" {
		return "", ErrFoldEmpty
	}
	return s, nil
}

// request appends the scaffold's request for a summary to obs when the context with obs's text
// (ctxLen tokens before it) passes max_tokens, under a threshold trigger.
func (f *folder) request(obs string, ctxLen int, tok *tokenizer.Tokenizer) string {
	if !f.cfg.asks() {
		return obs
	}
	n := ctxLen + len(tok.Encode(obs))
	if n <= f.cfg.MaxTokens {
		return obs
	}
	f.asked = true
	f.requests++
	req := fmt.Sprintf(`The context has reached %d tokens, past %d: call %s with a summary of what you know so far: %s{"name": "%s", "arguments": {"summary": "..."}}%s`,
		n, f.cfg.MaxTokens, f.cfg.tool(), tool.OpenTag, f.cfg.tool(), tool.CloseTag)
	if obs == "" {
		return req
	}
	return obs + "\n" + req
}

// meta is what the trajectory records of the episode's folding (nothing when it neither folded
// nor was asked to).
func (f *folder) meta() []traj.KV {
	if len(f.folds) == 0 && f.requests == 0 {
		return nil
	}
	var b []byte
	for i, p := range f.folds {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(p[0]), 10)
		b = append(b, '>')
		b = strconv.AppendInt(b, int64(p[1]), 10)
	}
	return []traj.KV{
		{Key: MetaFolds, Value: strconv.Itoa(len(f.folds))},
		{Key: MetaFoldTokens, Value: string(b)},
		{Key: MetaFoldRequests, Value: strconv.Itoa(f.requests)},
	}
}

// foldTurn handles turn, whose action calls the fold tool: it answers a bad fold with an error
// observation, and otherwise closes the current sample with this turn and opens a new one with
// the folded context. done and err are as for turn.
func (ep *episode) foldTurn(turn int, tu traj.Turn, c tool.Call, calls []tool.Call) (done bool, err error) {
	f, r := ep.fold, ep.r
	tc := traj.ToolCall{Name: c.Name, Arguments: string(c.Arguments)}
	if c.Err != nil {
		tc.Arguments = c.Raw
	}
	summary, ferr := f.summary(c, calls, r.Tok)
	ep.lap(&ep.t.Timings.Tokenize)
	if ferr != nil {
		tc.Error = ferr.Error()
		return ep.answer(turn, tu, stepOf(tc))
	}
	ctx, roles, conv, hist, err := ep.foldedContext(summary)
	ep.lap(&ep.t.Timings.Tokenize)
	if err != nil {
		ep.addTurn(tu)
		ep.end(traj.StatusEnvError, fmt.Sprintf("turn %d: render folded context: %v", turn, err))
		return true, nil
	}
	before := ep.sampleLen()
	if len(ctx) >= r.Cfg.MaxContext {
		tc.Error = fmt.Sprintf("the folded context of %d tokens does not fit in max_context %d", len(ctx), r.Cfg.MaxContext)
		tu.ToolCalls = []traj.ToolCall{tc}
		ep.addTurn(tu)
		ep.end(traj.StatusTruncated, fmt.Sprintf("turn %d: %s", turn, tc.Error))
		return true, nil
	}
	tc.Result = fmt.Sprintf("folded %d tokens into %d", before, len(ctx))
	tu.ToolCalls = []traj.ToolCall{tc}
	ep.addTurn(tu)
	ep.sampleStart = ep.len()
	ep.samples = append(ep.samples, ep.sampleStart)
	at := ep.extend(len(ctx))
	b := ep.b
	copy(b.tokens[at:], ctx)
	copy(b.roles[at:], roles)
	clear(b.mask[at:])
	clear(b.logprobs[at:])
	for i := range b.versions[at:] {
		b.versions[at+i] = traj.NoVersion
	}
	ep.conv = conv
	f.hist = hist
	f.asked = false
	f.folds = append(f.folds, [2]int{before, len(ctx)})
	return false, nil
}

// stepOf is the observation answering a fold call that was refused.
func stepOf(tc traj.ToolCall) env.Transition {
	return env.Transition{
		Observation: "<tool_response>error: " + tc.Error + "</tool_response>",
		Role:        traj.RoleTool,
		ToolCalls:   []traj.ToolCall{tc},
	}
}

// foldedContext renders, through a fresh Conversation, the context after a fold: the system
// prompt, the task with the summary, and the last KeepTurns turns, ending with the generation
// prompt. It returns the tokens, their roles (the kept completions are assistant tokens that
// this sample does not train), the Conversation to continue with and the kept turns.
func (ep *episode) foldedContext(summary string) (ctx []int32, roles []traj.Role, conv Conversation, hist []histTurn, err error) {
	f := ep.fold
	conv = ep.r.conversation()
	start, sysLen, err := conv.Start(f.system, f.user+"\n\nSummary of the earlier turns, in your words:\n"+summary)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	ctx = slices.Clone(start)
	roles = make([]traj.Role, len(ctx))
	for i := range roles {
		if i < sysLen && sysLen < len(ctx) {
			roles[i] = traj.RoleSystem
		} else {
			roles[i] = traj.RoleUser
		}
	}
	keep := f.hist[max(0, len(f.hist)-f.cfg.KeepTurns):]
	hist = make([]histTurn, 0, len(keep))
	for _, h := range keep {
		ctx = append(ctx, h.completion...)
		for range h.completion {
			roles = append(roles, traj.RoleAssistant)
		}
		obs, split, err := conv.Next(h.completion, h.role, h.obs, false)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		role := traj.RoleEnv
		if h.role == "tool" {
			role = traj.RoleTool
		}
		if split {
			// The template re-rendered the whole context: keep each token's role as far as the
			// render agrees with what was built, the observation's speaker from there.
			common := 0
			for common < len(obs) && common < len(ctx) && obs[common] == ctx[common] {
				common++
			}
			nr := make([]traj.Role, len(obs))
			copy(nr, roles[:common])
			for i := common; i < len(nr); i++ {
				nr[i] = role
			}
			ctx, roles = slices.Clone(obs), nr
		} else {
			ctx = append(ctx, obs...)
			for range obs {
				roles = append(roles, role)
			}
		}
		hist = append(hist, h)
	}
	return ctx, roles, conv, hist, nil
}
