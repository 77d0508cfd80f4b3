package config

import (
	"fmt"
	"math"
)

// MonitorConfig holds the thresholds at which an invariant of the loop is reported broken, and
// the actions the monitor takes on the invariants. Each action is off unless its block is
// present; an action acts in RL phases and logs what it did with the invariant and the values
// that fired it: in the step's metrics line ("actions", and its settings under monitor/… and
// signal/tasks_…), on the console and as markers on the dashboard's curves.
type MonitorConfig struct {
	MinEntropy      float64 `yaml:"min_entropy"`        // exploration: mean token entropy (nats)
	MaxZeroVarShare float64 `yaml:"max_zero_var_share"` // signal: share of zero-variance groups
	MaxKL           float64 `yaml:"max_kl"`             // shift: behaviour-vs-learner k3 KL per token
	// MaxLatencyBias bounds async/latency_bias, continuous admission's mean duration of the
	// episodes sampled over that of the episodes trained (1: none; above: the learner trains on
	// faster episodes than it samples, so slow tasks are under-trained). 0 turns the warning off.
	MaxLatencyBias float64 `yaml:"max_latency_bias"`
	// MinTeacherKL is the distillation's degenerate signal (rl.distill): a step whose largest
	// per-token |logπ − logπ_T| is below it learns nothing from its teacher, which judges every
	// token as the student does (the teacher is the student). 0 means DefaultMinTeacherKL; a
	// value without a distilling phase does nothing and is refused.
	MinTeacherKL float64 `yaml:"min_teacher_kl,omitempty"`
	// EntropyControl keeps the mean token entropy of the trained steps within a band by moving
	// the entropy bonus and/or PPO's upper clip (absent: off).
	EntropyControl *EntropyControlConfig `yaml:"entropy_control,omitempty"`
	// TaskSampling draws RL tasks by their learnability instead of uniformly (absent: off).
	TaskSampling *TaskSamplingConfig `yaml:"task_sampling,omitempty"`
	// ShiftControl moves the importance correction's cap and mask with the measured shift
	// (absent: off).
	ShiftControl *ShiftControlConfig `yaml:"shift_control,omitempty"`
}

// EntropyControlConfig is the exploration action: after each trained step whose mean token
// entropy lies below [low, high], every knob given moves one step up (more exploration), and
// after one above it one step down, each within its bounds; inside the band nothing moves. The
// knobs start at the phase's configured values, and their positions are saved with every
// checkpoint, so a resumed phase goes on from them.
type EntropyControlConfig struct {
	Low  float64 `yaml:"low"`  // nats per token
	High float64 `yaml:"high"` // nats per token
	// EntropyCoef moves rl.loss.entropy_coef, the entropy bonus.
	EntropyCoef *StepKnobConfig `yaml:"entropy_coef,omitempty"`
	// ClipHigh moves rl.loss.ppo.clip_high, PPO's ε_high (DAPO's clip-higher).
	ClipHigh *StepKnobConfig `yaml:"clip_high,omitempty"`
}

// StepKnobConfig bounds a setting the entropy controller moves by steps of Step.
type StepKnobConfig struct {
	Min  float64 `yaml:"min"`
	Max  float64 `yaml:"max"`
	Step float64 `yaml:"step"`
}

// TaskSamplingConfig is the learning-signal action: difficulty-aware task sampling. Each task's
// (environment and seed) success is estimated from the groups that ran it, the earlier
// observations weighted by Decay each time it is observed again. A draw is a fresh task (as
// without this block: an environment by the phase's weights, a seed uniformly from its training
// range) with probability Explore, or when no remembered task is learnable; otherwise a
// remembered task, not already drawn and unobserved, with probability proportional to its
// learnability p̂(1−p̂), so tasks whose recent success is 0 or 1 are not drawn again. With
// Oversample, after a step whose share of zero-variance groups exceeded
// monitor.max_zero_var_share, each round of dynamic sampling asks for Oversample times the
// groups it is missing (the surplus informative groups are discarded, as dynamic sampling does).
// Draws use the step's random stream, so a run is the same for the same seed; the estimates are
// saved with every checkpoint.
type TaskSamplingConfig struct {
	Explore    float64 `yaml:"explore"`    // share of fresh draws, in [0, 1)
	Decay      float64 `yaml:"decay"`      // weight of a task's earlier observations, in [0, 1)
	MaxTasks   int     `yaml:"max_tasks"`  // tasks remembered; the least recently observed is forgotten
	Oversample float64 `yaml:"oversample"` // 0: never; else in (1, MaxOversample]
}

