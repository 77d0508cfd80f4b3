package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentrl/agentrl/chat"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/dataset"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// Reasons the renderer drops (or, with bad_rows refuse, refuses) a demonstration for.
const (
	reasonTemplate = "template_refused" // the chat template cannot render the conversation as the loop would
	reasonOverlong = "over_max_context" // longer than rollout.max_context (and overlong refuse, or no whole turn fits)
)

// demoRender turns a file's demonstrations into trajectories exactly as the agent loop would
// record the same conversation: each row is played through a rollout.Runner (the run's chat
// rendering: its template and tool-call format, or agentrl's ChatML), the environment answering
// with the row's tool results and user messages and the generator emitting, for each assistant
// message, the text the template writes for it (its content and tool calls in the model's
// format) ended by the template's end-of-turn token. The loss mask is then the loop's: the
// assistant's tokens, tool-call text included, nothing else.
type demoRender struct {
	tok        *tokenizer.Tokenizer
	renderer   *chat.Renderer // nil: agentrl's ChatML
	maxContext int
	truncate   bool // overlong: keep the whole turns that fit
	strict     bool // bad_rows refuse
	version    int32
	env        string // the trajectories' environment label
	maxTokens  int64  // all rows' tokens together (config.MaxDemoTokens)
}

// newDemoRender is the run's renderer of the sft block s.
func (r *Run) newDemoRender(s *config.SFTConfig) *demoRender {
	return &demoRender{
		tok: r.tok, renderer: r.chat.Renderer, maxContext: r.Cfg.Rollout.MaxContext,
		truncate: s.Overlong == config.OverlongTruncate, strict: s.BadRows != config.BadRowsDrop,
		version: r.version, env: "sft:" + filepath.Base(s.Data), maxTokens: config.MaxDemoTokens,
	}
}

