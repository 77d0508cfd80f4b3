package monitor

import (
	"fmt"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/learn"
)

// Monitor turns the three invariants into warnings that name them.
type Monitor struct {
	cfg config.MonitorConfig
}

// New is the monitor of the invariants' limits in c.
func New(c config.MonitorConfig) *Monitor { return &Monitor{cfg: c} }

// Check returns the warnings of a step whose learner report is rep (nil when nothing was
// trained) and whose sampled episodes' statistics are st, each naming its invariant.
func (mo *Monitor) Check(rep *learn.RLReport, st Stats) []string {
	var w []string
	// Entropy and shift are measured only on steps that trained (a step with no informative
	// group has none).
	if rep == nil {
		w = append(w, "step trained nothing (no group carried a learning signal): entropy and shift not measured")
	}
	if l := rep; l != nil && l.Entropy < mo.cfg.MinEntropy {
		w = append(w, fmt.Sprintf("exploration collapsing: mean token entropy %.4f below %.4f", l.Entropy, mo.cfg.MinEntropy))
	}
	if z := st.zeroVarShare; z > mo.cfg.MaxZeroVarShare {
		w = append(w, fmt.Sprintf("learning signal degenerating: %.0f%% of groups have zero reward variance (limit %.0f%%)", 100*z, 100*mo.cfg.MaxZeroVarShare))
	}
	if l := rep; l != nil && l.Shift.KL > mo.cfg.MaxKL {
		w = append(w, fmt.Sprintf("distribution shift: behaviour-vs-learner KL %.4f above %.4f", l.Shift.KL, mo.cfg.MaxKL))
	}
	return w
}

// LatencyBiasWarning starts the warning CheckLatencyBias gives.
const LatencyBiasWarning = "latency bias"

// CheckLatencyBias returns the warning for a step whose async/latency_bias is bias ("" for
// none): the episodes sampled last on average more than monitor.max_latency_bias times as long
// as those trained.
func (mo *Monitor) CheckLatencyBias(bias float64) string {
	if mo.cfg.MaxLatencyBias == 0 || !(bias > mo.cfg.MaxLatencyBias) {
		return ""
	}
	return fmt.Sprintf("%s: the episodes sampled last %.2f× as long as those trained (limit %.2f×): slow tasks are under-trained (rl.async.order: bounded trains every admitted group)", LatencyBiasWarning, bias, mo.cfg.MaxLatencyBias)
}
