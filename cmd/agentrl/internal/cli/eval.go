package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/mcp"
	"github.com/agentrl/agentrl/eval"
	"github.com/agentrl/agentrl/hub"
	"github.com/agentrl/agentrl/pipeline"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// EvalCmd evaluates a checkpoint on held-out tasks.
type EvalCmd struct {
	Checkpoint string `help:"Checkpoint folder (model.safetensors, config.json, tokenizer.json), or hf:ORG/NAME[@REVISION] to download from the Hugging Face Hub (docs/hub.md)." required:"" placeholder:"DIR"`
	Env        string `help:"Environment to evaluate on." default:"calc"`
	Tasks      int    `help:"Held-out tasks (from the start of the held-out seed range)." default:"200"`
	K          int    `help:"Samples per task at temperature 1 for pass@k (0 = greedy only)." default:"8"`
	Seed       uint64 `help:"Sampling seed." default:"1"`
	MaxTurns   int    `help:"Turn limit per episode." default:"8"`
	MaxContext int    `help:"Token limit per episode (at most the model's max_position_embeddings)." default:"0"`
	Slots      int    `help:"Sequences decoded together." default:"64"`
	Levels     []int  `help:"Difficulty levels of --env to pose its tasks at, in equal shares (none: its default tasks); success is reported per level." placeholder:"L,..."`
	JSON       bool   `help:"Print the result as JSON."`
	Config     string `help:"Run configuration (YAML, e.g. the run's config.yaml) that defines --env (a remote environment's entry) or whose mcp block attaches MCP servers' tools to --env, as in training; its other settings are not used." type:"existingfile" placeholder:"FILE"`
}

// Run prints pass@1 (greedy and sampled), pass@k, the episodes that did not end ok, tool-use
// rate and mean turns.
func (c *EvalCmd) Run(g *Globals) (err error) {
	if c.MaxTurns < 1 {
		return fmt.Errorf("eval: --max-turns must be positive, got %d", c.MaxTurns)
	}
	if err := (eval.Options{Tasks: c.Tasks, K: c.K, Slots: c.Slots, Rollout: rollout.Config{MaxContext: c.MaxContext}}).CheckSizes(); err != nil {
		return err
	}
	fmt.Fprintf(g.Stderr, "loading checkpoint %s\n", c.Checkpoint)
	dir, err := folderOrHub(g, "eval: --checkpoint", c.Checkpoint, hub.Checkpoint)
	if err != nil {
		return err
	}
	ck, err := checkpoint.Load(dir)
	if err != nil {
		return err
	}
	rc := rollout.DefaultConfig()
	rc.MaxTurns = c.MaxTurns
	rc.MaxContext = ck.Model.Cfg.MaxSeq
	if c.MaxContext > 0 {
		if c.MaxContext > ck.Model.Cfg.MaxSeq {
			return fmt.Errorf("eval: --max-context %d exceeds the model's %d positions", c.MaxContext, ck.Model.Cfg.MaxSeq)
		}
		rc.MaxContext = c.MaxContext
	}
	g, user, err := withConfiguredEnvs(g, "eval", c.Config) // userenvs.go
	if err != nil {
		return err
	}
	defer user.Close()
	var tools *mcp.Toolbox
	if user.Pools[c.Env] == nil && user.Data[c.Env] == nil { // remote and dataset environments take no MCP tools here
		if tools, err = connectMCP(g, "eval", c.Config, c.Env); err != nil {
			return err
		}
	}
	defer func() {
		if cerr := tools.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("eval: %w", cerr)
		}
	}()
	newEnv := tools.Factory()
	if err := checkEvalContext(g.Ctx, g.Envs, newEnv, ck.Tokenizer, c.Env, rc.MaxContext); err != nil {
		return err
	}
	if err := notePromptChange(g, newEnv, c.Checkpoint, c.Env); err != nil {
		return err
	}
	var d *env.Difficulty
	if len(c.Levels) > 0 {
		d = &env.Difficulty{Levels: c.Levels}
		spec, err := g.Envs.Lookup(c.Env)
		if err != nil {
			return err
		}
		mix, err := env.WithDifficulty(tools.Spec(spec), *d)
		if err != nil {
			return fmt.Errorf("eval: --levels: %w", err)
		}
		newEnv = func(string) (env.Env, error) { return mix.New() }
	}
	if newEnv == nil {
		newEnv = g.Envs.New
	}
	newConv, newEnv, desc, err := pipeline.CheckpointChat(ck.Tokenizer, c.Env, newEnv)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	if desc != "" {
		fmt.Fprintln(g.Stderr, desc)
	}
	res, err := eval.Run(g.Ctx, ck.Model, ck.Tokenizer, 0, eval.Options{
		Env: c.Env, Tasks: c.Tasks, K: c.K, Seed: c.Seed, Rollout: rc, Slots: c.Slots, Envs: g.Envs, NewEnv: newEnv, Difficulty: d, NewConversation: newConv,
		Progress: progressReporter(g.Stderr, isTerminal(g.Stderr), "eval "+c.Env, "episode"),
	})
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(g.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	return printEval(g.Stdout, res)
}

