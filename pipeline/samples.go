package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// sampleMetrics counts the training samples of a step's episodes: rollout/template_splits, the
// splits where the chat template was not prefix-stable (an episode of k samples split k − 1
// times, less its folds and its sub-episodes' samples), and rollout/samples_per_episode. They are
// logged when the run renders with a Conversation of its own (Options.NewConversation), when it
// folds contexts (rollout.context, whose rollout/context_* figures come with them), when it
// delegates (rollout.delegate, with rollout/delegate_* and time/episode_s) and whenever a step has an
// episode of several samples, so that a replay of the recorded trajectories logs the same; the
// ChatML default never splits, and its metrics lines are unchanged.
func (r *Run) sampleMetrics(ts []*traj.Trajectory) map[string]float64 {
	samples := 0
	for _, t := range ts {
		samples += len(t.Samples)
	}
	fold, deleg := r.Cfg.Rollout.Context != nil, r.Cfg.Rollout.Delegate != nil
	if samples == 0 && r.opts.NewConversation == nil && !fold && !deleg {
		return nil
	}
	m := map[string]float64{}
	folds := 0
	if deleg {
		for _, t := range ts {
			folds += rollout.SubEpisodeSamples(t)
		}
		ds := rollout.MeasureDelegation(ts)
		for k, v := range ds.Metrics("rollout/") {
			m[k] = v
		}
		// The parent's wall time, its sub-episodes' parallel waits included (a timing: replays
		// do not compare time/ figures).
		m["time/episode_s"] = ds.WallSeconds
	}
	if fold {
		fs := rollout.MeasureFolds(ts)
		folds += fs.Folds
		for k, v := range fs.Metrics("rollout/") {
			m[k] = v
		}
	}
	m["rollout/template_splits"] = float64(samples - folds)
	if len(ts) > 0 {
		m["rollout/samples_per_episode"] = float64(len(ts)+samples) / float64(len(ts))
	}
	return m
}

// shapeTurns is how many turns the start check plays per environment.
const shapeTurns = 4

// checkTurnShapes is the start check of an RL phase run with a Conversation of its own: for each
// environment of the phase it plays one training task with the environment's expert through the
// Conversation (rollout.CheckShapes) and says which turn shapes split an episode into samples. A
// Conversation that cannot render an environment's turns is an error; an environment or expert
// that fails here is reported and the phase goes on (its episodes will record the failure).
func (r *Run) checkTurnShapes(ctx context.Context, p config.Phase) error {
	if r.opts.NewConversation == nil {
		return nil
	}
	for _, ew := range p.Envs {
		spec, err := r.phaseSpec(p.Envs, ew.Name)
		if err != nil {
			return err
		}
		line, err := shapeLine(ctx, r, spec)
		if errors.Is(err, rollout.ErrRender) {
			return fmt.Errorf("phase %s: chat template check: env %s: %w", p.Name, ew.Name, err)
		}
		if err != nil {
			r.printf("chat template check: env %s: not checked: %v\n", ew.Name, err)
			continue
		}
		r.printf("chat template check: env %s: %s\n", ew.Name, line)
	}
	return nil
}

func shapeLine(ctx context.Context, r *Run, spec env.Spec) (string, error) {
	e, err := spec.New()
	if err != nil {
		return "", err
	}
	e = r.withToolFormat(e)
	if c, ok := e.(env.Closer); ok {
		defer c.Close()
	}
	seed := spec.Train.Lo
	agent := spec.Expert(seed, 0, rand.New(rand.NewPCG(uint64(seed), 0)))
	sc, err := rollout.CheckShapes(ctx, r.opts.NewConversation, r.tok, e, agent, seed, min(shapeTurns, r.Cfg.Rollout.MaxTurns))
	if err != nil {
		return "", err
	}
	if len(sc.Splits) == 0 {
		return fmt.Sprintf("prefix-stable over %d turns (prompt, observations, final): one sample per episode", sc.Turns), nil
	}
	return fmt.Sprintf("splits at %s (%d turns played): such episodes train as several samples", strings.Join(sc.Splits, ", "), sc.Turns), nil
}
