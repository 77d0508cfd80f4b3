package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/pipeline"
)

// stagesName is the two-stage comparison of issue 28: it is not one RL phase from a supervised
// checkpoint, as the paperBenches are, but whole runs of three phases.
const stagesName = "distill-stages"

// stagesArms are its arms: the second stage with and without cross-stage distillation from the
// first stage's final checkpoint.
var stagesArms = []string{"plain", "cross-stage"}

// stagesConfig is arm's run at seed: the calc preset with both environments' settings (search's
// longer episodes), supervised on calc and search, then RL on calc (rl-calc), then RL on search
// (rl-search), which in arm cross-stage also distils from rl-calc's final weights (beside the
// reward, mode advantage, coef 0.5). Dynamic sampling is off in both: it would drop the groups
// whose rewards agree, where the teacher's signal is as dense as anywhere. --steps sets both RL stages' steps, --sft-steps the
// supervised phase's, --tasks and --samples the evaluation after each phase, --set the rest.
func stagesConfig(o PaperOptions, arm string, seed uint64) (config.Config, error) {
	sets := []string{"runs_dir=" + o.RunsDir, fmt.Sprintf("name=bench-paper-%s-%s-seed%d", stagesName, arm, seed), fmt.Sprintf("seed=%d", seed),
		"rollout.max_turns=6", "rollout.max_context=512", "model.max_seq=512", "rollout.max_tokens_per_turn=64",
		"phases.sft.envs=[{name: calc, weight: 1}, {name: search, weight: 1}]", "eval.every=0", noDynSampled,
		fmt.Sprintf("checkpoint.every=%d", 1000000), "checkpoint.keep=1"}
	c, _ := config.Preset("calc")
	if o.SFTSteps > 0 {
		sets = append(sets, fmt.Sprintf("phases.sft.steps=%d", o.SFTSteps), fmt.Sprintf("phases.sft.optim.warmup=%d", min(c.Phases[0].Optim.Warmup, o.SFTSteps)))
	}
	if o.Steps > 0 {
		sets = append(sets, fmt.Sprintf("phases.rl.steps=%d", o.Steps), fmt.Sprintf("phases.rl.optim.warmup=%d", min(c.Phases[1].Optim.Warmup, o.Steps)))
	}
	if o.Tasks > 0 {
		sets = append(sets, fmt.Sprintf("eval.tasks=%d", o.Tasks))
	}
	if o.Samples > 0 {
		sets = append(sets, fmt.Sprintf("eval.samples=%d", o.Samples))
	}
	cfg, err := config.Load(o.Envs, "calc", "", append(sets, o.Set...))
	if err != nil {
		return cfg, err
	}
	cfg.Checkpoint.Every = max(cfg.Phases[0].Steps, cfg.Phases[1].Steps)
	cfg.Phases[1].Name = "rl-calc"
	search := cfg.Phases[1]
	rl := *search.RL
	search.Name, search.RL = "rl-search", &rl
	// A reward block of the calc stage (--set phases.rl.envs.0.reward=…) shapes search's too.
	search.Envs = []config.EnvWeight{{Name: "search", Weight: 1, Reward: cfg.Phases[1].Envs[0].Reward}}
	if arm == "cross-stage" {
		rl.Distill = &config.DistillConfig{Teacher: config.TeacherPhase + "rl-calc", Mode: algo.DistillAdvantage, Coef: 0.5}
	}
	cfg.Phases = append(cfg.Phases, search)
	return cfg, cfg.Validate(o.Envs)
}

// stagesRun is one arm at one seed: held-out sampled pass@1 on calc and on search after each stage.
type stagesRun struct {
	arm                  string
	seed                 uint64
	calc1, calc2, search float64 // calc after rl-calc, calc and search after rl-search
	wall                 float64
}

