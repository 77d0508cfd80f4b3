package pipeline

import (
	"math/rand/v2"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/monitor"
	"github.com/agentrl/agentrl/rollout"
)

// newActions makes the monitor's actions for RL phase p, resuming at step start: a phase in
// progress restores them from the checkpoint's state. It returns nil when no action is on.
func (r *Run) newActions(p config.Phase, start int) (*monitor.Actions, error) {
	saved := r.state.Monitor // the checkpoint's, when resuming mid-phase
	r.state.Monitor = nil
	return monitor.NewActions(r.Cfg.Monitor, p, r.opts.Envs, start, saved)
}

// monitorAct lets the phase's actions act on step s, whose metrics line is m: it adds their
// settings and what they did ("actions") to m, keeps their state for the next checkpoint and
// returns what they did.
func (r *Run) monitorAct(s *rlStep, m map[string]any) []string {
	if r.act == nil {
		return nil
	}
	out := r.act.Act(s.learn, s.sample, m)
	if len(out) > 0 {
		m["actions"] = out
	}
	r.state.Monitor = r.act.State()
	return out
}

// drawTasks draws n tasks for a round of a step of RL phase p: by the monitor's task sampler
// when monitor.task_sampling is on, else uniformly by the phase's environment weights
// (monitor.Actions.DrawTasks).
func (r *Run) drawTasks(rng *rand.Rand, p config.Phase, n int, groupBase uint64) ([]rollout.Task, error) {
	return r.act.DrawTasks(r.opts.Envs, rng, p, n, groupBase)
}

// drawTask draws the task of one group of RL phase p, with group id groupID: what drawTasks
// draws for a round of one, from the same stream (monitor.Actions.DrawTask).
func (r *Run) drawTask(rng *rand.Rand, p config.Phase, groupID uint64) (rollout.Task, error) {
	return r.act.DrawTask(r.opts.Envs, rng, p, groupID)
}

// acted prints what the monitor did at a step.
func (p *progress) acted(msg string) {
	if p.bar != nil {
		p.bar.Clear()
	}
	p.r.printf("monitor: %s step: %s\n", p.name, msg)
}
