package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/eval"
	"github.com/agentrl/agentrl/infer"
)

// EvalReport is one evaluation of the run's policy.
type EvalReport struct {
	When    string        `json:"when"`
	Version int32         `json:"version"`
	Envs    []eval.Result `json:"envs"`
}

// evaluate runs the held-out evaluation of every environment of the run and records it.
func (r *Run) evaluate(ctx context.Context, when string) error {
	t0 := r.now()
	rep := EvalReport{When: when, Version: r.version}
	for _, name := range r.Cfg.EnvNames() {
		var bar *progress
		newEnv, d := r.mcp.Factory(), r.Cfg.EvalDifficulty(name)
		if r.toolFormat != nil {
			newEnv = r.envFactory()
		}
		if d != nil {
			newEnv = r.phaseEnvs([]config.EnvWeight{{Name: name, Difficulty: d}})
		}
		var gen infer.Generator
		if r.tinker != nil { // the service's sampler holds the policy (tinker.go)
			gen = r.tinker.sampler
		}
		e, err := eval.Run(ctx, r.model, r.tok, r.version, eval.Options{Gen: gen,
			Env: name, Tasks: r.Cfg.Eval.Tasks, K: r.Cfg.Eval.Samples, Seed: r.Cfg.Seed, Rollout: r.Cfg.Rollout.Config, Slots: r.Cfg.Rollout.EngineSlots,
			Envs: r.opts.Envs, NewEnv: newEnv, Difficulty: d, NewConversation: r.opts.NewConversation,
			Progress: func(done, total int) {
				if bar == nil {
					bar = r.newCounter("eval "+when+" "+name, "episode", total)
				}
				bar.update(done, "")
			},
		})
		if bar != nil {
			bar.finish()
		}
		if err == nil {
			err = r.tinkerFailed() // tinker.go
		}
		if err != nil {
			return fmt.Errorf("evaluate %s: %w", name, err)
		}
		rep.Envs = append(rep.Envs, e)
		r.printf("eval %-14s %-6s pass@1 %5.1f%% (greedy %5.1f%%)  pass@%d %5.1f%%  tool use %5.1f%% (greedy %5.1f%%)  turns %.2f  (%d tasks, %.1fs)\n",
			when, name, 100**e.Pass1Sampled, 100*e.Pass1Greedy, e.K, 100**e.PassK, 100**e.ToolUseSampled, 100*e.ToolUseRate, e.MeanTurns, e.Tasks, r.now().Sub(t0).Seconds())
		line := map[string]any{
			"eval": when, "env": name, "version": r.version, "eval/pass1": *e.Pass1Sampled, "eval/pass1_greedy": e.Pass1Greedy,
			"eval/passk": *e.PassK, "eval/tool_use_rate_sampled": *e.ToolUseSampled,
			"eval/tool_use_rate": e.ToolUseRate, "eval/mean_turns": e.MeanTurns,
			"time/elapsed_s": r.now().Sub(r.start).Seconds(),
		}
		if e.Context != nil {
			r.printf("eval %-14s %-6s context: %.2f folds per episode (%d of %d folded), %.0f → %.0f tokens, success folded %.1f%% unfolded %.1f%%\n",
				when, name, e.Context.FoldsPerEpisode, e.Context.Folded, e.Context.Episodes, e.Context.TokensBefore, e.Context.TokensAfter,
				100*e.Context.SuccessFolded, 100*e.Context.SuccessUnfolded)
			for k, v := range e.Context.Metrics("eval/") {
				line[k] = v
			}
		}
		if d := e.Delegation; d != nil {
			r.printf("eval %-14s %-6s delegation: %.2f sub-episodes per episode (%d of %d delegated), model calls %.2f, critical path %.2f, success delegated %.1f%% alone %.1f%%\n",
				when, name, d.SubEpisodesPerEpisode, d.Delegated, d.Episodes, d.ModelCalls, d.CriticalCalls, 100*d.SuccessDelegated, 100*d.SuccessAlone)
			for k, v := range d.Metrics("eval/") {
				line[k] = v
			}
		}
		for _, l := range e.Levels {
			r.printf("eval %-14s %-6s level %d: pass@1 %5.1f%% (greedy %5.1f%%)  (%d tasks)\n", when, name, l.Level, 100**l.Pass1, 100*l.Pass1Greedy, l.Tasks)
			line[fmt.Sprintf("eval/level%d/pass1", l.Level)] = *l.Pass1
			line[fmt.Sprintf("eval/level%d/pass1_greedy", l.Level)] = l.Pass1Greedy
			line[fmt.Sprintf("eval/level%d/tasks", l.Level)] = l.Tasks
		}
		if err := r.metrics.Write(line); err != nil {
			return err
		}
	}
	r.evals = append(r.evals, rep)
	if err := r.noteEval(rep); err != nil {
		return err
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(r.Dir, "eval-"+when+".json"), data)
}

// printSummary prints held-out pass@1 before training and after each phase.
func (r *Run) printSummary() {
	r.printf("\nheld-out pass@1, %d tasks per environment (sampled at temperature 1 with %d samples per task / greedy):\n", r.Cfg.Eval.Tasks, r.Cfg.Eval.Samples)
	for _, name := range r.Cfg.EnvNames() {
		r.printf("  %-8s", name)
		for _, rep := range r.evals {
			for _, e := range rep.Envs {
				if e.Env == name {
					r.printf("  %s %.1f%% / %.1f%%", rep.When, 100**e.Pass1Sampled, 100*e.Pass1Greedy)
				}
			}
		}
		r.printf("\n")
	}
	r.printf("run directory: %s (%.1f min)\n", r.Dir, r.now().Sub(r.start).Minutes())
	r.warnNothingLearned()
}
