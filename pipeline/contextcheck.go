package pipeline

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// expertSample is how many training tasks of each environment checkExpertFits plays.
const expertSample = 4

// checkExpertFits plays a few training tasks of each environment that has an expert with the
// noiseless expert under the run's rollout limits, and fails when every one of them ends
// truncated (rollout.max_context or rollout.max_turns reached): then no episode can succeed,
// SFT has no complete demonstration and RL no reward to learn from, however long the run. It runs
// before any evaluation or training, with its own random stream (the run's are untouched).
func (r *Run) checkExpertFits(ctx context.Context) error {
	for _, name := range r.Cfg.EnvNames() {
		spec, err := r.opts.Envs.Lookup(name)
		if err != nil {
			return err
		}
		if spec.Expert == nil {
			continue
		}
		n := int(min(spec.Train.Len(), expertSample))
		if n < 1 {
			continue
		}
		tasks := make([]rollout.Task, n)
		for i := range n {
			tasks[i] = rollout.Task{Env: name, Seed: spec.Train.Lo + int64(i)*(spec.Train.Len()/int64(n)), GroupID: uint64(i)}
		}
		// The expert plays as it does for demonstrations (synthesize): through the run's chat
		// rendering, never delegating.
		cfg := r.Cfg.Rollout.Config
		cfg.Delegate = nil
		newConv, lastMessage := r.demoChat()
		runner := &rollout.Runner{Tok: r.tok, Cfg: cfg, NewConversation: newConv,
			NewGen: func(t rollout.Task) infer.Generator {
				return &rollout.AgentGenerator{Agent: spec.Expert(t.Seed, 0, rand.New(rand.NewPCG(uint64(t.Seed), 1))), Tok: r.tok, Version: r.version, LastMessage: lastMessage}
			}}
		groups, err := runner.RunGroups(ctx, r.envFactory(), tasks, 1, n)
		if err != nil {
			return fmt.Errorf("%s: the expert's check episodes: %w", name, err)
		}
		longest, truncated := 0, 0
		for _, g := range groups {
			for _, t := range g.Trajs {
				longest = max(longest, t.Len())
				if t.Status == traj.StatusTruncated {
					truncated++
				}
			}
		}
		if truncated == n {
			return fmt.Errorf("rollout.max_context %d (max_turns %d) cuts short every episode of %s's expert on %d training tasks (%d tokens reached): no episode can succeed, so supervised training has no complete demonstration and RL no reward; raise rollout.max_context (and model.max_seq)",
				r.Cfg.Rollout.MaxContext, r.Cfg.Rollout.MaxTurns, name, n, longest)
		}
	}
	return nil
}
