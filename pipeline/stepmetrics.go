package pipeline

import (
	"fmt"
	"math"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/monitor"
	"github.com/agentrl/agentrl/reward"
)

// rlStep is what one RL step measured. The monitor reads its fields; fields lays it out under the
// names of metrics.jsonl.
type rlStep struct {
	phase   string
	step    int
	version int32 // the policy version that sampled the step
	sample  monitor.Stats
	fill    reward.FillStats
	learn   *learn.RLReport    // nil when no group was kept, so nothing was trained
	async   *asyncStats        // nil in a synchronous phase
	dist    map[string]float64 // the data plane's counters (dist/…), nil without workers
	rewards map[string]float64 // the reward blocks' parts (reward/…), nil without reward blocks
	samples map[string]float64 // training samples per episode (rollout/…, samples.go)
	// simLatency describes the simulated latency of the phase's environments ("" when none).
	simLatency string
	times      stepTimes
}

// stepTimes are a step's stages in seconds.
type stepTimes struct {
	generateEnv, train, step, elapsed float64
}

// fields returns the step's metrics.jsonl line.
func (s *rlStep) fields() map[string]any {
	m := map[string]any{"phase": s.phase, "step": s.step, "version": s.version}
	s.sample.Into(m)
	m["signal/sample_rounds"] = s.fill.Rounds
	m["signal/partial_batch"] = s.fill.Partial
	var rl learn.RLStats
	var shift algo.Shift
	if l := s.learn; l != nil {
		for k, v := range l.Estimator {
			m[k] = v
		}
		for k, v := range l.Penalty {
			m[k] = v
		}
		for k, v := range l.Distill { // "distill/…", only with rl.distill
			m[k] = v
		}
		m["signal/effective_batch"] = l.Advantages.Effective
		m["signal/adv_spread"] = l.Advantages.Spread
		m["signal/adv_mean_abs"] = l.Advantages.MeanAbs
		for k, v := range l.Metrics {
			m[k] = v
		}
		rl, shift = l.RLStats, l.Shift
	}
	m["shift/behaviour_kl"] = shift.KL
	m["shift/is_mean"] = shift.ISMean
	m["shift/is_max"] = shift.ISMax
	m["shift/is_std"] = shift.ISStd
	m["shift/is_ess"] = shift.ESS
	m["shift/version_lag_mean"] = shift.LagMean
	m["shift/version_lag_max"] = shift.LagMax
	if s.learn != nil { // measured on the trained tokens: a step that trained nothing has none
		m["explore/entropy"] = rl.Entropy
	}
	if !math.IsNaN(rl.GradNorm) { // a Tinker service may not report the gradient's norm
		m["signal/grad_norm"] = rl.GradNorm
		m["signal/grad_norm_max"] = rl.MaxGrad
	}
	m["signal/updates_skipped"] = rl.Skipped
	m["optim/lr"] = rl.LR
	m["loss/total"] = rl.Loss
	m["time/generate_env_s"] = s.times.generateEnv
	m["time/generate_s"] = s.sample.GenSeconds
	m["time/env_s"] = s.sample.EnvSeconds
	m["time/train_s"] = s.times.train
	m["time/step_s"] = s.times.step
	m["time/elapsed_s"] = s.times.elapsed
	if s.simLatency != "" {
		m["sim/latency"] = s.simLatency
		m["time/episode_s"] = s.sample.EpisodeSeconds() // what the simulated latency costs an episode
	}
	for k, v := range s.dist {
		m[k] = v
	}
	for k, v := range s.rewards {
		m[k] = v
	}
	for k, v := range s.samples {
		m[k] = v
	}
	if a := s.async; a != nil {
		// The staleness histogram: trained episodes by how many versions their oldest sampled
		// token lags the policy being trained.
		for v, n := range s.sample.KeptOldest {
			k := fmt.Sprintf("async/staleness/%d", s.version-v)
			c, _ := m[k].(int)
			m[k] = c + n
		}
		m["async/dropped_stale"] = a.droppedStale
		m["async/partial_stale"] = a.partialStale
		if a.continuous {
			m["async/groups_in_flight"] = a.inFlight
			m["async/groups_ready"] = a.ready
			m["async/cancelled_stale"] = a.cancelled
			if a.latencyBiasOK {
				m["async/latency_bias"] = a.latencyBias
			}
		} else {
			m["async/batches_ahead"] = a.ahead
		}
		m["time/learner_wait_s"] = a.learnerWait
		m["time/generator_wait_s"] = a.genWait
	}
	return m
}
