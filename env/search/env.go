package search

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// System is the task's system prompt; WithTools appends the search tool's description.
const System = "Answer the question using the search tool. Finish with: Answer: <name>"

// Keys of Transition.Info on the final transition, besides env.InfoSuccess.
const (
	InfoExpected = "expected" // the gold answer
	InfoForm     = "form"     // "chain" or "intersect"
	InfoHops     = "hops"     // lookups the question needs
)

// Config tunes the environment. DefaultConfig is what the registry uses.
type Config struct {
	// Search configures the tool (k bounds, snippet length).
	Search tool.SearchOptions
	// Tools bounds the tool calls of one turn.
	Tools env.ToolLimits
	// MaxTurns ends an episode that has not answered after this many turns (tool turns count).
	MaxTurns int
	// Level fixes the questions' difficulty: 0 the default mix, h in 1–MaxLevel chains of h hops.
	Level int
}

// DefaultConfig: 1 result by default and at most 5 (a named entity's own document ranks first
// for every chain hop, and a tiny policy learns fastest from short observations; the top result
// alone answers 96.5% of intersections, so the expert asks for 2 there), 200-character
// snippets (every document fits), one call per turn, 6 turns (the longest question needs 3
// lookups and an answer).
func DefaultConfig() Config {
	return Config{
		Search:   tool.SearchOptions{DefaultK: 1, MaxK: 5, SnippetChars: 200, MaxQueryChars: 200},
		Tools:    env.ToolLimits{MaxCallsPerTurn: 1},
		MaxTurns: 6,
	}
}

// Validate reports every unusable setting.
func (c Config) Validate() error {
	var errs []error
	if err := c.Tools.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Level < 0 || c.Level > MaxLevel {
		errs = append(errs, fmt.Errorf("search: level must be in [0, %d], got %d", MaxLevel, c.Level))
	}
	if c.MaxTurns < 1 {
		errs = append(errs, fmt.Errorf("search: max_turns must be at least 1, got %d", c.MaxTurns))
	}
	return errors.Join(errs...)
}

// New returns an environment with the search tool attached and a turn limit. The knowledge base
// and its index are built on the first call and shared by every instance.
func New(cfg Config) (env.Env, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w, err := sharedWorld()
	if err != nil {
		return nil, err
	}
	st, err := tool.NewSearch(w.ix, cfg.Search)
	if err != nil {
		return nil, fmt.Errorf("search: %w", err)
	}
	inner := &qaEnv{w: w, level: cfg.Level}
	return env.WithTurnLimit(env.WithTools(inner, []tool.Tool{st}, cfg.Tools), cfg.MaxTurns), nil
}

// qaEnv is the task without tools: Reset poses the question, Step grades the answer.
type qaEnv struct {
	w           *world
	level       int
	q           question
	reset, done bool
}

func (e *qaEnv) Reset(ctx context.Context, seed int64) (env.Observation, error) {
	if err := ctx.Err(); err != nil {
		return env.Observation{}, fmt.Errorf("search: reset: %w", err)
	}
	e.q = e.w.kb.newQuestion(seed, heldoutSeeds.Contains(seed), e.level)
	e.reset, e.done = true, false
	return env.Observation{System: System, Text: e.q.text}, nil
}

func (e *qaEnv) Step(ctx context.Context, action string) (env.Transition, error) {
	switch {
	case !e.reset:
		return env.Transition{}, env.ErrNotReset
	case e.done:
		return env.Transition{}, env.ErrEpisodeDone
	}
	if err := ctx.Err(); err != nil {
		return env.Transition{}, fmt.Errorf("search: step: %w", err)
	}
	e.done = true
	want := e.w.kb.ents[e.q.answer].name
	score, err := grade.Score(ctx, reward.Sample{Response: action, Answer: want})
	if err != nil {
		return env.Transition{}, fmt.Errorf("search: step: %w", err)
	}
	ok := reward.Solved(score)
	tr := env.Transition{Role: traj.RoleEnv, Done: true, Observation: "wrong", Info: map[string]string{
		env.InfoSuccess: fmt.Sprint(ok),
		InfoExpected:    want,
		InfoForm:        e.q.form,
		InfoHops:        fmt.Sprint(e.q.hops()),
	}}
	if ok {
		tr.Reward, tr.Observation = score, "correct"
	}
	return tr, nil
}