// load reads path and renders every row; d reports the rows dropped.
func (dr *demoRender) load(ctx context.Context, path string) ([]*traj.Trajectory, *dataset.Demos, error) {
	d, err := dataset.LoadDemos(dataset.DemoConfig{Path: path, Strict: dr.strict, MaxRows: config.MaxDemos})
	if err != nil {
		if dr.strict && errors.As(err, new(*dataset.RowError)) {
			return nil, nil, fmt.Errorf("%w (bad_rows: drop leaves such rows out)", err)
		}
		return nil, nil, err
	}
	out := make([]*traj.Trajectory, 0, len(d.Rows))
	var total int64
	for i := range d.Rows {
		row := &d.Rows[i]
		t, reason, err := dr.render(ctx, row, uint64(i))
		if err != nil {
			return nil, nil, err
		}
		if reason != "" {
			if dr.strict {
				return nil, nil, fmt.Errorf("sft.data %s: line %d: %s: %s (bad_rows: drop leaves such rows out)", path, row.Line, reason, t.Error)
			}
			d.Skip(row.Line, reason, t.Error)
			continue
		}
		if total += int64(t.Len()); total > dr.maxTokens {
			return nil, nil, fmt.Errorf("sft.data %s: over %d tokens of demonstrations kept in memory (pipeline.MaxDemoTokens) by line %d", path, dr.maxTokens, row.Line)
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, nil, fmt.Errorf("sft.data %s: no demonstration left: every row was dropped (%s)", path, d.DescribeSkips())
	}
	return out, d, nil
}

// render plays one row through the agent loop. A row the loop cannot render (or that does not
// fit) comes back with its reason and the trajectory's Error saying why; err is only ctx's.
func (dr *demoRender) render(ctx context.Context, row *dataset.Demo, group uint64) (*traj.Trajectory, string, error) {
	refuse := func(reason, why string) (*traj.Trajectory, string, error) {
		return &traj.Trajectory{Error: why}, reason, nil
	}
	play, stops, why := dr.script(row)
	if why != "" {
		return refuse(reasonTemplate, why)
	}
	runner := &rollout.Runner{
		Tok: dr.tok,
		Cfg: rollout.Config{MaxTurns: len(row.Turns), MaxContext: dr.maxContext, MaxTokensPerTurn: dr.maxContext,
			Sampling: infer.Sampling{Temperature: 1}},
		Gen: &replayGen{tok: dr.tok, play: &play, version: dr.version},
	}
	if rd := play.renderer; rd != nil {
		runner.NewConversation = func() rollout.Conversation { return rd.NewConversation() }
	}
	t, err := runner.Episode(ctx, &replayEnv{play: &play}, rollout.Task{Env: dr.env, Seed: int64(row.Line), GroupID: group})
	if err != nil {
		return nil, "", err
	}
	switch t.Status {
	case traj.StatusOK:
	case traj.StatusTruncated:
		if !dr.truncate {
			return refuse(reasonOverlong, fmt.Sprintf("%s (overlong: truncate keeps the whole turns that fit)", t.Error))
		}
		if !wholeTurns(t, stops) {
			return refuse(reasonOverlong, t.Error+": not even the first assistant turn fits")
		}
	default:
		return refuse(reasonTemplate, t.Error)
	}
	if !slices.Contains(t.LossMask, true) {
		return refuse(reasonTemplate, "no assistant token")
	}
	t.Meta = append(t.Meta, traj.KV{Key: "line", Value: fmt.Sprint(row.Line)})
	return t, "", nil
}

// wholeTurns cuts a truncated trajectory after its last assistant turn that ended with a stop
// token; false when there is none.
func wholeTurns(t *traj.Trajectory, stops []int32) bool {
	n := len(t.Turns)
	if n > 0 {
		if end := t.Turns[n-1].End; end == 0 || !slices.Contains(stops, t.Tokens[end-1]) {
			n--
		}
	}
	if n == 0 {
		return false
	}
	cut := t.Turns[n-1].End
	t.Tokens, t.Roles, t.LossMask = t.Tokens[:cut], t.Roles[:cut], t.LossMask[:cut]
	t.Logprobs, t.Versions = t.Logprobs[:cut], t.Versions[:cut]
	t.Turns = t.Turns[:n]
	t.Turns[n-1].ObsEnd = min(t.Turns[n-1].ObsEnd, cut)
	k := 0
	for k < len(t.Samples) && t.Samples[k] < cut {
		k++
	}
	if t.Samples = t.Samples[:k]; k == 0 {
		t.Samples = nil
	}
	return true
}

// demoCorpus is the text of the run's files of demonstrations for a fresh tokenizer's corpus:
// up to tokenizer.corpus_samples rows of each, every message's text and tool calls, as a
// supervised phase will show them. Bad rows are left out here; the phase reports them.
func (r *Run) demoCorpus() ([]string, error) {
	var out []string
	for _, p := range r.Cfg.Phases {
		if p.SFT == nil || p.SFT.Data == "" {
			continue
		}
		d, err := dataset.LoadDemos(dataset.DemoConfig{Path: p.SFT.Data, MaxRows: config.MaxDemos})
		if err != nil {
			return nil, err
		}
		for i, row := range d.Rows {
			if i >= r.Cfg.Tokenizer.CorpusSamples {
				break
			}
			var b strings.Builder
			for _, m := range row.Messages {
				b.WriteString(m.Content + "\n")
				for _, c := range m.ToolCalls {
					fmt.Fprintf(&b, `{"name": %q, "arguments": %s}`+"\n", c.Name, c.Arguments)
				}
			}
			out = append(out, b.String())
		}
	}
	return out, nil
}

// demoPlay is a row as the loop plays it: the opening messages, each turn's completion text, and
// each observation as the environment gives it.
type demoPlay struct {
	renderer    *chat.Renderer // the run's, with the row's tools; nil for ChatML
	system      string
	user        string
	completions []string
	ends        []int32          // the stop token each completion ends with
	obs         []env.Transition // after each completion; the last is Done
}

// script works out what the loop would be given and would sample for row, and the stop tokens
// a completion ends with; why says what the chat rendering cannot express.
func (dr *demoRender) script(row *dataset.Demo) (demoPlay, []int32, string) {
	play := demoPlay{system: row.System, user: row.User}
	for k, tu := range row.Turns {
		tr := env.Transition{Done: k == len(row.Turns)-1}
		switch tu.ObsRole {
		case "tool":
			tr.Role = traj.RoleTool
			parts := tu.Results
			if dr.renderer == nil { // the tool wrapper's own answer: tagged results, one per line
				parts = make([]string, len(tu.Results))
				for i, r := range tu.Results {
					parts[i] = "<tool_response>" + r + "</tool_response>"
				}
			}
			tr.Observation = strings.Join(parts, "\n")
			for i, c := range tu.Assistant.ToolCalls {
				tr.ToolCalls = append(tr.ToolCalls, traj.ToolCall{Name: c.Name, Arguments: string(c.Arguments), Result: tu.Results[i]})
			}
		case "user":
			tr.Role, tr.Observation = traj.RoleEnv, tu.Results[0]
		}
		play.obs = append(play.obs, tr)
	}
	if dr.renderer == nil {
		stops := []int32{dr.tok.EndOfTurn()}
		if row.Tools != nil { // the tool wrapper describes the tools in the system prompt
			desc := env.DescribeTools(schemaTools(row.Tools))
			if play.system != "" {
				play.system += "\n"
			}
			play.system += desc
		}
		for _, tu := range row.Turns {
			a := tu.Assistant
			if a.ReasoningContent != "" {
				return play, nil, "reasoning_content needs a chat template that renders it (agentrl's ChatML has none)"
			}
			text := a.Content
			if len(a.ToolCalls) > 0 {
				calls, err := tool.Hermes.Render(toolCalls(a.ToolCalls))
				if err != nil {
					return play, nil, err.Error()
				}
				if text != "" {
					text += "\n"
				}
				text += calls
			}
			play.completions = append(play.completions, text)
			play.ends = append(play.ends, stops[0])
		}
		return play, stops, ""
	}
	rd := dr.renderer
	if row.Tools != nil {
		if rd.Format() == nil {
			return play, nil, "the chat template renders no tool calls, so it cannot show a row's tools"
		}
		rd = rd.WithTools(row.Tools)
	}
	play.renderer = rd
	stops := rd.Stop()
	stopText := make([]string, len(stops))
	for i, id := range stops {
		stopText[i] = dr.tok.Decode([]int32{id})
	}
	// The messages so far, as the loop's conversation holds them: tool results in one message.
	var msgs []chat.Message
	if row.System != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: row.System})
	}
	msgs = append(msgs, chat.Message{Role: "user", Content: row.User})
	for k, tu := range row.Turns {
		if len(tu.Assistant.ToolCalls) > 0 && rd.Format() == nil {
			return play, nil, fmt.Sprintf("turn %d calls tools, but the chat template renders no tool calls", k)
		}
		before, err := rd.Render(msgs, rd.Tools(), true)
		if err != nil {
			return play, nil, fmt.Sprintf("turn %d: %v", k, err)
		}
		a := tu.Assistant
		a.ToolCallID, a.Name = "", ""
		msgs = append(msgs, a)
		after, err := rd.Render(msgs, rd.Tools(), false)
		if err != nil {
			return play, nil, fmt.Sprintf("turn %d: %v", k, err)
		}
		if !strings.HasPrefix(after, before) {
			return play, nil, fmt.Sprintf("turn %d: the template's render of the assistant message does not continue its generation prompt", k)
		}
		said := after[len(before):]
		end, endID := -1, int32(0)
		for j, st := range stopText {
			if i := strings.Index(said, st); st != "" && i >= 0 && (end < 0 || i < end) {
				end, endID = i, stops[j]
			}
		}
		if end < 0 {
			return play, nil, fmt.Sprintf("turn %d: the template ends the assistant message with no end-of-turn token (%q)", k, capText(said, 60))
		}
		play.completions = append(play.completions, said[:end])
		play.ends = append(play.ends, endID)
		if tu.ObsRole != "" {
			msgs = append(msgs, chat.Message{Role: tu.ObsRole, Content: play.obs[k].Observation})
		}
	}
	return play, stops, ""
}

