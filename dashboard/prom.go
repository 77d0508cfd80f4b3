package dashboard

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// gauges are the latest RL step's scalars exported as Prometheus gauges, by metrics.jsonl key.
var gauges = []struct{ key, name, help string }{
	{"reward/mean", "agentrl_reward_mean", "Mean outcome reward of the latest RL step's sampled episodes."},
	{"reward/success", "agentrl_success_rate", "Share of the latest RL step's episodes that succeeded."},
	{"explore/entropy", "agentrl_entropy", "Mean token entropy (nats) of the latest step's trained tokens."},
	{"explore/distinct_per_group", "agentrl_distinct_per_group", "Distinct action sequences per group over group size, latest RL step."},
	{"signal/zero_var_share", "agentrl_zero_var_share", "Share of the latest RL step's groups with no reward variance."},
	{"signal/effective_batch", "agentrl_effective_batch", "Episodes with a non-zero advantage in the latest RL step."},
	{"signal/grad_norm", "agentrl_grad_norm", "Gradient norm before clipping, latest step."},
	{"shift/behaviour_kl", "agentrl_behaviour_kl", "Behaviour-vs-learner KL per token, latest RL step."},
	{"shift/is_ess", "agentrl_is_ess", "Effective sample size of the importance weights (share), latest RL step."},
	{"shift/version_lag_mean", "agentrl_version_lag_mean", "Mean policy-version lag of the trained tokens, latest RL step."},
	{"shift/version_lag_max", "agentrl_version_lag_max", "Largest policy-version lag, latest RL step."},
	{"loss/total", "agentrl_loss", "Total loss of the latest RL step."},
	{"version", "agentrl_policy_version", "Policy version after the latest step."},
	{"monitor/entropy_coef", "agentrl_monitor_entropy_coef", "Entropy bonus the latest RL step trained with, as the monitor's entropy controller set it."},
	{"monitor/clip_high", "agentrl_monitor_clip_high", "PPO upper clip the latest RL step trained with, as the monitor's entropy controller set it."},
	{"monitor/is_cap", "agentrl_monitor_is_cap", "Importance-weight cap the latest RL step trained with, as the monitor's shift controller set it."},
	{"monitor/is_mask_high", "agentrl_monitor_is_mask_high", "Upper importance-weight mask bound the latest RL step trained with, as the monitor's shift controller set it."},
	{"signal/oversample", "agentrl_monitor_oversample", "Factor by which the latest RL step's dynamic-sampling rounds oversampled (monitor task sampling)."},
	{"async/batches_ahead", "agentrl_async_batches_ahead", "Batches sampled or sampling beyond the one the learner took, latest asynchronous step in overlap mode (queue depth)."},
	{"async/groups_in_flight", "agentrl_async_groups_in_flight", "Groups running when the learner's batch was complete, latest asynchronous step (continuous admission)."},
	{"async/groups_ready", "agentrl_async_groups_ready", "Groups finished and not yet taken when the learner's batch was complete, latest asynchronous step (continuous admission)."},
}

// stages are the time/… keys of wall-clock time exported as agentrl_stage_seconds{stage}.
var stages = []struct{ key, stage string }{
	{"time/generate_env_s", "generate_env"},
	{"time/train_s", "train"},
	{"time/learner_wait_s", "learner_wait"},
	{"time/step_s", "step"},
}

// episodeStages are the time/… keys summed over a step's episodes (which run concurrently, so
// their sum exceeds the step's wall time), exported as agentrl_summed_episode_seconds{stage}.
var episodeStages = []struct{ key, stage string }{
	{"time/generate_s", "generate"},
	{"time/env_s", "env"},
}

// collector reads each run's latest lines when scraped; every metric carries the run's name.
type collector struct{ s *Server }

