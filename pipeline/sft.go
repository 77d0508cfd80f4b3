package pipeline

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/eval"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/monitor"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// synthesize runs each task with the environment's noisy expert playing through the tokenizer,
// which yields demonstrations in the trajectory format (assistant tokens masked for the loss).
func (r *Run) synthesize(ctx context.Context, envs []config.EnvWeight, tasks []rollout.Task, noise float64, salt uint64) ([]*traj.Trajectory, error) {
	cfg := r.Cfg.Rollout.Config
	// The experts fold when an environment's expert answers the scaffold's request for a
	// summary. They delegate when the run does and every environment of the phase has a
	// delegating expert (env.Spec.DelegatingExpert, played with its sub-episodes by one
	// rollout.ExpertTree); otherwise the demonstrations are played without delegation.
	if cfg.Delegate != nil {
		for _, e := range envs {
			if spec, err := r.phaseSpec(envs, e.Name); err != nil || spec.DelegatingExpert == nil {
				cfg.Delegate = nil
				break
			}
		}
	}
	newConv, lastMessage := r.demoChat()
	runner := &rollout.Runner{
		Tok:             r.tok,
		NewConversation: newConv,
		Cfg:             cfg,
		NewGen: func(t rollout.Task) infer.Generator {
			spec, err := r.phaseSpec(envs, t.Env)
			if err != nil {
				return nil
			}
			rng := rand.New(rand.NewPCG(uint64(t.Seed)^salt, t.GroupID<<8|uint64(t.Index)))
			if cfg.Delegate != nil {
				return &rollout.ExpertTree{Root: spec.DelegatingExpert(t.Seed, noise, rng, cfg.Delegate.ToolName()), Tok: r.tok, Version: r.version, LastMessage: lastMessage}
			}
			return &rollout.AgentGenerator{Agent: spec.Expert(t.Seed, noise, rng), Tok: r.tok, Version: r.version, LastMessage: lastMessage}
		},
	}
	bar := r.newCounter("demonstrations", "episode", len(tasks))
	var mu sync.Mutex
	done := 0
	runner.OnEpisode = func() {
		mu.Lock()
		defer mu.Unlock()
		done++
		bar.update(done, "")
	}
	groups, err := runner.RunGroups(ctx, r.phaseEnvs(envs), tasks, 1, max(r.Cfg.Rollout.EngineSlots, 8))
	bar.finish()
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
func (r *Run) runSFT(ctx context.Context, pi int, p config.Phase, start int) error {
	s := p.SFT
	if s.Data != "" {
		demos, err := r.fileDemos(ctx, p, start)
		if err != nil {
			return err
		}
		return r.trainSFT(ctx, pi, p, start, demos)
	}
	t0 := r.now()
	tasks, err := monitor.SampleTasks(r.opts.Envs, r.stepRNG(pi, -1, 1), p.Envs, s.Demos, 0)
	if err != nil {
		return err
	}
	all, err := r.synthesize(ctx, p.Envs, tasks, s.Noise, r.Cfg.Seed+uint64(pi))
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
		if eval.UsedTool(t) {
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
		trunc := 0
		for _, t := range all {
			if t.Status == traj.StatusTruncated {
				trunc++
			}
		}
		return fmt.Errorf("only %d usable demonstrations for a batch of %d (of %d synthesized, %d truncated at rollout.max_context %d or rollout.max_turns %d, %d successful)",
			len(demos), s.BatchSize, len(all), trunc, r.Cfg.Rollout.MaxContext, r.Cfg.Rollout.MaxTurns, ok)
	}
	if start == 0 {
		if err := r.record(p.Name, 0, all); err != nil {
			return err
		}
	}
	r.printf("%s: %d demonstrations (expert noise %.2f): %.0f%% successful, %.0f%% use a tool, %d assistant tokens (%.1fs)\n",
		p.Name, len(demos), s.Noise, pct(ok, len(all)), pct(tools, len(all)), tokens, r.now().Sub(t0).Seconds())
	return r.trainSFT(ctx, pi, p, start, demos)
}

// fileDemos renders the demonstrations of the phase's sft.data file (sftdata.go), records them
// when the phase starts, and says what was kept and dropped.
func (r *Run) fileDemos(ctx context.Context, p config.Phase, start int) ([]*traj.Trajectory, error) {
	s := p.SFT
	t0 := r.now()
	demos, d, err := r.newDemoRender(s).load(ctx, s.Data)
	if err != nil {
		return nil, err
	}
	if len(demos) < s.BatchSize {
		return nil, fmt.Errorf("sft.data %s: only %d usable demonstrations for a batch of %d (dropped: %s)", s.Data, len(demos), s.BatchSize, d.DescribeSkips())
	}
	if start == 0 {
		if err := r.record(p.Name, 0, demos); err != nil {
			return nil, err
		}
	}
	var tools, tokens, splits int
	for _, t := range demos {
		if eval.UsedTool(t) {
			tools++
		}
		splits += t.NumSamples() - 1
		for _, m := range t.LossMask {
			if m {
				tokens++
			}
		}
	}
	r.printf("%s: %d demonstrations from %s: %.0f%% use a tool, %d assistant tokens, %d template splits (%.1fs)\n",
		p.Name, len(demos), s.Data, pct(tools, len(demos)), tokens, splits, r.now().Sub(t0).Seconds())
	if why := d.DescribeSkips(); why != "" {
		dropped := 0
		for _, n := range d.Skipped {
			dropped += n
		}
		r.printf("%s: %d rows dropped (bad_rows drop): %s\n", p.Name, dropped, why)
	}
	return demos, nil
}

// trainSFT runs the phase's steps on demos.
func (r *Run) trainSFT(ctx context.Context, pi int, p config.Phase, start int, demos []*traj.Trajectory) error {
	s := p.SFT
	l, err := r.newLearner(p, start)
	if err != nil {
		return err
	}
	bar := r.newProgressFrom(p.Name, p.Steps, start)
	defer bar.finish()
	batch := make([]*traj.Trajectory, s.BatchSize)
	for step := start; step < p.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		rng := r.stepRNG(pi, step, 2)
		limit := curriculumLen(r.Cfg.Rollout.MaxContext, step, s.Curriculum)
		for i := range batch {
			batch[i] = turnPrefix(demos[rng.IntN(len(demos))], limit)
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

// curriculumLen is the longest demonstration prefix step trains on: a quarter of the context
// at step 0, growing linearly to the whole context at step steps (0 = no curriculum). This is
// sequence-length warmup: at initialization attention is spread evenly over the context, so the
// gradient that teaches a head to find one earlier token shrinks with the context's length;
// short prefixes let the lookups a long episode needs form first.
func curriculumLen(maxContext, step, steps int) int {
	if steps <= 0 || step >= steps {
		return maxContext
	}
	return maxContext/4 + (maxContext-maxContext/4)*step/steps
}

// turnPrefix returns t cut after its last assistant completion that ends within limit tokens
// (never before the first one), as a view that shares t's slices; t itself when it fits.
func turnPrefix(t *traj.Trajectory, limit int) *traj.Trajectory {
	if t.Len() <= limit || len(t.Turns) == 0 {
		return t
	}
	cut := t.Turns[0].End
	for _, tu := range t.Turns[1:] {
		if tu.End > limit {
			break
		}
		cut = tu.End
	}
	p := *t
	p.Tokens, p.Roles, p.LossMask = t.Tokens[:cut], t.Roles[:cut], t.LossMask[:cut]
	if len(t.Logprobs) > 0 {
		p.Logprobs = t.Logprobs[:cut]
	}
	if len(t.Versions) > 0 {
		p.Versions = t.Versions[:cut]
	}
	n := 0
	for n < len(t.Turns) && t.Turns[n].End <= cut {
		n++
	}
	p.Turns = t.Turns[:n:n]
	if len(t.Samples) > 0 { // the samples that start before the cut (a template's splits)
		k := 0
		for k < len(t.Samples) && t.Samples[k] < cut {
			k++
		}
		p.Samples = t.Samples[:k:k]
		if k == 0 {
			p.Samples = nil
		}
	}
	if n > 0 && p.Turns[n-1].ObsEnd > cut {
		p.Turns = slices.Clone(p.Turns)
		p.Turns[n-1].ObsEnd = cut
	}
	return &p
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}
