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
//
// With a chat template of the model's own (Runner.NewConversation), LastMessage reads the
// observation out of the template's text and the turn ends with the request's first stop token.
type AgentGenerator struct {
	Agent   env.Agent
	Tok     *tokenizer.Tokenizer
	Version int32
	// LastMessage returns the content of the last message of a context the template rendered
	// (chat.Renderer.LastMessage); nil reads agentrl's ChatML.
	LastMessage func(text string) (string, bool)
	seen        int
	last        []int32 // the last prompt and completion, to tell a continuation from a new sample
}

// Generate implements infer.Generator.
func (g *AgentGenerator) Generate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	if err := ctx.Err(); err != nil {
		return infer.Completion{}, err
	}
	if g.LastMessage != nil {
		return g.generateTemplate(ctx, req)
	}
	if g.seen > len(req.Prompt) || !slices.Equal(req.Prompt[:g.seen], g.last) {
		g.seen = 0
	}
	obs := lastMessage(g.Tok.Decode(req.Prompt[g.seen:]))
	action, err := g.Agent.Act(ctx, obs)
	if err != nil {
		return infer.Completion{}, fmt.Errorf("agent: %w", err)
	}
	return g.complete(req, append(g.Tok.Encode(action), g.Tok.EndOfTurn())), nil
}

// generateTemplate is Generate through a model's chat template.
func (g *AgentGenerator) generateTemplate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	if len(req.Stop) == 0 {
		return infer.Completion{}, fmt.Errorf("agent generator: a request without stop tokens")
	}
	from := g.seen
	if len(g.last) > len(req.Prompt) || !slices.Equal(req.Prompt[:len(g.last)], g.last) {
		from = 0 // the template re-rendered the context: a new sample
	}
	text := g.Tok.Decode(req.Prompt[from:])
	obs, ok := g.LastMessage(text)
	if !ok {
		return infer.Completion{}, fmt.Errorf("agent generator: the prompt does not end with a message the chat template writes: %q", tailText(text, 120))
	}
	action, err := g.Agent.Act(ctx, obs)
	if err != nil {
		return infer.Completion{}, fmt.Errorf("agent: %w", err)
	}
	return g.complete(req, append(g.Tok.Encode(action), req.Stop[0])), nil
}

func tailText(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// complete returns toks as the forced completion of req, cut at its token limit.
func (g *AgentGenerator) complete(req infer.Request, toks []int32) infer.Completion {
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
	return c
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
