package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/tokenizer"
)

// AgentGenerator plays a text-level env.Agent (an expert, a script) as an infer.Generator through
// the real tokenizer: each call decodes only the part of the prompt it has not seen, takes the
// newest message as the observation, asks the agent for its action and returns the action's
// tokens followed by the end-of-turn token. It serves one episode at a time (it remembers how much
// of the prompt it has read) and costs nothing beyond the tokenizer, which makes it the
// zero-latency generator of the rollout benchmark and the source of demonstration trajectories.
//
// Its tokens are forced, not sampled: they carry logprob 0 (a point mass) and Version. When a
// prompt does not continue the last one (the episode went on in a new sample: a folded context,
// a template's re-render), it reads the new prompt's last message from the whole prompt.
type AgentGenerator struct {
	Agent   env.Agent
	Tok     *tokenizer.Tokenizer
	Version int32
	seen    int
	last    []int32 // the last prompt and completion, to tell a continuation from a new sample
}

// Generate implements infer.Generator.
func (g *AgentGenerator) Generate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	if err := ctx.Err(); err != nil {
		return infer.Completion{}, err
	}
	if g.seen > len(req.Prompt) || !slices.Equal(req.Prompt[:g.seen], g.last) {
		g.seen = 0
	}
	obs := lastMessage(g.Tok.Decode(req.Prompt[g.seen:]))
	action, err := g.Agent.Act(ctx, obs)
	if err != nil {
		return infer.Completion{}, fmt.Errorf("agent: %w", err)
	}
	toks := append(g.Tok.Encode(action), g.Tok.EndOfTurn())
	finish := infer.FinishStop
	if len(toks) > req.MaxTokens {
		toks = toks[:req.MaxTokens]
		finish = infer.FinishLength
	}
	g.seen = len(req.Prompt) + len(toks)
	g.last = append(append(g.last[:0], req.Prompt...), toks...)
	c := infer.Completion{
		Tokens:   toks,
		Logprobs: make([]float32, len(toks)),
		Versions: make([]int32, len(toks)),
		Finish:   finish,
	}
	for i := range c.Versions {
		c.Versions[i] = g.Version
	}
	return c, nil
}

// lastMessage extracts the content of the last complete ChatML message in text.
func lastMessage(text string) string {
	end := strings.LastIndex(text, tokenizer.ImEnd)
	if end < 0 {
		return text
	}
	start := strings.LastIndex(text[:end], tokenizer.ImStart)
	if start < 0 {
		return text[:end]
	}
	body := text[start+len(tokenizer.ImStart) : end]
	if nl := strings.IndexByte(body, '\n'); nl >= 0 {
		return body[nl+1:]
	}
	return body
}
