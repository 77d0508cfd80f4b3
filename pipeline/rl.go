package pipeline

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/monitor"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// runRL is an RL phase. Each step reads as the loop it is: sample groups of episodes with the
// current policy and filter them, let the learner train on what is kept, publish the new weights
// to the engine (or the inference servers of rollout.generator), log the step.
func (r *Run) runRL(ctx context.Context, pi int, p config.Phase, start int) error {
	if err := r.checkDelegateTools(p); err != nil {
		return err
	}
	if err := r.checkTurnShapes(ctx, p); err != nil {
		return err
	}
	if p.RL.Async != nil {
		return r.runRLAsync(ctx, pi, p, start)
	}
	l, err := r.openRL(ctx, pi, p, start)
	if err != nil {
		return err
	}
	defer l.close()

	for step := start; step < p.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		st0 := r.now()
		src := r.stepSource(pi, step, 3)
		rng := rand.New(src)
		sampled, groups, fill, err := r.sampleRL(ctx, l.smp.gen, p, step, rng)
		if err == nil {
			err = r.tinkerFailed() // tinker.go
		}
		if err != nil {
			return fmt.Errorf("step %d: sample: %w", step, err)
		}
		genTime := r.now().Sub(st0)
		if err := r.record(p.Name, step+1, sampled); err != nil {
			return err
		}
		st := &rlStep{phase: p.Name, step: step + 1, version: r.version, sample: monitor.Measure(sampled, groups), fill: fill, simLatency: simulatedLatency(p.Envs), rewards: rewardMetrics(sampled), samples: r.sampleMetrics(sampled)}
		tt := r.now()
		if trajs := slices.Concat(groups...); len(trajs) > 0 {
			rep, err := r.learnStepRestartable(l.upd, trajs, step, rng, src)
			if err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			st.learn = rep
			if err := l.smp.publish(ctx, true, rep.Metrics); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
		}
		st.times = stepTimes{generateEnv: genTime.Seconds(), train: r.now().Sub(tt).Seconds(), step: r.now().Sub(st0).Seconds(), elapsed: r.now().Sub(r.start).Seconds()}
		if err := l.endStep(ctx, st, step); err != nil {
			return err
		}
	}
	return r.closeLearner(l.upd.Learner.Opt)
}

// rlLoop is what every in-process RL loop (synchronous, overlap, continuous) holds for a phase:
// its update, where it generates, the monitor and the progress bar.
type rlLoop struct {
	r   *Run
	pi  int
	p   config.Phase
	upd *learn.RL
	smp *policySampler
	mon *monitor.Monitor
	bar *progress
}

// openRL makes phase pi's update (resuming at step start) and starts its generator.
func (r *Run) openRL(ctx context.Context, pi int, p config.Phase, start int) (*rlLoop, error) {
	upd, err := r.newRLUpdate(p, start)
	if err != nil {
		return nil, err
	}
	smp, err := r.newSampler(ctx, p)
	if err != nil {
		return nil, err
	}
	return &rlLoop{r: r, pi: pi, p: p, upd: upd, smp: smp, mon: monitor.New(r.Cfg.Monitor), bar: r.newProgressFrom(p.Name, p.Steps, start)}, nil
}

// close ends the progress bar, then stops the generator.
func (l *rlLoop) close() {
	l.bar.finish()
	l.smp.close()
	if s := l.r.learner; s != nil { // the phase ended early: the learner process goes with it
		s.stop()
		l.r.learner = nil
	}
}

// endStep logs a trained (or skipped) step, evaluates when one is due and checkpoints.
func (l *rlLoop) endStep(ctx context.Context, st *rlStep, step int) error {
	r, p := l.r, l.p
	if err := r.logRL(st, l.mon, l.bar); err != nil {
		return err
	}
	if e := r.Cfg.Eval.Every; e > 0 && (step+1)%e == 0 && step+1 < p.Steps {
		if err := r.evaluate(ctx, fmt.Sprintf("%s-%d", p.Name, step+1)); err != nil {
			return err
		}
	}
	if err := r.afterStep(l.upd.Learner, l.pi, step); err != nil {
		return err
	}
	if r.opts.StopRL != nil && step+1 < p.Steps && r.opts.StopRL(p.Name, step+1, r.lastRL) {
		return ErrStopped
	}
	return nil
}

