package config

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/infer/remote"
)

// DistillConfig is on-policy distillation in an RL phase (rl.distill): a teacher scores every
// token the policy samples and the per-token reverse KL to it trains the policy, beside the
// environment's reward in an rl phase, instead of it in a distill phase (kind: distill).
type DistillConfig struct {
	// Teacher is "phase:NAME", the final weights of an earlier phase of the run (cross-stage
	// distillation), "checkpoint:DIR", a checkpoint folder, both scored in-process, or "remote",
	// the inference servers of Remote (agentrl serve's score route, vLLM's prompt_logprobs,
	// SGLang's input_token_logprobs).
	Teacher string `yaml:"teacher"`
	// Mode is "advantage" (A_t += −coef·(logπ − logπ_T) after the advantages: Tinker's cookbook,
	// prime-rl) or "loss" (coef·KL_est(π_θ‖π_T) as a loss term with Estimator).
	Mode string  `yaml:"mode"`
	Coef float64 `yaml:"coef"`
	// Estimator is mode loss's KL estimator (algo.DistillLossEstimators: k2, k3, k1+, k3+, k2+).
	// Mode advantage uses the sampled-token k1 and takes none.
	Estimator string `yaml:"estimator,omitempty"`
	// Remote is the teacher's servers (teacher: remote); their deadline, attempts and routing
	// are generation's.
	Remote *remote.Config `yaml:"remote,omitempty"`
	// Tokenizer is a folder with the remote teacher's tokenizer.json (teacher: remote): it must
	// match the student's (ids, spellings, special tokens), checked at the phase's start.
	Tokenizer string `yaml:"tokenizer,omitempty"`
	// Workers is how many teacher calls run at once (0: 8; at most MaxTeacherWorkers).
	Workers int `yaml:"workers,omitempty"`
}

// MaxTeacherWorkers bounds rl.distill.workers.
const MaxTeacherWorkers = 256

// Teacher kinds of DistillConfig.Teacher.
const (
	TeacherPhase      = "phase:"
	TeacherCheckpoint = "checkpoint:"
	TeacherRemote     = "remote"
)

// IsRL reports whether the phase samples episodes and trains on them: kind rl, or kind distill
// (an rl phase trained on its teacher alone).
func (p Phase) IsRL() bool { return p.Kind == "rl" || p.Kind == "distill" }

// TeacherPhaseName is the phase whose final weights teach (teacher: phase:NAME), or "".
func (d *DistillConfig) TeacherPhaseName() string {
	name, ok := strings.CutPrefix(d.Teacher, TeacherPhase)
	if !ok {
		return ""
	}
	return name
}

// TeacherPhases are the phases some later phase names as its teacher, in the run's order.
func (c *Config) TeacherPhases() []string {
	var out []string
	for _, p := range c.Phases {
		if p.RL != nil && p.RL.Distill != nil {
			if n := p.RL.Distill.TeacherPhaseName(); n != "" && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// validateDistill checks every phase's rl.distill and the distill phases: the teacher's form, an
// earlier phase named by phase:NAME, the mode and its estimator.
func (c *Config) validateDistill() []error {
	var errs []error
	earlier := map[string]bool{}
	for i, p := range c.Phases {
		where := fmt.Sprintf("phases[%d] (%s)", i, p.Name)
		var d *DistillConfig
		if p.RL != nil {
			d = p.RL.Distill
		}
		switch {
		case p.Kind == "distill" && (p.RL == nil || d == nil):
			errs = append(errs, fmt.Errorf("%s: a distill phase trains on its teacher alone and needs rl.distill", where))
		case p.Kind == "distill" && p.RL.DynamicSampling != nil:
			errs = append(errs, fmt.Errorf("%s: rl.dynamic_sampling keeps groups by the spread of the environment's reward, which a distill phase does not train on: remove it", where))
			fallthrough
		case d != nil:
			for _, err := range d.validate(earlier, p.Name) {
				errs = append(errs, fmt.Errorf("%s: rl.distill.%w", where, err))
			}
		}
		earlier[p.Name] = true
	}
	return errs
}

func (d *DistillConfig) validate(earlier map[string]bool, self string) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch {
	case strings.HasPrefix(d.Teacher, TeacherPhase):
		name := d.TeacherPhaseName()
		if name == self {
			bad("teacher: phase %q is this phase; a teacher is an earlier phase's final weights", name)
		} else if !earlier[name] {
			bad("teacher: no phase %q before this one (phase:NAME names an earlier phase of the run)", name)
		}
	case strings.HasPrefix(d.Teacher, TeacherCheckpoint):
		dir := strings.TrimPrefix(d.Teacher, TeacherCheckpoint)
		for _, f := range []string{"config.json", "tokenizer.json"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				bad("teacher: %q is not a checkpoint folder: %v", dir, err)
				break
			}
		}
	case d.Teacher == TeacherRemote:
		if d.Remote == nil {
			bad("remote: teacher remote needs the servers (remote: {servers: […]})")
		} else if err := d.Remote.Validate("remote", false, true); err != nil {
			errs = append(errs, err) // its own errors name remote.…
		}
		if d.Tokenizer == "" {
			bad("tokenizer: a remote teacher needs its tokenizer folder, compared with the student's at start")
		} else if _, err := os.Stat(filepath.Join(d.Tokenizer, "tokenizer.json")); err != nil {
			bad("tokenizer: %v", err)
		}
	default:
		bad("teacher must be phase:NAME, checkpoint:DIR or remote, got %q", d.Teacher)
	}
	if d.Teacher != TeacherRemote {
		if d.Remote != nil {
			bad("remote does nothing unless teacher is remote")
		}
		if d.Tokenizer != "" {
			bad("tokenizer does nothing unless teacher is remote (a checkpoint's own tokenizer is compared)")
		}
	}
	if !(d.Coef > 0) || math.IsInf(d.Coef, 0) {
		bad("coef = %v, want a finite coefficient > 0", d.Coef)
	}
	switch d.Mode {
	case algo.DistillAdvantage:
		if d.Estimator != "" {
			bad("estimator does nothing in mode advantage (it adds the sampled token's logπ − logπ_T, k1)")
		}
	case algo.DistillLoss:
		if !slices.Contains(algo.DistillLossEstimators, d.Estimator) {
			bad("estimator must be one of %v in mode loss, got %q (k1's and abs's gradients do not move logπ toward the teacher)", algo.DistillLossEstimators, d.Estimator)
		}
	default:
		bad("mode must be one of %v, got %q", algo.DistillModes, d.Mode)
	}
	if d.Workers < 0 || d.Workers > MaxTeacherWorkers {
		bad("workers must be in [0, %d] (0: 8), got %d", MaxTeacherWorkers, d.Workers)
	}
	return errs
}
