package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/tokenizer"
)

// ExpertTree plays a delegating expert (env.DelegatingAgent) as the generator of one root
// episode and all of its sub-episodes (Config.Delegate): the demonstrations of a run whose
// policy may delegate. Each request goes to the AgentGenerator of the context it continues; a
// request that continues none opens a context: a sub-agent's first prompt (its system prompt
// opens with the sub-agent line) gets a new AgentGenerator playing Root.Sub of the sub-task, and
// any other (the root's first prompt, a folded context) goes to the root's. It is safe for
// concurrent use (sub-episodes of one turn run in parallel): requests are served one at a time,
// which costs nothing beyond the tokenizer.
type ExpertTree struct {
	Root    env.DelegatingAgent
	Tok     *tokenizer.Tokenizer
	Version int32
	// LastMessage is as for AgentGenerator (nil reads agentrl's ChatML).
	LastMessage func(text string) (string, bool)

	mu   sync.Mutex
	root *AgentGenerator
	subs []*AgentGenerator
}

// Generate implements infer.Generator.
func (g *ExpertTree) Generate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.root == nil {
		g.root = &AgentGenerator{Agent: g.Root, Tok: g.Tok, Version: g.Version, LastMessage: g.LastMessage}
	}
	for _, s := range g.subs {
		if s.continues(req.Prompt) {
			return s.Generate(ctx, req)
		}
	}
	if g.root.continues(req.Prompt) {
		return g.root.Generate(ctx, req)
	}
	text := g.Tok.Decode(req.Prompt)
	if !strings.Contains(text, subAgentPrompt) {
		return g.root.Generate(ctx, req) // the root's first prompt, or a new sample of it
	}
	var task string
	if g.LastMessage != nil {
		t, ok := g.LastMessage(text)
		if !ok {
			return infer.Completion{}, fmt.Errorf("expert tree: the prompt does not end with a message the chat template writes: %q", tailText(text, 120))
		}
		task = t
	} else {
		task = lastMessage(text)
	}
	agent, err := g.Root.Sub(strings.TrimSpace(task))
	if err != nil {
		return infer.Completion{}, fmt.Errorf("expert tree: %w", err)
	}
	s := &AgentGenerator{Agent: agent, Tok: g.Tok, Version: g.Version, LastMessage: g.LastMessage}
	g.subs = append(g.subs, s)
	return s.Generate(ctx, req)
}

// continues reports whether prompt continues the context g last served.
func (g *AgentGenerator) continues(prompt []int32) bool {
	return len(g.last) > 0 && len(prompt) >= len(g.last) && slices.Equal(prompt[:len(g.last)], g.last)
}
