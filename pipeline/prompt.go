package pipeline

import (
	"context"
	"fmt"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/rollout"
)

// promptSample is how many tasks of each seed range (training and held-out) checkPrompts renders.
const promptSample = 16

// checkPrompts renders the first prompt (system prompt and first observation, tools described)
// of a sample of each environment's training and held-out tasks with the run's tokenizer, and
// fails when the longest leaves no room under rollout.max_context: every episode would end
// truncated before its first token, and SFT would find no usable demonstration. It runs before
// any evaluation or training.
func (r *Run) checkPrompts(ctx context.Context) error {
	limit := r.Cfg.Rollout.MaxContext
	newEnv := r.envFactory()
	for _, name := range r.Cfg.EnvNames() {
		spec, err := r.opts.Envs.Lookup(name)
		if err != nil {
			return err
		}
		longest, at := 0, int64(0)
		for _, rg := range []env.SeedRange{spec.Train, spec.Heldout} {
			n := min(rg.Len(), promptSample)
			if n < 1 {
				continue
			}
			for i := range n {
				seed := rg.Lo + i*(rg.Len()/n)
				l, err := r.promptLen(ctx, newEnv, name, seed)
				if err != nil {
					return err
				}
				if l > longest {
					longest, at = l, seed
				}
			}
		}
		if longest >= limit {
			return fmt.Errorf("rollout.max_context %d leaves no room for %s's prompt: the system prompt and first observation of task %d take %d tokens; raise rollout.max_context (and model.max_seq) well above %d",
				limit, name, at, longest, longest)
		}
	}
	return r.checkExpertFits(ctx)
}

func (r *Run) promptLen(ctx context.Context, newEnv rollout.EnvFactory, name string, seed int64) (int, error) {
	e, err := newEnv(name)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	if c, ok := e.(env.Closer); ok {
		defer func() { _ = c.Close() }()
	}
	obs, err := e.Reset(ctx, seed)
	if err != nil {
		return 0, fmt.Errorf("%s: reset task %d: %w", name, seed, err)
	}
	toks, err := r.encodePrompt(obs.System, obs.Text)
	if err != nil {
		return 0, fmt.Errorf("%s: task %d: %w", name, seed, err)
	}
	return len(toks), nil
}