// paperStages runs distill-stages: the supervised phase once, then every arm at every seed as a
// run of the two RL stages from it, one after another,
// and reports calc's success after each stage (what the second stage kept of the first) and
// search's at the end, per seed and over seeds, with the paired difference cross-stage − plain.
func paperStages(ctx context.Context, w io.Writer, o PaperOptions) error {
	var seeds []uint64
	for _, s := range splitList(o.Seeds) {
		var v uint64
		if _, err := fmt.Sscan(s, &v); err != nil {
			return fmt.Errorf("bench paper %s: bad seed %q", stagesName, s)
		}
		seeds = append(seeds, v)
	}
	if len(seeds) == 0 {
		return fmt.Errorf("bench paper %s: need at least one seed", stagesName)
	}
	if o.Arms != "" || o.Presets != "" || o.Teacher != "" || o.TeacherInit != "" || o.TeacherSteps != 0 {
		return fmt.Errorf("bench paper %s: runs both arms on calc then search, its teacher the rl-calc stage: --arms, --presets and --teacher* do not apply", stagesName)
	}
	for _, arm := range stagesArms { // every configuration checked before anything trains
		if _, err := stagesConfig(o, arm, seeds[0]); err != nil {
			return fmt.Errorf("arm %s: %w", arm, err)
		}
	}
	out := w
	if o.Quiet {
		out = nil
	}
	fmt.Fprintf(w, "bench paper %s: supervised once on calc and search (seed 1, or --init), then at each seed RL on calc (rl-calc), then RL on search (rl-search) with and without cross-stage distillation from rl-calc's final weights; arms %v, seeds %s\n", stagesName, stagesArms, o.Seeds)
	sft, err := stagesSupervised(ctx, w, out, o)
	if err != nil {
		return err
	}
	var runs []stagesRun
	for _, seed := range seeds {
		for _, arm := range stagesArms {
			cfg, _ := stagesConfig(o, arm, seed)
			cfg.Init, cfg.Phases = sft, cfg.Phases[1:]
			cfg.Checkpoint.Every = max(cfg.Phases[0].Steps, cfg.Phases[1].Steps)
			run, err := pipeline.NewRun(cfg, pipeline.Options{Out: out, Terminal: o.Terminal, Envs: o.Envs})
			if err != nil {
				return err
			}
			t0 := time.Now()
			sum, err := run.Train(ctx)
			if err != nil {
				return fmt.Errorf("arm %s seed %d: %w", arm, seed, err)
			}
			r := stagesRun{arm: arm, seed: seed, wall: time.Since(t0).Seconds()}
			get := func(when, env string) float64 {
				for _, e := range sum.Evals {
					if e.When != when {
						continue
					}
					for _, x := range e.Envs {
						if x.Env == env && x.Pass1Sampled != nil {
							return *x.Pass1Sampled
						}
					}
				}
				return 0
			}
			r.calc1, r.calc2, r.search = get("after-rl-calc", "calc"), get("after-rl-search", "calc"), get("after-rl-search", "search")
			runs = append(runs, r)
			fmt.Fprintf(w, "done: arm %s seed %d: calc %.1f%% after rl-calc, %.1f%% after rl-search; search %.1f%% (%.0fs)\n", arm, seed, 100*r.calc1, 100*r.calc2, 100*r.search, r.wall)
		}
	}
	printStages(w, runs)
	return nil
}

// stagesSupervised is the supervised checkpoint both stages start from at every seed and arm:
// o.Init, or the supervised phase of stagesConfig trained once here (seed 1), as every other
// comparison shares one supervised checkpoint and varies the seed of RL alone.
func stagesSupervised(ctx context.Context, w, out io.Writer, o PaperOptions) (string, error) {
	if o.Init != "" {
		return o.Init, nil
	}
	cfg, err := stagesConfig(o, "plain", 1)
	if err != nil {
		return "", err
	}
	cfg.Name, cfg.Phases = "bench-paper-"+stagesName+"-sft", cfg.Phases[:1]
	cfg.Checkpoint.Every = cfg.Phases[0].Steps
	t0 := time.Now()
	run, err := pipeline.NewRun(cfg, pipeline.Options{Out: out, Terminal: o.Terminal, Envs: o.Envs})
	if err != nil {
		return "", err
	}
	sum, err := run.Train(ctx)
	if err != nil {
		return "", fmt.Errorf("supervised phase: %w", err)
	}
	dir := filepath.Join(sum.Dir, "checkpoints", fmt.Sprintf("%s-p0.s%06d", cfg.Phases[0].Name, cfg.Phases[0].Steps))
	fmt.Fprintf(w, "supervised checkpoint on calc and search: %s (%s)\n", dir, time.Since(t0).Round(time.Second))
	return dir, nil
}

// printStages prints the per-seed rows, the means over seeds and the paired differences.
func printStages(w io.Writer, runs []stagesRun) {
	fmt.Fprintf(w, "\nheld-out sampled pass@1\n%-12s %-5s %-16s %-16s %-16s\n", "arm", "seed", "calc after calc", "calc at the end", "search at end")
	for _, r := range runs {
		fmt.Fprintf(w, "%-12s %-5d %-16s %-16s %-16s\n", r.arm, r.seed, fmt.Sprintf("%.1f%%", 100*r.calc1), fmt.Sprintf("%.1f%%", 100*r.calc2), fmt.Sprintf("%.1f%%", 100*r.search))
	}
	fmt.Fprintf(w, "\nover seeds: mean ± half-width of the 95%% interval (Student's t)\n")
	col := func(arm string, f func(stagesRun) float64) []float64 {
		var v []float64
		for _, r := range runs {
			if r.arm == arm {
				v = append(v, f(r))
			}
		}
		return v
	}
	figs := []struct {
		name string
		f    func(stagesRun) float64
	}{{"calc after calc", func(r stagesRun) float64 { return r.calc1 }}, {"calc at the end", func(r stagesRun) float64 { return r.calc2 }},
		{"calc forgotten", func(r stagesRun) float64 { return r.calc1 - r.calc2 }}, {"search at end", func(r stagesRun) float64 { return r.search }}}
	for _, arm := range stagesArms {
		var cells []string
		for _, f := range figs {
			cells = append(cells, f.name+" "+meanCI(col(arm, f.f)).format(100, 1, "%"))
		}
		fmt.Fprintf(w, "  %-12s %s\n", arm, strings.Join(cells, "  "))
	}
	fmt.Fprintf(w, "\npaired by seed, cross-stage − plain (GLM's cross-stage distillation keeps the first stage's skill: calc at the end higher, forgotten lower):\n")
	for _, f := range figs {
		a, b := col("cross-stage", f.f), col("plain", f.f)
		d := make([]float64, min(len(a), len(b)))
		for i := range d {
			d[i] = a[i] - b[i]
		}
		fmt.Fprintf(w, "  %s: %s\n", f.name, meanCI(d).format(100, 1, "%"))
	}
}