var (
	stageDesc    = prometheus.NewDesc("agentrl_stage_seconds", "Wall-clock seconds the latest step spent in each stage (generate_env: sampling; step: the whole step).", []string{"run", "stage"}, nil)
	epStageDesc  = prometheus.NewDesc("agentrl_summed_episode_seconds", "Seconds the latest step's episodes spent generating or in their environment, summed over episodes (they run concurrently: not wall time; see agentrl_stage_seconds{stage=\"generate_env\"}).", []string{"run", "stage"}, nil)
	stepsDesc    = prometheus.NewDesc("agentrl_steps_total", "Training steps logged, by phase.", []string{"run", "phase"}, nil)
	episodesDesc = prometheus.NewDesc("agentrl_episodes_total", "RL episodes sampled, by how they ended (ok, truncated, failed: env_error or timeout).", []string{"run", "status"}, nil)
	warnDesc     = prometheus.NewDesc("agentrl_monitor_warnings_total", "Warnings the invariant monitor logged.", []string{"run"}, nil)
	actDesc      = prometheus.NewDesc("agentrl_monitor_actions_total", "Actions the monitor took, by the invariant they acted on.", []string{"run", "invariant"}, nil)
	gaugeDescs   = func() []*prometheus.Desc {
		out := make([]*prometheus.Desc, len(gauges))
		for i, g := range gauges {
			out[i] = prometheus.NewDesc(g.name, g.help, []string{"run"}, nil)
		}
		return out
	}()
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range gaugeDescs {
		ch <- d
	}
	ch <- stageDesc
	ch <- epStageDesc
	ch <- stepsDesc
	ch <- episodesDesc
	ch <- warnDesc
	ch <- actDesc
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.s.runs {
		c.s.fresh(r)
		cv := r.curves
		cv.mu.Lock()
		latest := cv.lastRL
		if latest == nil {
			latest = cv.latest
		}
		for i, g := range gauges {
			if v, ok := latest[g.key]; ok {
				ch <- prometheus.MustNewConstMetric(gaugeDescs[i], prometheus.GaugeValue, v, r.name)
			}
		}
		for _, st := range stages {
			if v, ok := cv.latest[st.key]; ok {
				ch <- prometheus.MustNewConstMetric(stageDesc, prometheus.GaugeValue, v, r.name, st.stage)
			}
		}
		for _, st := range episodeStages {
			if v, ok := cv.latest[st.key]; ok {
				ch <- prometheus.MustNewConstMetric(epStageDesc, prometheus.GaugeValue, v, r.name, st.stage)
			}
		}
		steps := map[string]float64{}
		var order []string
		for _, p := range cv.phases {
			if _, ok := steps[p.Name]; !ok {
				order = append(order, p.Name)
			}
			steps[p.Name] += float64(p.End - p.Start + 1)
		}
		for _, p := range order {
			ch <- prometheus.MustNewConstMetric(stepsDesc, prometheus.CounterValue, steps[p], r.name, p)
		}
		var sampled, failed, truncated float64
		for _, v := range cv.column("episodes/sampled") {
			if v == v {
				sampled += v
			}
		}
		for _, v := range cv.column("episodes/failed") {
			if v == v {
				failed += v
			}
		}
		for _, v := range cv.column("episodes/truncated") {
			if v == v {
				truncated += v
			}
		}
		if _, ok := cv.cols["episodes/sampled"]; ok {
			ch <- prometheus.MustNewConstMetric(episodesDesc, prometheus.CounterValue, sampled-failed-truncated, r.name, "ok")
			ch <- prometheus.MustNewConstMetric(episodesDesc, prometheus.CounterValue, truncated, r.name, "truncated")
			ch <- prometheus.MustNewConstMetric(episodesDesc, prometheus.CounterValue, failed, r.name, "failed")
		}
		ch <- prometheus.MustNewConstMetric(warnDesc, prometheus.CounterValue, float64(len(cv.warnings)), r.name)
		acts := map[string]float64{}
		for _, a := range cv.actions {
			acts[invariantOf(a.Text)]++
		}
		for _, inv := range []string{"exploration", "learning signal", "distribution shift", "other"} {
			if n, ok := acts[inv]; ok {
				ch <- prometheus.MustNewConstMetric(actDesc, prometheus.CounterValue, n, r.name, inv)
			}
		}
		cv.mu.Unlock()
	}
}

// invariantOf names the invariant a warning or action text starts with ("other" when none).
func invariantOf(text string) string {
	for _, inv := range []string{"exploration", "learning signal", "distribution shift"} {
		if strings.HasPrefix(text, inv) {
			return inv
		}
	}
	return "other"
}