// newRLUpdate makes the phase's RL update: estimator, loss, the frozen reference of a KL term or
// penalty, the penalty (its adaptive coefficient restored when resuming mid-phase) and the
// learner (restored likewise). A critic estimator gives the policy a value head first, unless it
// has one (from an earlier phase, or the checkpoint a resumed phase loaded): a fresh head starts
// at zero (model.AddValueHead), so a phase resumed at its start gets the same head as one that
// was never interrupted.
func (r *Run) newRLUpdate(p config.Phase, start int) (*learn.RL, error) {
	c := p.RL
	est, err := algo.NewEstimator(c.Advantage)
	if err != nil {
		return nil, err
	}
	if algo.NeedsValues(est) {
		if start > 0 && !r.model.HasValueHead() {
			return nil, fmt.Errorf("resume: %q needs the value head, which the checkpoint lacks", c.Advantage.Name)
		}
		r.model.AddValueHead()
	}
	loss, err := algo.NewLoss(c.Loss)
	if err != nil {
		return nil, err
	}
	pen, err := r.newKLPenalty(c.KLPenalty, start)
	if err != nil {
		return nil, err
	}
	var ref *model.Model
	if c.Loss.KL.Coef > 0 || pen != nil {
		// The frozen reference is the policy as the phase starts; it is kept on disk so that a
		// resumed phase compares against the same one.
		if start == 0 {
			ref = r.model.Clone()
			if err := checkpoint.Save(r.checkpointDir(refName(p.Name)), ref, r.tok, nil); err != nil {
				return nil, err
			}
		} else if ref, err = r.loadRef(p.Name); err != nil {
			return nil, fmt.Errorf("reference policy: %w", err)
		}
	}
	l, err := r.newLearner(p, start)
	if err != nil {
		return nil, err
	}
	refDir := ""
	if ref != nil {
		refDir = r.checkpointDir(refName(p.Name))
	}
	if err := r.attachLearner(l, p, refDir); err != nil {
		return nil, err
	}
	if r.act, err = r.newActions(p, start); err != nil {
		return nil, err
	}
	dist, err := r.newDistill(context.Background(), p) // distill.go
	if err != nil {
		return nil, err
	}
	return &learn.RL{Learner: l, Estimator: est, Loss: loss, Ref: ref, KLPenalty: pen, Epochs: c.Epochs, Minibatches: c.Minibatches, TrainToolTokens: c.TrainToolResponses, Distill: dist}, nil
}

// newKLPenalty makes the phase's KL penalty (nil when c is): a fresh phase starts from c.Coef, a
// resumed one from the adaptive coefficient its checkpoint saved.
func (r *Run) newKLPenalty(c *algo.KLPenaltyConfig, start int) (*learn.KLPenalty, error) {
	saved := r.state.KLCoef // the checkpoint's, when resuming mid-phase
	r.state.KLCoef = nil
	if c == nil {
		return nil, nil
	}
	est, err := algo.ParseKL(c.Estimator)
	if err != nil {
		return nil, err
	}
	pen := &learn.KLPenalty{Estimator: est, Coef: c.Coef}
	if a := c.Adaptive; a != nil {
		pen.Target, pen.Horizon = a.Target, a.Horizon
	}
	if pen.Target > 0 && start > 0 {
		if saved == nil {
			return nil, fmt.Errorf("resume: the checkpoint holds no adaptive KL coefficient for rl.kl_penalty (was the phase started without it?)")
		}
		pen.Coef = *saved
	}
	r.keepKLCoef(pen)
	return pen, nil
}

// learnStep trains upd on trajs as step of the phase and moves the run to the next policy
// version; publishing the weights is the caller's. The learning-rate schedule counts the phase's
// steps, trained on or not, so the step is set here rather than counted by the learner.
func (r *Run) learnStep(upd *learn.RL, trajs []*traj.Trajectory, step int, rng *rand.Rand) (*learn.RLReport, error) {
	return r.learnStepRestartable(upd, trajs, step, rng, nil)
}

// learnStepRestartable is learnStep where rng draws from src: a torch learner that fails during
// the step is restarted from the state it saved before it (learner.restart) and the step is
// done again from the same random state and KL coefficient, as many times as restarts are left.
// Without restarts left, a learner's failure stops the run with what to do.
func (r *Run) learnStepRestartable(upd *learn.RL, trajs []*traj.Trajectory, step int, rng *rand.Rand, src *rand.PCG) (*learn.RLReport, error) {
	upd.Learner.Step = step
	if err := r.act.Configure(upd); err != nil {
		return nil, err
	}
	s := r.learner
	restarts := 0
	for {
		var rngState []byte
		var klCoef float64
		restartable := src != nil && s.canRestart()
		if restartable {
			var err error
			if rngState, err = src.MarshalBinary(); err != nil {
				return nil, err
			}
			if upd.KLPenalty != nil {
				klCoef = upd.KLPenalty.Coef
			}
			if err := s.keepRestartState(context.Background()); err != nil {
				return nil, err
			}
		}
		rep, err := upd.Step(trajs, r.version, rng)
		if err == nil {
			err = r.syncLearner(r.version+1, rep.Metrics)
		}
		if err != nil && restartable && learnerFailed(err) {
			r.printf("warning: %v: restarting the learner from its state at update %d and training the step again (%d restart(s) left)\n", err, s.restartSteps, s.restartsLeft-1)
			if err := s.restart(context.Background(), err); err != nil {
				return nil, err
			}
			if err := src.UnmarshalBinary(rngState); err != nil {
				return nil, err
			}
			if upd.KLPenalty != nil {
				upd.KLPenalty.Coef = klCoef
			}
			restarts++
			continue
		}
		r.noteTeacher(&rep)
		if err != nil {
			if (s != nil || r.tinker != nil) && learnerFailed(err) {
				err = fmt.Errorf("%w; the run stops here: resume it from its last checkpoint (agentrl train --resume %s)", err, r.Dir)
			}
			return nil, err
		}
		if restarts > 0 {
			rep.Metrics["learner/restarts"] = float64(restarts)
		}
		r.keepKLCoef(upd.KLPenalty)
		r.version++
		return &rep, nil
	}
}