func capText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func toolCalls(cs []chat.ToolCall) []tool.Call {
	out := make([]tool.Call, len(cs))
	for i, c := range cs {
		out[i] = tool.Call{ID: c.ID, Name: c.Name, Arguments: c.Arguments}
	}
	return out
}

// schemaTool is a tool known by its schema alone, for the system prompt's description.
type schemaTool struct {
	name, desc string
	params     json.RawMessage
}

func (s schemaTool) Name() string            { return s.name }
func (s schemaTool) Description() string     { return s.desc }
func (s schemaTool) Schema() json.RawMessage { return s.params }
func (s schemaTool) Call(context.Context, json.RawMessage) (string, error) {
	return "", errors.New("a demonstration's tool is not callable")
}

func schemaTools(raw []json.RawMessage) []tool.Tool {
	out := make([]tool.Tool, 0, len(raw))
	for _, r := range raw {
		var s struct {
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		_ = json.Unmarshal(r, &s) // the reader checked it
		out = append(out, schemaTool{s.Function.Name, s.Function.Description, s.Function.Parameters})
	}
	return out
}

// replayEnv answers a demonstration's turns with its observations.
type replayEnv struct {
	play *demoPlay
	k    int
}

func (e *replayEnv) Reset(context.Context, int64) (env.Observation, error) {
	e.k = 0
	return env.Observation{System: e.play.system, Text: e.play.user}, nil
}

func (e *replayEnv) Step(context.Context, string) (env.Transition, error) {
	if e.k >= len(e.play.obs) {
		return env.Transition{}, env.ErrEpisodeDone
	}
	tr := e.play.obs[e.k]
	e.k++
	return tr, nil
}

// replayGen emits a demonstration's completions, each ended by its stop token, cut at the
// request's token limit as a sampled one would be.
type replayGen struct {
	tok     *tokenizer.Tokenizer
	play    *demoPlay
	version int32
	k       int
}

func (g *replayGen) Generate(_ context.Context, req infer.Request) (infer.Completion, error) {
	if g.k >= len(g.play.completions) {
		return infer.Completion{}, errors.New("demonstration: no assistant turn left")
	}
	toks := append(g.tok.Encode(g.play.completions[g.k]), g.play.ends[g.k])
	g.k++
	finish := infer.FinishStop
	if len(toks) > req.MaxTokens {
		toks, finish = toks[:req.MaxTokens], infer.FinishLength
	}
	c := infer.Completion{Tokens: toks, Logprobs: make([]float32, len(toks)), Versions: make([]int32, len(toks)), Finish: finish}
	for i := range c.Versions {
		c.Versions[i] = g.version
	}
	return c, nil
}
