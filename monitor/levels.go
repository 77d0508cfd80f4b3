package monitor

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

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

// DescribeLevels is the per-level success of a step for its progress line, "" when the step
// has none: "calc L1 80% L2 40%", environments and levels in order.
func DescribeLevels(levels map[envLevel]float64) string {
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
