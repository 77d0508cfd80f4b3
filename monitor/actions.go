package monitor

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/rollout"
)

// Actions are the monitor's actions in one RL phase (config.MonitorConfig): the entropy
// controller, the shift controller and the task sampler, each nil when off. Every loop of
// pipeline reaches them through three calls of its rl.go: newRLUpdate makes them (NewActions,
// restoring their state when the phase resumes), learnStep gives the update the settings they
// chose (Configure), logRL lets them act on the step just logged (Act); sampling draws its
// tasks through DrawTasks and DrawTask.
type Actions struct {
	limit   float64         // monitor.max_zero_var_share
	loss    algo.LossConfig // the phase's configured loss, which the knobs start from
	entropy *entropyControl
	shift   *shiftControl
	tasks   *taskSampler
}

// State is what a checkpoint keeps of the actions: the knobs' positions, by the setting
// they move, and the task sampler's estimates.
type State struct {
	Knobs map[string]int    `json:"knobs,omitempty"`
	Tasks *taskSamplerState `json:"tasks,omitempty"`
}

// knob is a setting a controller moves within [min, max], starting from the phase's value. Its
// position counts the moves up (positive) and down: the value is start + pos·step, or with a
// factor start·factor^−pos, clamped to the bounds, so it is exact to recompute and to resume.
type knob struct {
	setting  string // the config key it moves
	metric   string // its metrics.jsonl name
	start    float64
	min, max float64
	step     float64 // additive move
	factor   float64 // multiplicative move (0: additive)
	pos      int
}

func (k *knob) value() float64 {
	v := k.start + float64(k.pos)*k.step
	if k.factor > 0 {
		v = k.start * math.Pow(k.factor, -float64(k.pos))
	}
	return min(max(v, k.min), k.max)
}

// move moves the knob one step up (dir > 0) or down, unless it is at that bound; it says whether
// the value changed.
func (k *knob) move(dir int) bool {
	v := k.value()
	if dir > 0 && v >= k.max || dir < 0 && v <= k.min {
		return false
	}
	k.pos += dir
	return true
}

// moveAll moves knobs in direction dir and describes each move for the log: the invariant, why,
// the setting and its old and new value.
func moveAll(knobs []*knob, dir int, invariant, why string) []string {
	var out []string
	for _, k := range knobs {
		from := k.value()
		if k.move(dir) {
			out = append(out, fmt.Sprintf("%s: %s: %s %.4g → %.4g", invariant, why, k.setting, from, k.value()))
		}
	}
	return out
}

// entropyControl is config.EntropyControlConfig at work in a phase.
type entropyControl struct {
	low, high  float64
	coef, clip *knob // nil when not moved
	knobs      []*knob
}

// act moves the knobs after a trained step whose entropy lies outside the band.
func (e *entropyControl) act(rep *learn.RLReport) []string {
	if rep == nil {
		return nil // nothing trained, no entropy measured
	}
	h := rep.Entropy
	switch {
	case h < e.low:
		return moveAll(e.knobs, +1, "exploration", fmt.Sprintf("mean token entropy %.4g below the band [%g, %g]", h, e.low, e.high))
	case h > e.high:
		return moveAll(e.knobs, -1, "exploration", fmt.Sprintf("mean token entropy %.4g above the band [%g, %g]", h, e.low, e.high))
	}
	return nil
}

// shiftControl is config.ShiftControlConfig at work in a phase.
type shiftControl struct {
	cfg       config.ShiftControlConfig
	cap, mask *knob
	knobs     []*knob
}

