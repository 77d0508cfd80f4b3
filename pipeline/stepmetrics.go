package pipeline

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// rlStep is what one RL step measured. The monitor reads its fields; fields lays it out under the
// names of metrics.jsonl.
type rlStep struct {
	phase   string
	step    int
	version int32 // the policy version that sampled the step
	sample  stepStats
	fill    reward.FillStats
	learn   *learn.RLReport    // nil when no group was kept, so nothing was trained
	async   *asyncStats        // nil in a synchronous phase
	dist    map[string]float64 // the data plane's counters (dist/…), nil without workers
	rewards map[string]float64 // the reward blocks' parts (reward/…), nil without reward blocks
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
	s.sample.into(m)
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
	m["signal/grad_norm"] = rl.GradNorm
	m["signal/grad_norm_max"] = rl.MaxGrad
	m["signal/updates_skipped"] = rl.Skipped
	m["optim/lr"] = rl.LR
	m["loss/total"] = rl.Loss
	m["time/generate_env_s"] = s.times.generateEnv
	m["time/generate_s"] = s.sample.genSeconds
	m["time/env_s"] = s.sample.envSeconds
	m["time/train_s"] = s.times.train
	m["time/step_s"] = s.times.step
	m["time/elapsed_s"] = s.times.elapsed
	if s.simLatency != "" {
		m["sim/latency"] = s.simLatency
	}
	for k, v := range s.dist {
		m[k] = v
	}
	for k, v := range s.rewards {
		m[k] = v
	}
	if a := s.async; a != nil {
		// The staleness histogram: trained episodes by how many versions their oldest sampled
		// token lags the policy being trained.
		for v, n := range s.sample.keptOldest {
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
		} else {
			m["async/batches_ahead"] = a.ahead
		}
		m["time/learner_wait_s"] = a.learnerWait
		m["time/generator_wait_s"] = a.genWait
	}
	return m
}

// envLevel is an environment at one of its difficulty levels.
type envLevel struct {
	env   string
	level int
}

// metric is the name of the level's training success in a step's metrics: "reward/success/
// <env>/level<N>" beside the step's "reward/success" (evaluations report "eval/level<N>/pass1" on
// lines that name their environment).
func (l envLevel) metric() string { return fmt.Sprintf("reward/success/%s/level%d", l.env, l.level) }

// levelSuccess is the training success per difficulty level of a step's sampled episodes: for
// each environment and level its tasks were drawn at (env.InfoLevel, set by a difficulty block),
// the share of those episodes that succeeded. Nil when no episode was drawn at a level.
func levelSuccess(sampled []*traj.Trajectory) map[envLevel]float64 {
	var n map[envLevel]int
	var out map[envLevel]float64
	for _, t := range sampled {
		i := slices.IndexFunc(t.Meta, func(kv traj.KV) bool { return kv.Key == env.InfoLevel })
		if i < 0 {
			continue
		}
		lv, err := strconv.Atoi(t.Meta[i].Value)
		if err != nil {
			continue // env.WithDifficulty writes a decimal level; nothing else sets the key
		}
		if out == nil {
			n, out = map[envLevel]int{}, map[envLevel]float64{}
		}
		k := envLevel{t.Env, lv}
		n[k]++
		if rollout.Succeeded(t) {
			out[k]++
		}
	}
	for k, c := range n {
		out[k] /= float64(c)
	}
	return out
}

// describeLevels is the per-level success of a step for its progress line, "" when the step
// has none: "calc L1 80% L2 40%", environments and levels in order.
func describeLevels(levels map[envLevel]float64) string {
	keys := slices.SortedFunc(maps.Keys(levels), func(a, b envLevel) int {
		return cmp.Or(strings.Compare(a.env, b.env), a.level-b.level)
	})
	var b strings.Builder
	for i, k := range keys {
		if i == 0 || keys[i-1].env != k.env {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(k.env)
		}
		fmt.Fprintf(&b, " L%d %.0f%%", k.level, 100*levels[k])
	}
	return b.String()
}

// monitor turns the three invariants into warnings that name them.
type monitor struct {
	cfg MonitorConfig
}

func newMonitor(c MonitorConfig) *monitor { return &monitor{cfg: c} }

func (mo *monitor) check(s *rlStep) []string {
	var w []string
	// Entropy and shift are measured only on steps that trained (a step with no informative
	// group has none).
	if s.learn == nil {
		w = append(w, "step trained nothing (no group carried a learning signal): entropy and shift not measured")
	}
	if l := s.learn; l != nil && l.Entropy < mo.cfg.MinEntropy {
		w = append(w, fmt.Sprintf("exploration collapsing: mean token entropy %.4f below %.4f", l.Entropy, mo.cfg.MinEntropy))
	}
	if z := s.sample.zeroVarShare; z > mo.cfg.MaxZeroVarShare {
		w = append(w, fmt.Sprintf("learning signal degenerating: %.0f%% of groups have zero reward variance (limit %.0f%%)", 100*z, 100*mo.cfg.MaxZeroVarShare))
	}
	if l := s.learn; l != nil && l.Shift.KL > mo.cfg.MaxKL {
		w = append(w, fmt.Sprintf("distribution shift: behaviour-vs-learner KL %.4f above %.4f", l.Shift.KL, mo.cfg.MaxKL))
	}
	return w
}
