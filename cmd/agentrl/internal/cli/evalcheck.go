package cli

import (
	"context"
	"fmt"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/pipeline"
	"github.com/agentrl/agentrl/tokenizer"
)

// evalPromptSample is how many held-out tasks checkEvalContext renders.
const evalPromptSample = 8

// checkEvalContext refuses a --max-context that leaves no room for the environment's prompt (its
// system prompt and first observation, tools described) on a sample of held-out tasks, as
// training refuses it: every episode would end truncated before its first token.
func checkEvalContext(ctx context.Context, envs *env.Registry, newEnv func(string) (env.Env, error), tok *tokenizer.Tokenizer, name string, limit int) error {
	spec, err := envs.Lookup(name)
	if err != nil {
		return err
	}
	if newEnv == nil {
		newEnv = envs.New
	}
	rg := spec.Heldout
	n := int(min(rg.Len(), evalPromptSample))
	longest, at := 0, int64(0)
	for i := range n {
		seed := rg.Lo + int64(i)*(rg.Len()/int64(n))
		e, err := newEnv(name)
		if err != nil {
			return fmt.Errorf("eval: %s: %w", name, err)
		}
		obs, err := e.Reset(ctx, seed)
		if c, ok := e.(env.Closer); ok {
			_ = c.Close()
		}
		if err != nil {
			return fmt.Errorf("eval: %s: reset task %d: %w", name, seed, err)
		}
		if l := len(tok.EncodePrompt(obs.System, obs.Text)); l > longest {
			longest, at = l, seed
		}
	}
	if longest >= limit {
		return fmt.Errorf("eval: --max-context %d leaves no room for %s's prompt: the system prompt and first observation of task %d take %d tokens; give well above %d, or leave it out for the model's whole context",
			limit, name, at, longest, longest)
	}
	return nil
}

// notePromptChange warns when the system prompt evaluation gives the policy (tools attached or
// not) differs from the one the checkpoint was trained with, which the trainer records in it.
func notePromptChange(g *Globals, newEnv func(string) (env.Env, error), ckDir, name string) error {
	spec, err := g.Envs.Lookup(name)
	if err != nil {
		return err
	}
	if newEnv == nil {
		newEnv = g.Envs.New
	}
	sys, err := pipeline.SystemPrompt(g.Ctx, newEnv, name, spec.Heldout.Lo)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	if note := pipeline.PromptNote(ckDir, name, sys); note != "" {
		fmt.Fprintln(g.Stderr, note)
	}
	return nil
}
