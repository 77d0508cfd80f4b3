package reward

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"

	"github.com/agentrl/agentrl/traj"
)

// Config is one environment's reward: block in a run config. It composes, for each episode,
//
//	R = w_o·outcome + w_f·format + w_j·judge + w_l·overlong     (the episode's reward)
//	r_k += process(turn k)                                        (each turn's reward)
//
// where outcome is the environment's own grade (its verifier's score), format a pattern the final
// turn must match, judge a generator's rubric score (configured by the run, which owns the
// generator) and overlong DAPO's soft length penalty. With progressive shaping the shaping
// signals (format and the per-turn rewards) are weighted by 1 − w(step) and the outcome signals
// (outcome and judge) by w(step), so training moves from the dense reward to the sparse one; the
// overlong penalty is a constraint and is never annealed.
//
// Every part is optional; a part given with a weight of 0, or a block that leaves the reward as
// the environment gave it, is an error (it would do nothing).
type Config struct {
	// Outcome weighs the environment's grade; absent means 1 (the run's loader writes it out).
	Outcome     *float64        `yaml:"outcome"`
	Format      *FormatConfig   `yaml:"format,omitempty"`
	Overlong    *OverlongConfig `yaml:"overlong,omitempty"`
	Process     *ToolProcess    `yaml:"process,omitempty"`
	Progressive *Progressive    `yaml:"progressive,omitempty"`
}

// FormatConfig scores 1 when the episode's final turn matches Pattern (a Go regular expression;
// anchor it to demand the whole layout), else 0.
type FormatConfig struct {
	Pattern string  `yaml:"pattern"`
	Weight  float64 `yaml:"weight"`
}

// OverlongConfig is the soft overlong penalty on the episode's policy tokens.
type OverlongConfig struct {
	OverlongPenalty `yaml:",inline"`
	Weight          float64 `yaml:"weight"`
}

// OutcomeWeight is w_o.
func (c *Config) OutcomeWeight() float64 {
	if c == nil || c.Outcome == nil {
		return 1
	}
	return *c.Outcome
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Validate checks the block, naming keys from the block down ("format.weight"). maxTokens is the
// most policy tokens an episode can hold (the rollout's context), for the overlong penalty;
// judged says the run adds a judge part, which counts as an outcome signal.
func (c *Config) Validate(maxTokens int, judged bool) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if w := c.OutcomeWeight(); !finite(w) {
		bad("outcome must be a finite weight, got %v", w)
	}
	shaping := false
	if f := c.Format; f != nil {
		if f.Pattern == "" {
			bad("format.pattern must be set: the regular expression the final turn must match")
		} else if _, err := regexp.Compile(f.Pattern); err != nil {
			bad("format.pattern: %v", err)
		}
		if f.Weight == 0 || !finite(f.Weight) {
			bad("format.weight must be a finite non-zero weight, got %v (0 would make the format count for nothing: remove the block)", f.Weight)
		}
		shaping = true
	}
	if o := c.Overlong; o != nil {
		switch {
		case o.MaxLen < 1 || o.Cache < 1 || o.Cache > o.MaxLen:
			bad("overlong: need 0 < cache (%d) <= max_len (%d)", o.Cache, o.MaxLen)
		case maxTokens > 0 && o.MaxLen-o.Cache >= maxTokens:
			bad("overlong: the penalty starts past max_len − cache = %d tokens, and no episode can hold more than rollout.max_context = %d: it would never apply", o.MaxLen-o.Cache, maxTokens)
		}
		if !(o.Weight > 0) || !finite(o.Weight) {
			bad("overlong.weight must be finite and > 0, got %v (the penalty is already negative; 0 would do nothing)", o.Weight)
		}
	}
	if p := c.Process; p != nil {
		if !finite(p.ValidCall) || !finite(p.InvalidCall) || !finite(p.StepCost) {
			bad("process: valid_call, invalid_call and step_cost must be finite")
		} else if *p == (ToolProcess{}) {
			bad("process: valid_call, invalid_call and step_cost are all 0: the block would add nothing to any turn (remove it)")
		}
		shaping = true
	}
	if p := c.Progressive; p != nil {
		if err := p.Validate(); err != nil {
			bad("progressive: from must be in [0, 1] and steps > 0, got %v and %d", p.From, p.Steps)
		}
		if !shaping {
			bad("progressive anneals the shaping rewards (format, process) into the outcome; with neither it would only scale the reward: add format or process, or remove progressive")
		}
	}
	if len(errs) == 0 && c.Format == nil && c.Overlong == nil && c.Process == nil && c.Progressive == nil && !judged && c.OutcomeWeight() == 1 {
		bad("outcome 1 and no other part leave the environment's reward as it is: remove the block, or add format, overlong, process, progressive or judge")
	}
	return errors.Join(errs...)
}