// ShiftControlConfig is the distribution-shift action, for phases with an importance
// correction (rl.loss.correction.level; every asynchronous phase has one). After each trained
// step, when the importance weights' effective sample size (shift/is_ess) is below ESSLow or
// the behaviour KL (shift/behaviour_kl) above KLHigh, every knob given tightens by Factor
// (cap·Factor: fewer tokens weigh more than the cap; the mask's upper bound ·Factor and its
// lower bound ÷Factor: weights further from 1 are masked); when the ESS is above ESSHigh and
// the KL below KLLow, every knob loosens by 1/Factor; otherwise nothing moves. The knobs start at
// the phase's configured values and stay within their bounds; their positions are saved with
// every checkpoint.
type ShiftControlConfig struct {
	ESSLow  float64 `yaml:"ess_low"`
	ESSHigh float64 `yaml:"ess_high"`
	KLLow   float64 `yaml:"kl_low"`
	KLHigh  float64 `yaml:"kl_high"`
	Factor  float64 `yaml:"factor"` // in (0, 1)
	// Cap moves rl.loss.correction.cap, the truncation of the weights.
	Cap *RangeConfig `yaml:"cap,omitempty"`
	// Mask moves rl.loss.correction.mask_high within these bounds, and mask_low with it so that
	// mask_low·mask_high stays what the phase configured.
	Mask *RangeConfig `yaml:"mask,omitempty"`
}

// RangeConfig bounds a setting the shift controller moves.
type RangeConfig struct {
	Min float64 `yaml:"min"`
	Max float64 `yaml:"max"`
}

// Bounds of the monitor's actions.
const (
	MaxSamplerTasks = 1 << 16 // monitor.task_sampling.max_tasks
	MaxOversample   = 8       // monitor.task_sampling.oversample
)

// DefaultMinTeacherKL is monitor.min_teacher_kl when unset: 1e-4 nats, above the difference
// float32 rounding leaves between two computations of the same policy's logprobs.
const DefaultMinTeacherKL = 1e-4