// act tightens the knobs after a trained step whose shift was out of bounds, and loosens them
// after one well within.
func (c *shiftControl) act(rep *learn.RLReport) []string {
	if rep == nil {
		return nil
	}
	ess, kl := rep.Shift.ESS, rep.Shift.KL
	g := c.cfg
	switch {
	case ess < g.ESSLow:
		return moveAll(c.knobs, -1, "distribution shift", fmt.Sprintf("importance-weight ESS %.6g below %g (behaviour KL %.3g)", ess, g.ESSLow, kl))
	case kl > g.KLHigh:
		return moveAll(c.knobs, -1, "distribution shift", fmt.Sprintf("behaviour KL %.3g above %g (importance-weight ESS %.6g)", kl, g.KLHigh, ess))
	case ess > g.ESSHigh && kl < g.KLLow:
		return moveAll(c.knobs, +1, "distribution shift", fmt.Sprintf("importance-weight ESS %.6g above %g and behaviour KL %.3g below %g", ess, g.ESSHigh, kl, g.KLLow))
	}
	return nil
}

// knobs lists every knob of the actions, in a fixed order.
func (a *Actions) knobs() []*knob {
	var ks []*knob
	if a.entropy != nil {
		ks = append(ks, a.entropy.knobs...)
	}
	if a.shift != nil {
		ks = append(ks, a.shift.knobs...)
	}
	return ks
}

func (a *Actions) State() *State {
	st := &State{}
	for _, k := range a.knobs() {
		if st.Knobs == nil {
			st.Knobs = map[string]int{}
		}
		st.Knobs[k.setting] = k.pos
	}
	if a.tasks != nil {
		st.Tasks = a.tasks.state()
	}
	return st
}

func (a *Actions) restore(st *State) error {
	for _, k := range a.knobs() {
		pos, ok := st.Knobs[k.setting]
		if !ok {
			return fmt.Errorf("the checkpoint has no position for the knob of %s", k.setting)
		}
		k.pos = pos
	}
	if a.tasks != nil {
		if st.Tasks == nil {
			return fmt.Errorf("the checkpoint has no task sampler state")
		}
		return a.tasks.restore(st.Tasks)
	}
	return nil
}

// lossConfig is the phase's loss with the knobs' current values.
func (a *Actions) lossConfig() algo.LossConfig {
	c := a.loss
	if e := a.entropy; e != nil {
		if e.coef != nil {
			c.EntropyCoef = e.coef.value()
		}
		if e.clip != nil {
			c.PPO.ClipHigh = e.clip.value()
		}
	}
	if s := a.shift; s != nil {
		if s.cap != nil {
			c.Correction.Cap = s.cap.value()
		}
		if s.mask != nil {
			hi := s.mask.value()
			c.Correction.MaskHigh = hi
			c.Correction.MaskLow = a.loss.Correction.MaskLow * a.loss.Correction.MaskHigh / hi
		}
	}
	return c
}

// Configure gives the update the loss the knobs describe, before it trains a step.
func (a *Actions) Configure(upd *learn.RL) error {
	if a == nil || len(a.knobs()) == 0 {
		return nil
	}
	c := a.lossConfig()
	if c == upd.Loss.Config() {
		return nil
	}
	l, err := algo.NewLoss(c)
	if err != nil {
		return fmt.Errorf("monitor: the loss with the controllers' settings: %w", err)
	}
	upd.Loss = l
	return nil
}

// Act records the step's settings in its metrics m (the values the step trained with) and lets
// every action act on the step, whose learner report is rep (nil when nothing was trained) and
// whose sampled episodes' statistics are st; it returns what they did, each naming its invariant and the
// values that fired it.
func (a *Actions) Act(rep *learn.RLReport, st Stats, m map[string]any) []string {
	for _, k := range a.knobs() {
		m[k.metric] = k.value()
	}
	var out []string
	if a.entropy != nil {
		out = append(out, a.entropy.act(rep)...)
	}
	if a.shift != nil {
		out = append(out, a.shift.act(rep)...)
	}
	if t := a.tasks; t != nil {
		c := t.takeCounts()
		m["signal/tasks_fresh"] = c.fresh
		m["signal/tasks_replayed"] = c.replayed
		m["signal/oversample"] = c.oversample
		out = append(out, t.observe(st.groups, st.zeroVarShare, a.limit)...)
		c = t.takeCounts() // after this step's observations
		m["signal/tasks_known"] = c.known
		m["signal/tasks_learnable"] = c.learnable
	}
	return out
}