// keepKLCoef records an adaptive penalty's coefficient in the progress state, so that a checkpoint
// taken after this step resumes with it.
func (r *Run) keepKLCoef(pen *learn.KLPenalty) {
	if pen != nil && pen.Target > 0 {
		c := pen.Coef
		r.state.KLCoef = &c
	}
}

// sampleRL samples one step's groups with the engine's current weights and filters them (dynamic
// sampling draws more rounds while too few groups are informative). It returns every sampled
// trajectory, in order, and the groups kept for training.
func (r *Run) sampleRL(ctx context.Context, gen infer.Generator, p config.Phase, step int, rng *rand.Rand) ([]*traj.Trajectory, [][]*traj.Trajectory, reward.FillStats, error) {
	c := p.RL
	runner := &rollout.Runner{Gen: gen, Tok: r.tok, Cfg: r.Cfg.Rollout.Config, SampleSeed: rng.Uint64(), NewConversation: r.opts.NewConversation}
	round := 0
	var sampled []*traj.Trajectory
	sample := func(ctx context.Context, n int) ([][]*traj.Trajectory, error) {
		tasks, err := r.drawTasks(rng, p, n, uint64(step)<<16|uint64(round)<<12)
		round++
		if err != nil {
			return nil, err
		}
		groups, err := runner.RunGroups(ctx, withLatency(r.phaseEnvs(p.Envs), p.Envs), tasks, c.GroupSize, r.Cfg.Rollout.EngineSlots)
		if err != nil {
			return nil, err
		}
		out := make([][]*traj.Trajectory, len(groups))
		n0 := len(sampled)
		for i, g := range groups {
			out[i] = g.Trajs
			sampled = append(sampled, g.Trajs...)
		}
		if err := r.shapeRewards(ctx, gen, p, step, sampled[n0:]); err != nil {
			return nil, err
		}
		return out, nil
	}
	if ds := c.DynamicSampling; ds != nil {
		groups, fill, err := reward.DynamicSampling{Groups: c.GroupsPerStep, MaxRounds: ds.MaxRounds, AllowPartial: true}.Fill(ctx, sample)
		return sampled, groups, fill, err
	}
	groups, err := sample(ctx, c.GroupsPerStep)
	return sampled, groups, reward.FillStats{Rounds: 1, Sampled: len(groups)}, err
}

// withLatency wraps the environments of envs that have a simulated latency in env.WithLatency.
func withLatency(f rollout.EnvFactory, envs []config.EnvWeight) rollout.EnvFactory {
	lat := map[string]env.LatencyConfig{}
	for _, e := range envs {
		if e.Latency != nil {
			lat[e.Name] = *e.Latency
		}
	}
	if len(lat) == 0 {
		return f
	}
	return func(name string) (env.Env, error) {
		e, err := f(name)
		if err != nil {
			return nil, err
		}
		if c, ok := lat[name]; ok {
			return env.WithLatency(e, c), nil
		}
		return e, nil
	}
}

// simulatedLatency describes the simulated latencies of a phase's environments ("" when none).
func simulatedLatency(envs []config.EnvWeight) string {
	var parts []string
	for _, e := range envs {
		if e.Latency != nil {
			parts = append(parts, e.Name+": "+e.Latency.String())
		}
	}
	return strings.Join(parts, "; ")
}

// logRL writes the step's metrics line with the monitor's warnings, and shows its progress.
func (r *Run) logRL(st *rlStep, mon *monitor.Monitor, bar *progress) error {
	m := st.fields()
	warnings := mon.Check(st.learn, st.sample)
	if a := st.async; a != nil && a.latencyBiasOK {
		if w := mon.CheckLatencyBias(a.latencyBias); w != "" {
			warnings = append(warnings, w)
		}
	}
	if len(warnings) > 0 {
		m["warnings"] = warnings
	}
	acted := r.monitorAct(st, m)
	if err := r.metrics.Write(m); err != nil {
		return err
	}
	r.lastRL = m
	for _, w := range warnings {
		bar.warn(w)
	}
	for _, a := range acted {
		bar.acted(a)
	}
	entropy := "-" // not measured: the step trained nothing
	if st.learn != nil {
		entropy = fmt.Sprintf("%.2f", st.learn.Entropy)
	}
	s := st.sample
	line := fmt.Sprintf("reward %.2f success %.0f%% tools %.0f%% ent %s", s.MeanReward, 100*s.Success, 100*s.ToolRate, entropy)
	if lv := monitor.DescribeLevels(s.Levels); lv != "" {
		line += " (" + lv + ")"
	}
	bar.update(st.step, line)
	return nil
}
