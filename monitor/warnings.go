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
	if rep != nil && rep.Distill != nil {
		w = append(w, mo.teacherSignal(rep.Distill, st.episodes)...)
	}
	return w
}

// teacherSignal returns the warnings of a distilling step whose distillation metrics are m
// (algo.DistillKL's and the teacher calls') out of episodes sampled: the teacher's judgement is
// a degenerate learning signal when it matches the student's at every token (the teacher is
// the student: the reverse KL is 0 everywhere), when it gives every token one logprob (a
// teacher that judges nothing), or when the teacher failed (down, non-finite or misshapen
// logprobs) for more of the step's episodes than the signal's limit (max_zero_var_share), which
// were left out of it.
func (mo *Monitor) teacherSignal(m map[string]float64, episodes int) []string {
	var w []string
	if n := m["distill/tokens"]; n > 0 {
		if d, floor := m["distill/kl_abs_max"], mo.cfg.TeacherKLFloor(); !(d >= floor) {
			w = append(w, fmt.Sprintf("learning signal degenerating: the teacher judges all %.0f tokens as the student does (largest |logπ − logπ_T| %.2g, below %.2g): is the teacher the student?", n, d, floor))
		}
		if r := m["distill/teacher_lp_range"]; n > 1 && !(r > 0) {
			w = append(w, fmt.Sprintf("learning signal degenerating: the teacher gives all %.0f tokens the same logprob", n))
		}
	}
	if f := m["distill/teacher_failed_episodes"]; f > 0 && episodes > 0 && f/float64(episodes) > mo.cfg.MaxZeroVarShare {
		w = append(w, fmt.Sprintf("learning signal degenerating: the teacher failed for %.0f of %d episodes (%.0f%%, limit %.0f%%), left out of the step", f, episodes, 100*f/float64(episodes), 100*mo.cfg.MaxZeroVarShare))
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