// NewActions makes the monitor's actions of config m for RL phase p, whose environments envs
// makes, resuming at step start: a phase in progress restores them from saved, the checkpoint's
// state. It returns nil when no action is on.
func NewActions(m config.MonitorConfig, p config.Phase, envs *env.Registry, start int, saved *State) (*Actions, error) {
	a := &Actions{limit: m.MaxZeroVarShare, loss: p.RL.Loss}
	if e := m.EntropyControl; e != nil {
		ec := &entropyControl{low: e.Low, high: e.High}
		if k := e.EntropyCoef; k != nil {
			ec.coef = &knob{setting: "rl.loss.entropy_coef", metric: "monitor/entropy_coef", start: p.RL.Loss.EntropyCoef, min: k.Min, max: k.Max, step: k.Step}
			ec.knobs = append(ec.knobs, ec.coef)
		}
		if k := e.ClipHigh; k != nil {
			ec.clip = &knob{setting: "rl.loss.ppo.clip_high", metric: "monitor/clip_high", start: p.RL.Loss.PPO.ClipHigh, min: k.Min, max: k.Max, step: k.Step}
			ec.knobs = append(ec.knobs, ec.clip)
		}
		a.entropy = ec
	}
	if s := m.ShiftControl; s != nil && p.RL.Loss.Correction.Level != "" {
		sc := &shiftControl{cfg: *s}
		cc := p.RL.Loss.Correction
		if k := s.Cap; k != nil {
			sc.cap = &knob{setting: "rl.loss.correction.cap", metric: "monitor/is_cap", start: cc.Cap, min: k.Min, max: k.Max, factor: s.Factor}
			sc.knobs = append(sc.knobs, sc.cap)
		}
		if k := s.Mask; k != nil {
			sc.mask = &knob{setting: "rl.loss.correction.mask_high", metric: "monitor/is_mask_high", start: cc.MaskHigh, min: k.Min, max: k.Max, factor: s.Factor}
			sc.knobs = append(sc.knobs, sc.mask)
		}
		a.shift = sc
	}
	if t := m.TaskSampling; t != nil {
		a.tasks = newTaskSampler(*t, envs, p.Envs)
	}
	if a.entropy == nil && a.shift == nil && a.tasks == nil {
		return nil, nil
	}
	if start > 0 {
		if saved == nil {
			return nil, fmt.Errorf("resume: the checkpoint holds no state of the monitor's actions (was the phase started without them?)")
		}
		if err := a.restore(saved); err != nil {
			return nil, fmt.Errorf("resume: monitor: %w", err)
		}
	}
	return a, nil
}

// DrawTasks draws n tasks for a round of a step of RL phase p, whose environments reg makes: by
// the task sampler when monitor.task_sampling is on (n enlarged by its oversampling in phases
// with dynamic sampling), else uniformly by the phase's environment weights (SampleTasks). a may
// be nil (no action is on).
func (a *Actions) DrawTasks(reg *env.Registry, rng *rand.Rand, p config.Phase, n int, groupBase uint64) ([]rollout.Task, error) {
	if a == nil || a.tasks == nil {
		return SampleTasks(reg, rng, p.Envs, n, groupBase)
	}
	if p.RL.DynamicSampling != nil {
		n = a.tasks.groups(n)
	}
	return a.tasks.draw(rng, n, groupBase)
}

// DrawTask draws the task of one group of RL phase p, with group id groupID: what DrawTasks
// draws for a round of one, from the same stream (so a controller that admits one group at a
// time draws, call by call, the tasks a round would). With the task sampler on, its groups are
// observed when their step is acted on (Act). a may be nil.
func (a *Actions) DrawTask(reg *env.Registry, rng *rand.Rand, p config.Phase, groupID uint64) (rollout.Task, error) {
	if a == nil || a.tasks == nil {
		ts, err := SampleTasks(reg, rng, p.Envs, 1, groupID)
		if err != nil {
			return rollout.Task{}, err
		}
		return ts[0], nil
	}
	return a.tasks.next(rng, groupID)
}