// Episode is the text of an episode a text reward reads (the trajectory holds tokens only).
type Episode struct {
	Prompt   string // the task as the agent saw it (the first user message)
	Response string // the final assistant turn
}

// Meta keys a Shaper records on each trajectory it scores: each part's unweighted score, the
// progressive outcome weight, and the judge's verdict when it was not an ordinary judgement.
const (
	MetaOutcome       = "reward/outcome"
	MetaFormat        = "reward/format"
	MetaOverlong      = "reward/overlong"
	MetaJudge         = "reward/judge"
	MetaJudgeVerdict  = "reward/judge_verdict"
	MetaProcess       = "reward/process"
	MetaOutcomeWeight = "reward/outcome_weight"
)

// Shaper applies a Config (and optionally a judge) to trajectories.
type Shaper struct {
	cfg         Config
	format      *regexp.Regexp
	judge       *Judge
	judgeWeight float64
}

// NewShaper checks c (maxTokens as for Validate) and compiles it. judge may be nil; its weight
// must then be 0.
func NewShaper(c Config, maxTokens int, judge *Judge, judgeWeight float64) (*Shaper, error) {
	if (judge != nil) != (judgeWeight != 0) || !finite(judgeWeight) {
		return nil, fmt.Errorf("reward: a judge needs a finite non-zero weight, and a weight a judge (have weight %v)", judgeWeight)
	}
	if err := c.Validate(maxTokens, judge != nil); err != nil {
		return nil, fmt.Errorf("reward: %w", err)
	}
	s := &Shaper{cfg: c, judge: judge, judgeWeight: judgeWeight}
	if c.Format != nil {
		s.format = regexp.MustCompile(c.Format.Pattern)
	}
	return s, nil
}

// Apply rescores t, an episode sampled at training step step (0-based), in place: its outcome
// reward becomes the composed reward, the process rewards are added to its turns, and each
// part's score is recorded in t.Meta. An infrastructure-failed episode is left as it is. A judge
// whose generator fails marks the episode env_error (it must not count as any score); only ctx
// ending is returned as an error.
func (s *Shaper) Apply(ctx context.Context, t *traj.Trajectory, ep Episode, step int) error {
	if t.Status.Failed() {
		return nil
	}
	if step < 0 {
		return fmt.Errorf("reward: step %d < 0", step)
	}
	c := s.cfg
	env := t.Reward
	meta := func(k string, v float64) {
		t.Meta = append(t.Meta, traj.KV{Key: k, Value: strconv.FormatFloat(v, 'g', -1, 64)})
	}
	meta(MetaOutcome, env)
	outcome := c.OutcomeWeight() * env
	shaping := 0.0
	if s.format != nil {
		f := b2f(s.format.MatchString(ep.Response))
		meta(MetaFormat, f)
		shaping += c.Format.Weight * f
	}
	if s.judge != nil {
		v, verdict, err := s.judge.Judge(ctx, Sample{Prompt: ep.Prompt, Response: ep.Response})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			t.Status, t.Error = traj.StatusEnvError, err.Error()
			t.Meta = append(t.Meta, traj.KV{Key: MetaJudgeVerdict, Value: "error"})
			return nil
		}
		meta(MetaJudge, v)
		if verdict != Judged {
			t.Meta = append(t.Meta, traj.KV{Key: MetaJudgeVerdict, Value: verdict.String()})
		}
		outcome += s.judgeWeight * v
	}
	penalty := 0.0
	if o := c.Overlong; o != nil {
		p, err := o.Penalty(ResponseTokens(t))
		if err != nil {
			return err
		}
		meta(MetaOverlong, p)
		penalty = o.Weight * p
	}
	if c.Process != nil {
		sum := 0.0
		for k, r := range c.Process.Turns(t) {
			t.Turns[k].Reward += r
			sum += r
		}
		meta(MetaProcess, sum)
	}
	if p := c.Progressive; p != nil {
		w := p.OutcomeWeight(step)
		meta(MetaOutcomeWeight, w)
		for k := range t.Turns {
			t.Turns[k].Reward *= 1 - w
		}
		shaping *= 1 - w
		outcome *= w
	}
	t.Reward = outcome + shaping + penalty
	return nil
}
