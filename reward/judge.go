package reward

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// TextGenerator completes a prompt with text. It is the judge's only dependency, so a judge can be
// any model: the lead adapts infer.Generator (tokens) to it, tests use a fake.
type TextGenerator interface {
	Complete(ctx context.Context, prompt string) (string, error)
}

// JudgeConfig configures a Judge (the settings of a run config's reward.judge block, which adds
// the weight and the generator).
type JudgeConfig struct {
	// Rubric is a text/template rendered with the Sample ({{.Prompt}}, {{.Response}}, {{.Answer}}).
	// It must ask the judge to end with a line "Score: N" (N on the 0..MaxScore scale).
	Rubric string `yaml:"rubric"`
	// MaxScore is the top of the rubric's scale, > 0; the score returned is N/MaxScore ∈ [0, 1].
	MaxScore float64 `yaml:"max_score"`
	// Timeout bounds one judgement, > 0. A judgement past it scores Fallback.
	Timeout time.Duration `yaml:"timeout"`
	// Fallback is the score, in [0, 1], of a judgement with no parseable score in range or one
	// that timed out. Each is counted (Verdict).
	Fallback float64 `yaml:"fallback"`
}

// Validate checks the settings, naming them by their keys.
func (c JudgeConfig) Validate() error {
	var errs []error
	if strings.TrimSpace(c.Rubric) == "" {
		errs = append(errs, errors.New("rubric must be set: the prompt the judge answers, ending with a request for \"Score: N\""))
	} else if _, err := compileRubric(c.Rubric); err != nil {
		errs = append(errs, err)
	}
	if !(c.MaxScore > 0) || math.IsInf(c.MaxScore, 0) {
		errs = append(errs, fmt.Errorf("max_score must be finite and > 0, got %v", c.MaxScore))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout must be positive, got %s", c.Timeout))
	}
	if !(c.Fallback >= 0 && c.Fallback <= 1) {
		errs = append(errs, fmt.Errorf("fallback must be in [0, 1], got %v", c.Fallback))
	}
	return errors.Join(errs...)
}

func compileRubric(rubric string) (*template.Template, error) {
	tpl, err := template.New("rubric").Option("missingkey=error").Parse(rubric)
	if err == nil {
		err = tpl.Execute(&strings.Builder{}, Sample{})
	}
	if err != nil {
		return nil, fmt.Errorf("rubric: %w", err)
	}
	return tpl, nil
}

// Judge is a generator-backed grader: rubric prompt → judgement text → score in [0, 1].
type Judge struct {
	gen TextGenerator
	cfg JudgeConfig
	tpl *template.Template
}

// NewJudge checks the config and compiles the rubric.
func NewJudge(gen TextGenerator, c JudgeConfig) (*Judge, error) {
	if gen == nil {
		return nil, errors.New("reward: judge: no generator")
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("reward: judge: %w", err)
	}
	tpl, _ := compileRubric(c.Rubric)
	return &Judge{gen: gen, cfg: c, tpl: tpl}, nil
}

// Verdict says how a judgement was scored.
type Verdict uint8

const (
	Judged      Verdict = iota // the judgement's score
	Unparseable                // no score in range: Fallback
	TimedOut                   // past Timeout: Fallback
)

func (v Verdict) String() string {
	return [...]string{"judged", "unparseable", "timeout"}[v]
}

// Score implements Scorer.
func (j *Judge) Score(ctx context.Context, s Sample) (float64, error) {
	v, _, err := j.Judge(ctx, s)
	return v, err
}

// Judge scores s and says how. A judgement without a parseable score in range, or one that runs
// past the timeout, scores Fallback; a generator error, or ctx ending, is an error
// (infrastructure failed: the episode must not count as any score).
func (j *Judge) Judge(ctx context.Context, s Sample) (float64, Verdict, error) {
	var prompt strings.Builder
	if err := j.tpl.Execute(&prompt, s); err != nil {
		return 0, Judged, fmt.Errorf("reward: judge: rubric: %w", err)
	}
	jctx, cancel := context.WithTimeout(ctx, j.cfg.Timeout)
	defer cancel()
	text, err := j.gen.Complete(jctx, prompt.String())
	if err == nil {
		err = jctx.Err() // a generator that ignored the deadline
	}
	if err != nil {
		if ctx.Err() == nil && errors.Is(jctx.Err(), context.DeadlineExceeded) {
			return j.cfg.Fallback, TimedOut, nil
		}
		return 0, Judged, fmt.Errorf("reward: judge: %w", err)
	}
	v, den, ok := ParseScore(text)
	if !ok || (den != 0 && den != j.cfg.MaxScore) || v < 0 || v > j.cfg.MaxScore {
		return j.cfg.Fallback, Unparseable, nil
	}
	return v / j.cfg.MaxScore, Judged, nil
}

var scoreRE = regexp.MustCompile(`(?i)score\s*[:=]\s*\**\s*([-+]?\d+(?:\.\d+)?)(?:\s*/\s*(\d+(?:\.\d+)?))?`)

// ParseScore finds the last "Score: N" (or "score = N", "Score: **N**", "Score: N/D") in a
// judgement and returns N and D (0 when absent). The judge accepts D only when it equals its scale.
func ParseScore(text string) (score, denominator float64, ok bool) {
	all := scoreRE.FindAllStringSubmatch(text, -1)
	if len(all) == 0 {
		return 0, 0, false
	}
	m := all[len(all)-1]
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, 0, false
	}
	if m[2] != "" {
		if denominator, err = strconv.ParseFloat(m[2], 64); err != nil {
			return 0, 0, false
		}
	}
	return v, denominator, true
}
