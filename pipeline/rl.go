package pipeline

import (
	"context"
	"fmt"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// runRL is an RL phase: each step samples groups of episodes with the current policy, filters
// them, estimates advantages, updates the policy and publishes the new weights to the engine.
func (r *Run) runRL(ctx context.Context, pi int, p Phase, start int) error {
	c := p.RL
	est, err := algo.NewEstimator(c.Advantage)
	if err != nil {
		return err
	}
	loss, err := algo.NewLoss(c.Loss)
	if err != nil {
		return err
	}
	var ref *model.Model
	if c.Loss.KL.Coef > 0 {
		// The frozen reference is the policy as the phase starts; it is kept on disk so that a
		// resumed phase compares against the same one.
		if start == 0 {
			ref = r.model.Clone()
			if err := checkpoint.Save(r.checkpointDir(refName(p.Name)), ref, r.tok, nil); err != nil {
				return err
			}
		} else if ref, err = r.loadRef(p.Name); err != nil {
			return fmt.Errorf("reference policy: %w", err)
		}
	}
	l, err := r.newLearner(p, start)
	if err != nil {
		return err
	}
	eng, err := local.NewEngine(r.model, r.version, local.EngineConfig{Slots: r.Cfg.Rollout.EngineSlots, MaxLen: r.Cfg.Rollout.MaxContext})
	if err != nil {
		return err
	}
	defer eng.Close()
	mon := newMonitor(r.Cfg.Monitor)
	bar := r.newProgress(p.Name, p.Steps)
	defer bar.finish()

	for step := start; step < p.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		st0 := r.now()
		rng := r.stepRNG(pi, step, 3)
		runner := &rollout.Runner{Gen: eng, Tok: r.tok, Cfg: r.Cfg.Rollout.Runner(), SampleSeed: rng.Uint64()}
		round := 0
		var sampledAll []*traj.Trajectory
		sample := func(ctx context.Context, n int) ([][]*traj.Trajectory, error) {
			tasks, err := sampleTasks(r.opts.Envs, rng, p.Envs, n, uint64(step)<<16|uint64(round)<<12)
			round++
			if err != nil {
				return nil, err
			}
			groups, err := runner.RunGroups(ctx, r.envFactory(), tasks, c.GroupSize, r.Cfg.Rollout.EngineSlots)
			if err != nil {
				return nil, err
			}
			out := make([][]*traj.Trajectory, len(groups))
			for i, g := range groups {
				out[i] = g.Trajs
				sampledAll = append(sampledAll, g.Trajs...)
			}
			return out, nil
		}
		var groups [][]*traj.Trajectory
		var fill reward.FillStats
		if ds := c.DynamicSampling; ds != nil {
			groups, fill, err = reward.DynamicSampling{Groups: c.GroupsPerStep, MaxRounds: ds.MaxRounds, AllowPartial: true}.Fill(ctx, sample)
		} else {
			groups, err = sample(ctx, c.GroupsPerStep)
			fill.Rounds, fill.Sampled = 1, len(groups)
		}
		if err != nil {
			return fmt.Errorf("step %d: sample: %w", step, err)
		}
		genTime := r.now().Sub(st0)
		if err := r.record(p.Name, step+1, sampledAll); err != nil {
			return err
		}
		var trajs []*traj.Trajectory
		for _, g := range groups {
			trajs = append(trajs, g...)
		}
		stats := batchStats(sampledAll, groups)
		m := map[string]any{"phase": p.Name, "step": step + 1, "version": r.version}
		stats.into(m)
		m["signal/sample_rounds"] = fill.Rounds
		m["signal/partial_batch"] = fill.Partial

		tt := r.now()
		var rl learn.RLStats
		var shift shiftStats
		if len(trajs) > 0 {
			b, err := algo.FromTrajectories(trajs)
			if err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			b.Old = make([]float32, b.NumTokens())
			if err := l.Logprobs(r.model, trajs, b, 64, b.Old, nil); err != nil {
				return fmt.Errorf("step %d: recompute logprobs: %w", step, err)
			}
			shift = measureShift(b, r.version)
			if ref != nil {
				b.Ref = make([]float32, b.NumTokens())
				if err := l.Logprobs(ref, trajs, b, 64, b.Ref, nil); err != nil {
					return fmt.Errorf("step %d: reference logprobs: %w", step, err)
				}
			}
			am, err := est.Estimate(b)
			if err != nil {
				return fmt.Errorf("step %d: advantages: %w", step, err)
			}
			for k, v := range am {
				m[k] = v
			}
			advantageStats(b).into(m)
			rl, err = l.RLStep(trajs, b, loss, c.Epochs, c.Minibatches, rng, r.version)
			if err != nil {
				return fmt.Errorf("step %d: update: %w", step, err)
			}
			for k, v := range rl.Metrics {
				m[k] = v
			}
			r.version++
			applied, err := eng.LoadWeights(r.model, r.version)
			if err != nil {
				return err
			}
			<-applied
		}
		shift.into(m)
		m["explore/entropy"] = rl.Entropy
		m["signal/grad_norm"] = rl.GradNorm
		m["signal/grad_norm_max"] = rl.MaxGrad
		m["signal/updates_skipped"] = rl.Skipped
		m["optim/lr"] = rl.LR
		m["loss/total"] = rl.Loss
		m["time/generate_env_s"] = genTime.Seconds()
		m["time/generate_s"] = stats.genSeconds
		m["time/env_s"] = stats.envSeconds
		m["time/train_s"] = r.now().Sub(tt).Seconds()
		m["time/step_s"] = r.now().Sub(st0).Seconds()
		m["time/elapsed_s"] = r.now().Sub(r.start).Seconds()
		warnings := mon.check(m)
		if len(warnings) > 0 {
			m["warnings"] = warnings
		}
		if err := r.metrics.Write(m); err != nil {
			return err
		}
		for _, w := range warnings {
			bar.warn(w)
		}
		bar.update(step+1, fmt.Sprintf("reward %.2f success %.0f%% tools %.0f%% ent %.2f", stats.meanReward, 100*stats.success, 100*stats.toolRate, rl.Entropy))
		if e := r.Cfg.Eval.Every; e > 0 && (step+1)%e == 0 && step+1 < p.Steps {
			if err := r.evaluate(ctx, fmt.Sprintf("%s-%d", p.Name, step+1)); err != nil {
				return err
			}
		}
		if err := r.afterStep(l, pi, step); err != nil {
			return err
		}
	}
	return nil
}

// monitor turns the three invariants into warnings that name them.
type monitor struct {
	cfg MonitorConfig
}

func newMonitor(c MonitorConfig) *monitor { return &monitor{cfg: c} }

func (mo *monitor) check(m map[string]any) []string {
	var w []string
	// Entropy is measured only on steps that trained (a step with no informative group has none).
	if e, ok := m["explore/entropy"].(float64); ok && e < mo.cfg.MinEntropy && m["signal/effective_batch"] != nil {
		w = append(w, fmt.Sprintf("exploration collapsing: mean token entropy %.4f below %.4f", e, mo.cfg.MinEntropy))
	}
	if z, ok := m["signal/zero_var_share"].(float64); ok && z > mo.cfg.MaxZeroVarShare {
		w = append(w, fmt.Sprintf("learning signal degenerating: %.0f%% of groups have zero reward variance (limit %.0f%%)", 100*z, 100*mo.cfg.MaxZeroVarShare))
	}
	if k, ok := m["shift/behaviour_kl"].(float64); ok && k > mo.cfg.MaxKL {
		w = append(w, fmt.Sprintf("distribution shift: behaviour-vs-learner KL %.4f above %.4f", k, mo.cfg.MaxKL))
	}
	return w
}
