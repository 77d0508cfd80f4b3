package rollout

import (
	"strconv"

	"github.com/agentrl/agentrl/traj"
)

// DelegateStats summarizes the delegation of a set of root episodes. Means over no episodes
// are 0.
type DelegateStats struct {
	Episodes int `json:"episodes"`
	// Delegated is the number of episodes that ran at least one sub-episode.
	Delegated int `json:"delegated"`
	// SubEpisodesPerEpisode is the mean number of sub-episodes (all depths); FailedSubEpisodes
	// counts those that failed (env_error, timeout) over all episodes.
	SubEpisodesPerEpisode float64 `json:"sub_episodes_per_episode"`
	FailedSubEpisodes     int     `json:"failed_sub_episodes"`
	MaxDepth              int     `json:"max_depth"`
	// ModelCalls and CriticalCalls are the mean model calls per episode, in all and on the
	// longest chain (PARL's critical path); WallSeconds the mean episode wall time.
	ModelCalls    float64 `json:"model_calls"`
	CriticalCalls float64 `json:"critical_calls"`
	WallSeconds   float64 `json:"wall_seconds"`
	// SuccessDelegated and SuccessAlone are the success rates (Succeeded) of the episodes that
	// delegated and of those that did not; 0 where there are none.
	SuccessDelegated float64 `json:"success_delegated"`
	SuccessAlone     float64 `json:"success_alone"`
}

// MeasureDelegation computes DelegateStats over ts (root trajectories).
func MeasureDelegation(ts []*traj.Trajectory) DelegateStats {
	s := DelegateStats{Episodes: len(ts)}
	var subs, calls, crit, succD, succA int
	var wall float64
	for _, t := range ts {
		se := SubEpisodes(t)
		subs += len(se)
		for _, e := range se {
			if e.Status.Failed() {
				s.FailedSubEpisodes++
			}
			s.MaxDepth = max(s.MaxDepth, e.Depth)
		}
		for _, kv := range t.Meta {
			n, err := strconv.Atoi(kv.Value)
			if err != nil {
				continue
			}
			switch kv.Key {
			case MetaModelCalls:
				calls += n
			case MetaCriticalCalls:
				crit += n
			}
		}
		wall += t.Timings.Total.Seconds()
		ok := Succeeded(t)
		if len(se) > 0 {
			s.Delegated++
			if ok {
				succD++
			}
		} else if ok {
			succA++
		}
	}
	if n := float64(len(ts)); n > 0 {
		s.SubEpisodesPerEpisode = float64(subs) / n
		s.ModelCalls = float64(calls) / n
		s.CriticalCalls = float64(crit) / n
		s.WallSeconds = wall / n
	}
	if s.Delegated > 0 {
		s.SuccessDelegated = float64(succD) / float64(s.Delegated)
	}
	if a := len(ts) - s.Delegated; a > 0 {
		s.SuccessAlone = float64(succA) / float64(a)
	}
	return s
}

// Metrics names s's figures under prefix ("rollout/" or "eval/"). The wall time is left out of
// them: metrics lines must not depend on timings (a replay compares them).
func (s DelegateStats) Metrics(prefix string) map[string]float64 {
	return map[string]float64{
		prefix + "delegate_sub_episodes_per_episode": s.SubEpisodesPerEpisode,
		prefix + "delegate_delegated_episodes":       float64(s.Delegated),
		prefix + "delegate_failed_sub_episodes":      float64(s.FailedSubEpisodes),
		prefix + "delegate_max_depth":                float64(s.MaxDepth),
		prefix + "delegate_model_calls":              s.ModelCalls,
		prefix + "delegate_critical_calls":           s.CriticalCalls,
		prefix + "delegate_success_delegated":        s.SuccessDelegated,
		prefix + "delegate_success_alone":            s.SuccessAlone,
	}
}

// SubEpisodeSamples is the number of training samples t's sub-episodes add.
func SubEpisodeSamples(t *traj.Trajectory) int {
	n := 0
	for _, s := range SubEpisodes(t) {
		if s.Depth == 1 {
			n += s.Samples
		}
	}
	return n
}
