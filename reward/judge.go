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

// JudgeConfig configures a Judge.
type JudgeConfig struct {
	// Rubric is a text/template rendered with the Sample ({{.Prompt}}, {{.Response}}, {{.Answer}}).
	// It must ask the judge to end with a line "Score: N" (N on the 0..MaxScore scale).
	Rubric      string
	MaxScore    float64       // top of the rubric's scale, > 0; the score returned is N/MaxScore ∈ [0, 1]
	Timeout     time.Duration // per judgement, > 0
	Unparseable float64       // score when the judgement has no parseable score, in [0, 1]
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
	if !(c.MaxScore > 0) || math.IsInf(c.MaxScore, 0) {
		return nil, fmt.Errorf("reward: judge: max score %v, want finite > 0", c.MaxScore)
	}
	if c.Timeout <= 0 {
		return nil, fmt.Errorf("reward: judge: timeout %v, want > 0", c.Timeout)
	}
	if !(c.Unparseable >= 0 && c.Unparseable <= 1) {
		return nil, fmt.Errorf("reward: judge: unparseable score %v, want in [0, 1]", c.Unparseable)
	}
	tpl, err := template.New("rubric").Option("missingkey=error").Parse(c.Rubric)
	if err != nil {
		return nil, fmt.Errorf("reward: judge: rubric: %w", err)
	}
	if err := tpl.Execute(&strings.Builder{}, Sample{}); err != nil {
		return nil, fmt.Errorf("reward: judge: rubric: %w", err)
	}
	return &Judge{gen: gen, cfg: c, tpl: tpl}, nil
}

// Score implements Scorer. A generator error or timeout is an error (infrastructure failed, the
// episode must not count as reward 0); a judgement without a parseable score gets Unparseable.
func (j *Judge) Score(ctx context.Context, s Sample) (float64, error) {
	var prompt strings.Builder
	if err := j.tpl.Execute(&prompt, s); err != nil {
		return 0, fmt.Errorf("reward: judge: rubric: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, j.cfg.Timeout)
	defer cancel()
	text, err := j.gen.Complete(ctx, prompt.String())
	if err == nil {
		err = ctx.Err() // a generator that ignored the deadline
	}
	if err != nil {
		return 0, fmt.Errorf("reward: judge: %w", err)
	}
	v, den, ok := ParseScore(text)
	if !ok || (den != 0 && den != j.cfg.MaxScore) || v < 0 || v > j.cfg.MaxScore {
		return j.cfg.Unparseable, nil
	}
	return v / j.cfg.MaxScore, nil
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
