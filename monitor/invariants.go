package monitor

import (
	"encoding/binary"
	"hash/maphash"

	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// Stats describes what a step sampled: rewards, behaviour, exploration and the signal left
// after filtering.
type Stats struct {
	episodes, failed       int
	MeanReward, Success    float64
	ToolRate               float64 // share of turns that called a tool
	Tools                  map[string]float64
	meanTurns, meanRespLen float64
	distinctPerGroup       float64 // distinct action sequences / group size, mean over groups
	zeroVarShare           float64 // share of sampled groups with no reward variance
	effectiveGroups        int     // groups kept for training
	truncated              int
	GenSeconds, EnvSeconds float64
	// WallSeconds sums the episodes' wall times (traj.Timings.Total), sub-episodes included.
	WallSeconds float64
	Levels      map[envLevel]float64 // success per environment and difficulty level (levelSuccess)
	// groups is how each sampled group ended, in the order sampled (the task sampler's
	// observations).
	groups []groupOutcome
	// keptOldest counts the kept episodes by the oldest policy version among their sampled
	// tokens (the staleness histogram of an asynchronous step).
	KeptOldest map[int32]int
}

var hashSeed = maphash.MakeSeed()

// actionKey hashes the assistant tokens of an episode: two episodes with the same key took the
// same actions.
func actionKey(t *traj.Trajectory) uint64 {
	var h maphash.Hash
	h.SetSeed(hashSeed)
	var buf [4]byte
	for i, tok := range t.Tokens {
		if t.LossMask[i] {
			binary.LittleEndian.PutUint32(buf[:], uint32(tok))
			h.Write(buf[:])
		}
	}
	return h.Sum64()
}

// Measure measures every sampled episode (sampled) and the groups kept for training (kept).
func Measure(sampled []*traj.Trajectory, kept [][]*traj.Trajectory) Stats {
	s := Stats{Tools: map[string]float64{}, effectiveGroups: len(kept), Levels: levelSuccess(sampled)}
	groups := map[uint64][]*traj.Trajectory{}
	var order []uint64
	turns, calls, respTok := 0, 0, 0
	for _, t := range sampled {
		s.episodes++
		if t.Status.Failed() {
			s.failed++
		}
		if t.Status == traj.StatusTruncated {
			s.truncated++
		}
		s.MeanReward += reward.Return(t)
		if rollout.Succeeded(t) {
			s.Success++
		}
		for _, tu := range t.Turns {
			turns++
			respTok += tu.End - tu.Start
			if len(tu.ToolCalls) > 0 {
				calls++
			}
			for _, c := range tu.ToolCalls {
				s.Tools[c.Name]++
			}
		}
		s.GenSeconds += t.Timings.Generate.Seconds()
		s.EnvSeconds += t.Timings.Env.Seconds()
		s.WallSeconds += t.Timings.Total.Seconds()
		if _, ok := groups[t.GroupID]; !ok {
			order = append(order, t.GroupID)
		}
		groups[t.GroupID] = append(groups[t.GroupID], t)
	}
	if s.episodes > 0 {
		n := float64(s.episodes)
		s.MeanReward /= n
		s.Success /= n
		s.meanTurns = float64(turns) / n
	}
	if turns > 0 {
		s.ToolRate = float64(calls) / float64(turns)
		s.meanRespLen = float64(respTok) / float64(turns)
	}
	var total float64
	for _, v := range s.Tools {
		total += v
	}
	for k := range s.Tools {
		s.Tools[k] /= total
	}
	zero := 0
	for _, id := range order {
		g := groups[id]
		out := groupOutcome{env: g[0].Env, seed: g[0].TaskSeed}
		for _, t := range g {
			if !t.Status.Failed() {
				out.n++
				if rollout.Succeeded(t) {
					out.succ++
				}
			}
		}
		s.groups = append(s.groups, out)
		distinct := map[uint64]bool{}
		for _, t := range g {
			distinct[actionKey(t)] = true
		}
		s.distinctPerGroup += float64(len(distinct)) / float64(len(g))
		ok, _ := reward.DropFailed(g)
		if !reward.Informative(ok) {
			zero++
		}
	}
	if len(order) > 0 {
		s.distinctPerGroup /= float64(len(order))
		s.zeroVarShare = float64(zero) / float64(len(order))
	}
	for _, g := range kept {
		for _, t := range g {
			if v, ok := OldestVersion(t); ok {
				if s.KeptOldest == nil {
					s.KeptOldest = map[int32]int{}
				}
				s.KeptOldest[v]++
			}
		}
	}
	return s
}

// EpisodeSeconds is the mean wall time of the sampled episodes (0 when none).
func (s Stats) EpisodeSeconds() float64 {
	if s.episodes == 0 {
		return 0
	}
	return s.WallSeconds / float64(s.episodes)
}

// Into adds the statistics to a step's metrics line m.
func (s Stats) Into(m map[string]any) {
	m["reward/mean"] = s.MeanReward
	m["reward/success"] = s.Success
	m["episodes/sampled"] = s.episodes
	m["episodes/failed"] = s.failed
	m["episodes/truncated"] = s.truncated
	m["episodes/turns"] = s.meanTurns
	m["episodes/response_len"] = s.meanRespLen
	m["explore/tool_call_rate"] = s.ToolRate
	for k, v := range s.Tools {
		m["explore/tool_mix/"+k] = v
	}
	m["explore/distinct_per_group"] = s.distinctPerGroup
	m["signal/zero_var_share"] = s.zeroVarShare
	m["signal/groups_kept"] = s.effectiveGroups
	for k, v := range s.Levels {
		m[k.metric()] = v
	}
}

// OldestVersion is the smallest policy version among t's sampled tokens.
func OldestVersion(t *traj.Trajectory) (int32, bool) {
	oldest, ok := int32(0), false
	for i, v := range t.Versions {
		if t.LossMask[i] && v != traj.NoVersion && (!ok || v < oldest) {
			oldest, ok = v, true
		}
	}
	return oldest, ok
}