// TeacherKLFloor is MinTeacherKL, or DefaultMinTeacherKL when it is 0.
func (m MonitorConfig) TeacherKLFloor() float64 {
	if m.MinTeacherKL == 0 {
		return DefaultMinTeacherKL
	}
	return m.MinTeacherKL
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// validate checks the monitor block against the run's phases: each action must act in some RL
// phase, and each knob's starting value (the phase's setting) must lie within its bounds.
func (m *MonitorConfig) validate(c *Config) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !(m.MinEntropy >= 0) || !(m.MaxZeroVarShare > 0 && m.MaxZeroVarShare <= 1) || !(m.MaxKL > 0) || !finite(m.MinEntropy) || !finite(m.MaxKL) {
		bad("monitor: min_entropy >= 0, max_zero_var_share in (0, 1] and max_kl > 0 are required")
	}
	if m.MaxLatencyBias != 0 && !(m.MaxLatencyBias >= 1 && finite(m.MaxLatencyBias)) {
		bad("monitor.max_latency_bias must be 0 (off) or a ratio >= 1, got %v", m.MaxLatencyBias)
	}
	var rl []int
	distills := false
	for i, p := range c.Phases {
		if p.IsRL() && p.RL != nil {
			rl = append(rl, i)
			distills = distills || p.RL.Distill != nil
		}
	}
	if !(m.MinTeacherKL >= 0) || !finite(m.MinTeacherKL) {
		bad("monitor.min_teacher_kl %v must be finite and >= 0 (0 means %g)", m.MinTeacherKL, DefaultMinTeacherKL)
	} else if m.MinTeacherKL > 0 && !distills {
		bad("monitor.min_teacher_kl does nothing: no phase distills from a teacher (rl.distill)")
	}
	where := func(i int) string { return fmt.Sprintf("phases[%d] (%s)", i, c.Phases[i].Name) }
	none := func(block, what string) {
		bad("monitor.%s does nothing: the run has no rl phase%s", block, what)
	}
	if e := m.EntropyControl; e != nil {
		if !(e.Low >= 0) || !(e.High > e.Low) || !finite(e.High) {
			bad("monitor.entropy_control: low (%v) and high (%v) must bound a band, 0 <= low < high", e.Low, e.High)
		}
		if e.EntropyCoef == nil && e.ClipHigh == nil {
			bad("monitor.entropy_control moves nothing: give entropy_coef and/or clip_high")
		}
		if err := e.EntropyCoef.validate("monitor.entropy_control.entropy_coef", false); err != nil {
			errs = append(errs, err)
		}
		if err := e.ClipHigh.validate("monitor.entropy_control.clip_high", true); err != nil {
			errs = append(errs, err)
		}
		if len(rl) == 0 {
			none("entropy_control", "")
		}
		for _, i := range rl {
			l := c.Phases[i].RL.Loss
			if k := e.EntropyCoef; k != nil && (l.EntropyCoef < k.Min || l.EntropyCoef > k.Max) {
				bad("monitor.entropy_control.entropy_coef: %s starts at rl.loss.entropy_coef %v, outside [min %v, max %v]", where(i), l.EntropyCoef, k.Min, k.Max)
			}
			if k := e.ClipHigh; k != nil {
				if l.Policy != "ppo" {
					bad("monitor.entropy_control.clip_high moves PPO's upper clip (DAPO's clip-higher); %s uses rl.loss.policy %q", where(i), l.Policy)
				} else if l.PPO.ClipHigh < k.Min || l.PPO.ClipHigh > k.Max {
					bad("monitor.entropy_control.clip_high: %s starts at rl.loss.ppo.clip_high %v, outside [min %v, max %v]", where(i), l.PPO.ClipHigh, k.Min, k.Max)
				}
			}
		}
	}
	if t := m.TaskSampling; t != nil {
		if !(t.Explore >= 0 && t.Explore < 1) {
			bad("monitor.task_sampling.explore %v must be in [0, 1) (1 would draw every task fresh: remove the block)", t.Explore)
		}
		if !(t.Decay >= 0 && t.Decay < 1) {
			bad("monitor.task_sampling.decay %v must be in [0, 1)", t.Decay)
		}
		if t.MaxTasks < 1 || t.MaxTasks > MaxSamplerTasks {
			bad("monitor.task_sampling.max_tasks %d must be in [1, %d]", t.MaxTasks, MaxSamplerTasks)
		}
		if t.Oversample != 0 && !(t.Oversample > 1 && t.Oversample <= MaxOversample) {
			bad("monitor.task_sampling.oversample %v must be 0 (never) or in (1, %d]", t.Oversample, MaxOversample)
		}
		if len(rl) == 0 {
			none("task_sampling", "")
		}
		ds := false
		for _, i := range rl {
			r := c.Phases[i].RL
			if r.DynamicSampling == nil || (r.Async != nil && r.Async.Workers == nil && r.Async.Mode != ModeOverlap) {
				// Continuous admission replaces each filtered group as it is dropped: there are no
				// rounds to enlarge.
				continue
			}
			ds = true
			if t.Oversample > 1 {
				eps := int64(math.Ceil(float64(r.GroupsPerStep)*t.Oversample)) * int64(r.GroupSize) * int64(r.DynamicSampling.MaxRounds)
				if toks := eps * c.Rollout.MaxEpisodeTokens(); toks > MaxStepTokens {
					bad("monitor.task_sampling.oversample: %s samples up to groups_per_step %d × oversample %v × group_size %d × dynamic_sampling.max_rounds %d episodes × %s = %d tokens a step, over the limit of %d (pipeline.MaxStepTokens)",
						where(i), r.GroupsPerStep, t.Oversample, r.GroupSize, r.DynamicSampling.MaxRounds, c.episodeTokens(), toks, MaxStepTokens)
				}
			}
		}
		if t.Oversample > 1 && len(rl) > 0 && !ds {
			bad("monitor.task_sampling.oversample does nothing: it enlarges the rounds of rl.dynamic_sampling, which no rl phase samples in (continuous asynchronous admission has no rounds: it replaces each filtered group as it is dropped)")
		}
	}
	if s := m.ShiftControl; s != nil {
		if !(s.ESSLow > 0 && s.ESSLow < s.ESSHigh && s.ESSHigh <= 1) {
			bad("monitor.shift_control: ess_low (%v) and ess_high (%v) must satisfy 0 < ess_low < ess_high <= 1", s.ESSLow, s.ESSHigh)
		}
		if !(s.KLLow >= 0 && s.KLLow < s.KLHigh) || !finite(s.KLHigh) {
			bad("monitor.shift_control: kl_low (%v) and kl_high (%v) must satisfy 0 <= kl_low < kl_high", s.KLLow, s.KLHigh)
		}
		if !(s.Factor > 0 && s.Factor < 1) {
			bad("monitor.shift_control.factor %v must be in (0, 1)", s.Factor)
		}
		if s.Cap == nil && s.Mask == nil {
			bad("monitor.shift_control moves nothing: give cap and/or mask")
		}
		if err := s.Cap.validate("monitor.shift_control.cap"); err != nil {
			errs = append(errs, err)
		}
		if err := s.Mask.validate("monitor.shift_control.mask"); err != nil {
			errs = append(errs, err)
		}
		acting := 0
		for _, i := range rl {
			cc := c.Phases[i].RL.Loss.Correction
			if cc.Level == "" {
				continue
			}
			acting++
			if k := s.Cap; k != nil && (cc.Cap < k.Min || cc.Cap > k.Max) {
				bad("monitor.shift_control.cap: %s starts at rl.loss.correction.cap %v, outside [min %v, max %v]", where(i), cc.Cap, k.Min, k.Max)
			}
			if k := s.Mask; k != nil {
				if cc.MaskHigh < k.Min || cc.MaskHigh > k.Max {
					bad("monitor.shift_control.mask: %s starts at rl.loss.correction.mask_high %v, outside [min %v, max %v]", where(i), cc.MaskHigh, k.Min, k.Max)
				} else if cc.MaskLow*cc.MaskHigh >= k.Min*k.Min {
					bad("monitor.shift_control.mask: %s's mask_low %v would reach mask_high at its minimum %v (mask_low·mask_high is kept: it must stay under min²)", where(i), cc.MaskLow, k.Min)
				}
			}
		}
		if acting == 0 {
			none("shift_control", " with an importance correction (rl.loss.correction.level; every rl.async phase has one)")
		}
	}
	return errs
}

// validate checks the bounds and the step; positive refuses a minimum of 0.
func (k *StepKnobConfig) validate(key string, positive bool) error {
	if k == nil {
		return nil
	}
	low, rule := k.Min >= 0, "0 <= min < max"
	if positive {
		low, rule = k.Min > 0, "0 < min < max"
	}
	if !low || !(k.Max > k.Min) || !finite(k.Max) {
		return fmt.Errorf("%s: min (%v) and max (%v) must satisfy %s", key, k.Min, k.Max, rule)
	}
	if !(k.Step > 0 && k.Step <= k.Max-k.Min) {
		return fmt.Errorf("%s.step %v must be in (0, max − min = %v]", key, k.Step, k.Max-k.Min)
	}
	return nil
}

func (k *RangeConfig) validate(key string) error {
	if k == nil {
		return nil
	}
	if !(k.Min > 0) || !(k.Max > k.Min) || !finite(k.Max) {
		return fmt.Errorf("%s: min (%v) and max (%v) must satisfy 0 < min < max", key, k.Min, k.Max)
	}
	return nil
}
