package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/infer/remote"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/tokenizer"
)

// newDistill makes phase p's teacher (nil without rl.distill): an earlier phase's final
// checkpoint or a checkpoint folder scored in-process, or inference servers. The teacher's
// tokenizer must be the student's (tokenizer.Compatible) and a first scoring of a probe prompt
// must answer one finite logprob per token, before the phase samples anything.
func (r *Run) newDistill(ctx context.Context, p config.Phase) (*learn.Distill, error) {
	if p.RL == nil || p.RL.Distill == nil {
		return nil, nil
	}
	c := p.RL.Distill
	var sc infer.Scorer
	var tok *tokenizer.Tokenizer
	var what string
	switch {
	case c.Teacher == config.TeacherRemote:
		var err error
		if tok, err = tokenizer.Load(c.Tokenizer); err != nil {
			return nil, fmt.Errorf("teacher: %w", err)
		}
		opts, err := c.Remote.Options()
		if err != nil {
			return nil, fmt.Errorf("teacher: %w", err)
		}
		opts.HealthInterval = -1 // failed calls eject and re-admit; nothing to stop at the phase's end
		router, err := remote.New(opts)
		if err != nil {
			return nil, fmt.Errorf("teacher: %w", err)
		}
		// What generation's servers are checked for: the model served, its release, its context
		// against rollout.max_context, one token through the dialect.
		probe := infer.Request{Prompt: r.tok.EncodePrompt("", "1+1"), Sampling: infer.Sampling{Temperature: 1}, Seed: r.Cfg.Seed}
		infos, err := router.Probe(ctx, remote.ProbeOptions{Request: probe, MaxContext: r.Cfg.Rollout.MaxContext})
		if err != nil {
			return nil, fmt.Errorf("teacher: %w", err)
		}
		for _, info := range infos {
			if info.Unreachable != nil {
				r.printf("warning: teacher server ejected at start: %v\n", info.Unreachable)
			}
		}
		sc, what = router, fmt.Sprintf("%d server(s)", len(opts.Servers))
	default:
		dir := strings.TrimPrefix(c.Teacher, config.TeacherCheckpoint)
		if name := c.TeacherPhaseName(); name != "" {
			pi := slices.IndexFunc(r.Cfg.Phases, func(q config.Phase) bool { return q.Name == name })
			dir = r.checkpointDir(r.stepName(pi, r.Cfg.Phases[pi].Steps)) // kept by pruning
		}
		ck, err := checkpoint.Load(dir)
		if err != nil {
			return nil, fmt.Errorf("teacher %s: %w", c.Teacher, err)
		}
		if ck.Model.Cfg.MaxSeq < r.Cfg.Rollout.MaxContext {
			return nil, fmt.Errorf("teacher %s: its max_seq %d is below rollout.max_context %d", c.Teacher, ck.Model.Cfg.MaxSeq, r.Cfg.Rollout.MaxContext)
		}
		s, err := local.NewScorer(ck.Model, 0)
		if err != nil {
			return nil, err
		}
		sc, tok, what = s, ck.Tokenizer, "in-process"
	}
	if err := tokenizer.Compatible(r.tok, tok); err != nil {
		return nil, fmt.Errorf("teacher %s: its tokenizer is not the student's: %w", c.Teacher, err)
	}
	probe := r.tok.EncodePrompt("", "1+1")
	if len(probe) < 2 {
		return nil, fmt.Errorf("teacher: the probe prompt has %d tokens", len(probe))
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req := infer.ScoreRequest{Tokens: probe, Start: 1}
	lps, err := sc.Score(pctx, req)
	if err == nil {
		err = infer.CheckScores(req, lps)
	}
	if err != nil {
		return nil, fmt.Errorf("teacher %s: the probe scoring failed: %w", c.Teacher, err)
	}
	d := &learn.Distill{Mode: c.Mode, Coef: c.Coef, Only: p.Kind == "distill", Workers: c.Workers,
		Score: func(ctx context.Context, seq []int32, start int) ([]float32, error) {
			return sc.Score(ctx, infer.ScoreRequest{Tokens: seq, Start: start})
		}}
	if c.Mode == algo.DistillLoss {
		if d.Estimator, err = algo.ParseKL(c.Estimator); err != nil {
			return nil, err
		}
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	only := ""
	if d.Only {
		only = ", the environment's reward not trained on"
	}
	r.printf("phase %s: distilling from %s (%s), mode %s, coef %g%s\n", p.Name, c.Teacher, what, c.Mode, c.Coef, only)
	return d, nil
}

// noteTeacher prints the episodes the teacher failed for in a step (they were left out of it;
// distill/teacher_failed_episodes counts them).
func (r *Run) noteTeacher(rep *learn.RLReport) {
	if len(rep.TeacherErrors) == 0 {
		return
	}
	r.printf("warning: the teacher failed for %d episode(s), left out of the step: %v\n", len(rep.TeacherErrors), rep.TeacherErrors[0])
}
