package pipeline

import (
	"encoding/binary"
	"hash/maphash"
	"math"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
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
	s := stepStats{tools: map[string]float64{}, effectiveGroups: len(kept)}
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
}

// advStats summarizes advantages over the masked tokens of a batch.
type advStats struct {
	effective  int     // sequences with a non-zero advantage somewhere
	spread     float64 // std of per-sequence mean advantages
	meanAbsAdv float64
}

func advantageStats(b *algo.Batch) advStats {
	var s advStats
	var per []float64
	for i := 0; i < b.NumSeqs(); i++ {
		lo, hi := b.Seq(i)
		var sum float64
		n := 0
		nonzero := false
		for j := lo; j < hi; j++ {
			if b.Mask[j] {
				a := float64(b.Advantages[j])
				sum += a
				n++
				nonzero = nonzero || a != 0
				s.meanAbsAdv += math.Abs(a)
			}
		}
		if nonzero {
			s.effective++
		}
		if n > 0 {
			per = append(per, sum/float64(n))
		}
	}
	if nt := countMask(b.Mask); nt > 0 {
		s.meanAbsAdv /= float64(nt)
	}
	s.spread = std(per)
	return s
}

func (s advStats) into(m map[string]any) {
	m["signal/effective_batch"] = s.effective
	m["signal/adv_spread"] = s.spread
	m["signal/adv_mean_abs"] = s.meanAbsAdv
}

// shiftStats compares the behaviour policy (what the sampler used) with the learner's
// recomputation of the same tokens, and measures how stale the tokens are.
type shiftStats struct {
	kl                   float64 // k3 estimate of KL(behaviour ‖ learner) per token
	isMean, isMax, isStd float64
	ess                  float64 // effective sample size of the importance weights / n
	lagMean, lagMax      float64
}

func measureShift(b *algo.Batch, version int32) shiftStats {
	var s shiftStats
	var w []float64
	for j, m := range b.Mask {
		if !m {
			continue
		}
		// ratio learner/behaviour of a token sampled from behaviour; k3 = (r − 1) − log r
		// (Schulman, "Approximating KL divergence", 2020) is unbiased and non-negative.
		logr := math.Max(-20, math.Min(20, float64(b.Old[j]-b.Behaviour[j])))
		r := math.Exp(logr)
		s.kl += r - 1 - logr
		w = append(w, r)
		if v := b.Versions[j]; v != traj.NoVersion {
			lag := float64(version - v)
			s.lagMean += lag
			s.lagMax = math.Max(s.lagMax, lag)
		}
	}
	if n := float64(len(w)); n > 0 {
		s.kl /= n
		s.lagMean /= n
		var sum, sq float64
		for _, x := range w {
			sum += x
			sq += x * x
			s.isMax = math.Max(s.isMax, x)
		}
		s.isMean = sum / n
		s.isStd = std(w)
		s.ess = sum * sum / (n * sq)
	}
	return s
}

func (s shiftStats) into(m map[string]any) {
	m["shift/behaviour_kl"] = s.kl
	m["shift/is_mean"] = s.isMean
	m["shift/is_max"] = s.isMax
	m["shift/is_std"] = s.isStd
	m["shift/is_ess"] = s.ess
	m["shift/version_lag_mean"] = s.lagMean
	m["shift/version_lag_max"] = s.lagMax
}

func countMask(m []bool) int {
	n := 0
	for _, b := range m {
		if b {
			n++
		}
	}
	return n
}

func std(x []float64) float64 {
	if len(x) < 2 {
		return 0
	}
	var mean float64
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	var ss float64
	for _, v := range x {
		ss += (v - mean) * (v - mean)
	}
	return math.Sqrt(ss / float64(len(x)-1))
}