// printEval prints res as a table. Beside each pass rate it counts the episodes that did not end
// ok, by status, so a 0% that comes from failing environments reads as such; a warning with the
// first failure's error follows when any episode failed.
func printEval(out io.Writer, res eval.Result) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if res.Pass1Sampled == nil { // --k 0: greedy only
		fmt.Fprintf(w, "env\ttasks\tpass@1 greedy\tnot ok\ttool use\tmean turns\tmean tokens\n")
		fmt.Fprintf(w, "%s\t%d\t%.1f%%\t%s\t%.1f%%\t%.2f\t%.0f\n", res.Env, res.Tasks, 100*res.Pass1Greedy, notOK(res.Statuses),
			100*res.ToolUseRate, res.MeanTurns, res.MeanTokens)
	} else {
		fmt.Fprintf(w, "env\ttasks\tpass@1 greedy\tnot ok greedy\tpass@1 sampled\tpass@%d\tnot ok sampled\ttool use\tmean turns\tmean tokens\n", res.K)
		fmt.Fprintf(w, "%s\t%d\t%.1f%%\t%s\t%.1f%%\t%.1f%%\t%s\t%.1f%%\t%.2f\t%.0f\n", res.Env, res.Tasks, 100*res.Pass1Greedy, notOK(res.Statuses),
			100**res.Pass1Sampled, 100**res.PassK, notOK(res.StatusesSampled), 100*res.ToolUseRate, res.MeanTurns, res.MeanTokens)
	}
	if len(res.Levels) > 0 {
		fmt.Fprintf(w, "\nlevel\ttasks\tpass@1 greedy\tpass@1 sampled\n")
		for _, l := range res.Levels {
			sampled := "-"
			if l.Pass1 != nil {
				sampled = fmt.Sprintf("%.1f%%", 100**l.Pass1)
			}
			fmt.Fprintf(w, "%d\t%d\t%.1f%%\t%s\n", l.Level, l.Tasks, 100*l.Pass1Greedy, sampled)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if c := res.Context; c != nil {
		if _, err := fmt.Fprintf(out, "\ncontext folding (greedy): %.2f folds per episode, %d of %d episodes folded, %.0f → %.0f tokens per fold, %.2f requests per episode; success folded %.1f%%, unfolded %.1f%%\n",
			c.FoldsPerEpisode, c.Folded, c.Episodes, c.TokensBefore, c.TokensAfter, c.RequestsPerEpisode, 100*c.SuccessFolded, 100*c.SuccessUnfolded); err != nil {
			return err
		}
	}
	if d := res.Delegation; d != nil {
		if _, err := fmt.Fprintf(out, "\ndelegation (greedy): %.2f sub-episodes per episode (%d failed), %d of %d episodes delegated, max depth %d; model calls %.2f, critical path %.2f, wall %.2fs per episode; success delegated %.1f%%, alone %.1f%%\n",
			d.SubEpisodesPerEpisode, d.FailedSubEpisodes, d.Delegated, d.Episodes, d.MaxDepth, d.ModelCalls, d.CriticalCalls, d.WallSeconds, 100*d.SuccessDelegated, 100*d.SuccessAlone); err != nil {
			return err
		}
	}
	if n := res.Failed(); n > 0 {
		total := res.Tasks * (1 + res.K)
		_, err := fmt.Fprintf(out, "warning: %d of %d episodes failed (env_error or timeout) and count as unsolved; the first: %s\n",
			n, total, res.FirstFailure)
		return err
	}
	return nil
}

// notOK lists the counts of the statuses other than ok ("truncated 3, env_error 200"), or "0".
func notOK(statuses map[string]int) string {
	var parts []string
	for s := traj.StatusOK + 1; s.Valid(); s++ {
		if n := statuses[s.String()]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, n))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}
