package pipeline

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// sampleTasks draws n task seeds from the phase's environment mix (by weight) over the training
// seed ranges.
func sampleTasks(rng *rand.Rand, envs []EnvWeight, n int, groupBase uint64) ([]rollout.Task, error) {
	var total float64
	for _, e := range envs {
		total += e.Weight
	}
	tasks := make([]rollout.Task, n)
	for i := range tasks {
		u := rng.Float64() * total
		pick := envs[len(envs)-1].Name
		for _, e := range envs {
			if u < e.Weight {
				pick = e.Name
				break
			}
			u -= e.Weight
		}
		spec, err := env.Lookup(pick)
		if err != nil {
			return nil, err
		}
		seed := spec.Train.Lo + rng.Int64N(spec.Train.Len())
		tasks[i] = rollout.Task{Env: pick, Seed: seed, GroupID: groupBase + uint64(i)}
	}
	return tasks, nil
}

// synthesize runs each task with the environment's noisy expert playing through the tokenizer,
// which yields demonstrations in the trajectory format (assistant tokens masked for the loss).
func (r *Run) synthesize(ctx context.Context, tasks []rollout.Task, noise float64, salt uint64) ([]*traj.Trajectory, error) {
	runner := &rollout.Runner{
		Tok: r.tok,
		Cfg: r.Cfg.Rollout.Runner(),
		NewGen: func(t rollout.Task) infer.Generator {
			spec, err := env.Lookup(t.Env)
			if err != nil {
				return nil
			}
			rng := rand.New(rand.NewPCG(uint64(t.Seed)^salt, t.GroupID<<8|uint64(t.Index)))
			return &rollout.AgentGenerator{Agent: spec.Expert(t.Seed, noise, rng), Tok: r.tok, Version: r.version}
		},
	}
	groups, err := runner.RunGroups(ctx, nil, tasks, 1, max(r.Cfg.Rollout.EngineSlots, 8))
	if err != nil {
		return nil, err
	}
	out := make([]*traj.Trajectory, 0, len(groups))
	for _, g := range groups {
		out = append(out, g.Trajs...)
	}
	return out, nil
}

// runSFT is phase 1: supervised training on the noisy expert's demonstrations.
func (r *Run) runSFT(ctx context.Context, pi int, p Phase, start int) error {
	s := p.SFT
	t0 := r.now()
	tasks, err := sampleTasks(r.stepRNG(pi, -1, 1), p.Envs, s.Demos, 0)
	if err != nil {
		return err
	}
	all, err := r.synthesize(ctx, tasks, s.Noise, r.Cfg.Seed+uint64(pi))
	if err != nil {
		return err
	}
	demos := make([]*traj.Trajectory, 0, len(all))
	var ok, tools, tokens int
	for _, t := range all {
		succ := rollout.Succeeded(t)
		if succ {
			ok++
		}
		if usedTool(t) {
			tools++
		}
		if t.Status.Failed() || (s.Keep == "successful" && !succ) || t.Len() < 2 {
			continue
		}
		demos = append(demos, t)
		for _, m := range t.LossMask {
			if m {
				tokens++
			}
		}
	}
	if len(demos) < s.BatchSize {
		return fmt.Errorf("only %d usable demonstrations for a batch of %d", len(demos), s.BatchSize)
	}
	if start == 0 {
		if err := r.record(p.Name, 0, all); err != nil {
			return err
		}
	}
	r.printf("%s: %d demonstrations (expert noise %.2f): %.0f%% successful, %.0f%% use a tool, %d assistant tokens (%.1fs)\n",
		p.Name, len(demos), s.Noise, pct(ok, len(all)), pct(tools, len(all)), tokens, r.now().Sub(t0).Seconds())

	l, err := r.newLearner(p, start)
	if err != nil {
		return err
	}
	bar := r.newProgress(p.Name, p.Steps)
	defer bar.finish()
	if s.Curriculum > 0 {
		// Shortest first; equal lengths keep synthesis order, so the order is a function of the seed.
		slices.SortStableFunc(demos, func(a, b *traj.Trajectory) int { return cmp.Compare(a.Len(), b.Len()) })
	}
	batch := make([]*traj.Trajectory, s.BatchSize)
	for step := start; step < p.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		rng := r.stepRNG(pi, step, 2)
		pool := curriculumPool(len(demos), s.BatchSize, step, s.Curriculum)
		for i := range batch {
			batch[i] = demos[rng.IntN(pool)]
		}
		st0 := r.now()
		st, err := l.SFTStep(batch)
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		r.version++
		m := map[string]any{
			"phase": p.Name, "step": step + 1, "version": r.version,
			"sft/loss": st.Loss, "sft/tokens": st.Tokens, "explore/entropy": st.Entropy,
			"signal/grad_norm": st.GradNorm, "optim/lr": st.LR,
			"time/train_s": r.now().Sub(st0).Seconds(), "time/elapsed_s": r.now().Sub(r.start).Seconds(),
		}
		if err := r.metrics.Write(m); err != nil {
			return err
		}
		bar.update(step+1, fmt.Sprintf("loss %.3f", st.Loss))
		if err := r.afterStep(l, pi, step); err != nil {
			return err
		}
	}
	return nil
}

// curriculumPool is how many of the n length-sorted demonstrations step may draw from: the
// shortest quarter at step 0, growing linearly to all of them at step steps (0 = no curriculum),
// never fewer than one batch.
func curriculumPool(n, batch, step, steps int) int {
	if steps <= 0 || step >= steps {
		return n
	}
	k := n/4 + int(int64(n-n/4)*int64(step)/int64(steps))
	return min(n, max(k, batch, 1))
}

func usedTool(t *traj.Trajectory) bool {
	for _, tu := range t.Turns {
		if len(tu.ToolCalls) > 0 {
			return true
		}
	}
	return false
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}
