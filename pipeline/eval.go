package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
)

// EvalOptions says how to evaluate a policy on held-out tasks.
type EvalOptions struct {
	Env   string
	Tasks int // held-out task seeds, from the start of the held-out range
	// K samples per task at temperature 1 for pass@k; 0 evaluates greedy decoding only.
	K       int
	Seed    uint64
	Rollout rollout.Config
	Slots   int
	// Envs holds the environment named by Env.
	Envs *env.Registry
	// NewEnv makes the episodes' environments (nil: Envs.New).
	NewEnv rollout.EnvFactory
}

// EnvEval is one environment's held-out result.
type EnvEval struct {
	Env   string `json:"env"`
	Tasks int    `json:"tasks"`
	// Greedy decoding.
	Pass1Greedy float64 `json:"pass1_greedy"`
	// Sampled at temperature 1, K samples per task (absent when K = 0): unbiased pass@1 and
	// pass@k (Chen et al., arXiv 2107.03374).
	K            int      `json:"k,omitempty"`
	Pass1Sampled *float64 `json:"pass1_sampled,omitempty"`
	PassK        *float64 `json:"passk,omitempty"`
	// ToolUseSampled is the share of sampled episodes that called a tool.
	ToolUseSampled *float64 `json:"tool_use_rate_sampled,omitempty"`
	// Behaviour over the greedy episodes.
	ToolUseRate float64        `json:"tool_use_rate"`
	MeanTurns   float64        `json:"mean_turns"`
	MeanTokens  float64        `json:"mean_tokens"`
	Statuses    map[string]int `json:"statuses"`
}

// EvalReport is one evaluation of the run's policy.
type EvalReport struct {
	When    string    `json:"when"`
	Version int32     `json:"version"`
	Envs    []EnvEval `json:"envs"`
}

// Evaluate runs a policy (m with tok) on held-out tasks of one environment.
func Evaluate(ctx context.Context, m *model.Model, tok *tokenizer.Tokenizer, version int32, o EvalOptions) (EnvEval, error) {
	spec, err := o.Envs.Lookup(o.Env)
	if err != nil {
		return EnvEval{}, err
	}
	if o.NewEnv == nil {
		o.NewEnv = o.Envs.New
	}
	n := min(int64(o.Tasks), spec.Heldout.Len())
	if n < 1 {
		return EnvEval{}, fmt.Errorf("pipeline: evaluate %s: no held-out tasks", o.Env)
	}
	tasks := make([]rollout.Task, n)
	for i := range tasks {
		tasks[i] = rollout.Task{Env: o.Env, Seed: spec.Heldout.Lo + int64(i), GroupID: uint64(i)}
	}
	eng, err := local.NewEngine(m, version, local.EngineConfig{Slots: max(o.Slots, 1), MaxLen: o.Rollout.MaxContext})
	if err != nil {
		return EnvEval{}, err
	}
	defer eng.Close()
	greedyCfg := o.Rollout
	greedyCfg.Sampling = infer.Sampling{Temperature: 0}
	runner := &rollout.Runner{Gen: eng, Tok: tok, Cfg: greedyCfg, SampleSeed: o.Seed}
	groups, err := runner.RunGroups(ctx, o.NewEnv, tasks, 1, max(o.Slots, 1))
	if err != nil {
		return EnvEval{}, err
	}
	res := EnvEval{Env: o.Env, Tasks: int(n), Statuses: map[string]int{}}
	var succ, tools, turns, toks int
	for _, g := range groups {
		t := g.Trajs[0]
		if rollout.Succeeded(t) {
			succ++
		}
		if usedTool(t) {
			tools++
		}
		turns += len(t.Turns)
		toks += t.Len()
		res.Statuses[t.Status.String()]++
	}
	res.Pass1Greedy = float64(succ) / float64(n)
	res.ToolUseRate = float64(tools) / float64(n)
	res.MeanTurns = float64(turns) / float64(n)
	res.MeanTokens = float64(toks) / float64(n)
	if o.K > 0 {
		sampled := o.Rollout
		sampled.Sampling = infer.Sampling{Temperature: 1}
		runner = &rollout.Runner{Gen: eng, Tok: tok, Cfg: sampled, SampleSeed: o.Seed ^ 0x5A}
		groups, err := runner.RunGroups(ctx, o.NewEnv, tasks, o.K, max(o.Slots, 1))
		if err != nil {
			return EnvEval{}, err
		}
		var p1, pk, tu float64
		for _, g := range groups {
			c := 0
			for _, t := range g.Trajs {
				if rollout.Succeeded(t) {
					c++
				}
				if usedTool(t) {
					tu++
				}
			}
			p1 += PassAtK(o.K, c, 1)
			pk += PassAtK(o.K, c, o.K)
		}
		res.K = o.K
		p1, pk, tu = p1/float64(n), pk/float64(n), tu/float64(n*int64(o.K))
		res.Pass1Sampled, res.PassK, res.ToolUseSampled = &p1, &pk, &tu
	}
	return res, nil
}

// PassAtK is the unbiased estimator of pass@k from n samples of which c are correct:
// 1 − C(n−c, k)/C(n, k) (Chen et al., arXiv 2107.03374, eq. 1), computed as a stable product.
func PassAtK(n, c, k int) float64 {
	if n-c < k {
		return 1
	}
	p := 1.0
	for i := n - c + 1; i <= n; i++ {
		p *= 1 - float64(k)/float64(i)
	}
	return 1 - p
}

// evaluate runs the held-out evaluation of every environment of the run and records it.
func (r *Run) evaluate(ctx context.Context, when string) error {
	t0 := r.now()
	rep := EvalReport{When: when, Version: r.version}
	for _, name := range r.Cfg.envNames() {
		e, err := Evaluate(ctx, r.model, r.tok, r.version, EvalOptions{
			Env: name, Tasks: r.Cfg.Eval.Tasks, K: r.Cfg.Eval.Samples, Seed: r.Cfg.Seed, Rollout: r.Cfg.Rollout.Runner(), Slots: r.Cfg.Rollout.EngineSlots,
			Envs: r.opts.Envs, NewEnv: r.mcp.Factory(),
		})
		if err != nil {
			return fmt.Errorf("evaluate %s: %w", name, err)
		}
		rep.Envs = append(rep.Envs, e)
		r.printf("eval %-14s %-6s pass@1 %5.1f%% (greedy %5.1f%%)  pass@%d %5.1f%%  tool use %5.1f%% (greedy %5.1f%%)  turns %.2f  (%d tasks, %.1fs)\n",
			when, name, 100**e.Pass1Sampled, 100*e.Pass1Greedy, e.K, 100**e.PassK, 100**e.ToolUseSampled, 100*e.ToolUseRate, e.MeanTurns, e.Tasks, r.now().Sub(t0).Seconds())
		if err := r.metrics.Write(map[string]any{
			"eval": when, "env": name, "version": r.version, "eval/pass1": *e.Pass1Sampled, "eval/pass1_greedy": e.Pass1Greedy,
			"eval/passk": *e.PassK, "eval/tool_use_rate_sampled": *e.ToolUseSampled,
			"eval/tool_use_rate": e.ToolUseRate, "eval/mean_turns": e.MeanTurns,
			"time/elapsed_s": r.now().Sub(r.start).Seconds(),
		}); err != nil {
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
	for _, name := range r.Cfg.envNames() {
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
}
