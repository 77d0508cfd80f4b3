package pipeline

import (
	"encoding/binary"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
	"hash/maphash"
)

// stepStats describes what a step sampled: rewards, behaviour, exploration and the signal left
// after filtering.
type stepStats struct {
	episodes, failed       int
	meanReward, success    float64
	toolRate               float64 // share of turns that called a tool
	tools                  map[string]float64
	meanTurns, meanRespLen float64
	distinctPerGroup       float64 // distinct action sequences / group size, mean over groups
	zeroVarShare           float64 // share of sampled groups with no reward variance
	effectiveGroups        int     // groups kept for training
	truncated              int
	genSeconds, envSeconds float64
	levels                 map[envLevel]float64 // success per environment and difficulty level (levelSuccess)
	// groups is how each sampled group ended, in the order sampled (the task sampler's
	// observations).
	groups []groupOutcome
	// keptOldest counts the kept episodes by the oldest policy version among their sampled
	// tokens (the staleness histogram of an asynchronous step).
	keptOldest map[int32]int
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

// batchStats measures every sampled episode (sampled) and the groups kept for training (kept).
func batchStats(sampled []*traj.Trajectory, kept [][]*traj.Trajectory) stepStats {
	s := stepStats{tools: map[string]float64{}, effectiveGroups: len(kept), levels: levelSuccess(sampled)}
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
		s.meanReward += reward.Return(t)
		if rollout.Succeeded(t) {
			s.success++
		}
		for _, tu := range t.Turns {
			turns++
			respTok += tu.End - tu.Start
			if len(tu.ToolCalls) > 0 {
				calls++
			}
			for _, c := range tu.ToolCalls {
				s.tools[c.Name]++
			}
		}
		s.genSeconds += t.Timings.Generate.Seconds()
		s.envSeconds += t.Timings.Env.Seconds()
		if _, ok := groups[t.GroupID]; !ok {
			order = append(order, t.GroupID)
		}
		groups[t.GroupID] = append(groups[t.GroupID], t)
	}
	if s.episodes > 0 {
		n := float64(s.episodes)
		s.meanReward /= n
		s.success /= n
		s.meanTurns = float64(turns) / n
	}
	if turns > 0 {
		s.toolRate = float64(calls) / float64(turns)
		s.meanRespLen = float64(respTok) / float64(turns)
	}
	var total float64
	for _, v := range s.tools {
		total += v
	}
	for k := range s.tools {
		s.tools[k] /= total
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
			if v, ok := oldestVersion(t); ok {
				if s.keptOldest == nil {
					s.keptOldest = map[int32]int{}
				}
				s.keptOldest[v]++
			}
		}
	}
	return s
}

func (s stepStats) into(m map[string]any) {
	m["reward/mean"] = s.meanReward
	m["reward/success"] = s.success
	m["episodes/sampled"] = s.episodes
	m["episodes/failed"] = s.failed
	m["episodes/truncated"] = s.truncated
	m["episodes/turns"] = s.meanTurns
	m["episodes/response_len"] = s.meanRespLen
	m["explore/tool_call_rate"] = s.toolRate
	for k, v := range s.tools {
		m["explore/tool_mix/"+k] = v
	}
	m["explore/distinct_per_group"] = s.distinctPerGroup
	m["signal/zero_var_share"] = s.zeroVarShare
	m["signal/groups_kept"] = s.effectiveGroups
	for k, v := range s.levels {
		m[k.metric()] = v
	}
}
