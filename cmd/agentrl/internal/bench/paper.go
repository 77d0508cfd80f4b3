package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
)

// PaperOptions says what `agentrl bench paper NAME` runs; the command documents each field.
type PaperOptions struct {
	Envs     *env.Registry
	Name     string   // the comparison (PaperNames)
	RunsDir  string   // where the supervised checkpoints and the arms' runs go
	Init     string   // supervised checkpoints: "DIR" (one preset) or "PRESET=DIR,…" ("" = train them)
	SFTSteps int      // steps of a supervised phase trained here (0: the preset's)
	Arms     string   // comma-separated arm names ("" = every arm of the comparison)
	Presets  string   // comma-separated presets to compare on ("" = every preset of the comparison)
	Seeds    string   // comma-separated RL seeds
	Steps    int      // RL steps per arm (0: the preset's)
	Every    int      // RL steps between the checkpoints evaluated on held-out tasks
	Tasks    int      // held-out tasks per evaluation (0: the preset's)
	Samples  int      // samples per task for the sampled pass@1 (0: the preset's)
	Set      []string // overrides of every supervised phase and every arm alike
	SVG      string   // where to draw the curves ("" = <RunsDir>/bench-paper-NAME[-PRESET].svg)
	// Teacher is the distill comparison's teacher checkpoint ("" = train one: the preset's RL phase
	// from TeacherInit, or the student's supervised checkpoint, for TeacherSteps, or 2×steps).
	Teacher      string
	TeacherInit  string
	TeacherSteps int
	Quiet        bool
	Terminal     bool
}

// paperBench is one of issue 17's orderings: the arms, the presets they are compared on (one
// comparison each, from that preset's supervised checkpoint), the orderings the papers report
// and the figures that show them. Arms differ from each other only in their sets, the switch
// under test; everything else is the preset's, and --set changes every arm alike.
type paperBench struct {
	what    string
	presets []string
	both    []string // settings of every arm, beside the preset's
	arms    []paperArm
	claims  []paperClaim
	figures []string // the tables' columns (paperFigures keys) after the start and end pass@1
}

// paperArm is one arm: its name, the switch that makes it (sets), and a preset of its own when
// the switch is the environment itself (ReTool's text-only calc).
type paperArm struct {
	name   string
	preset string // "" = the comparison's
	sets   []string
	// distill, when set, is the arm's teacher setting with %s for the teacher's checkpoint: an RL
	// run of the preset trained once from the supervised checkpoint (paper_distill.go).
	distill string
	// after are settings applied after --set: what the arm cannot train with (a distill phase
	// takes no reward block).
	after []string
	// scaffold says the arm's sets change how the policy acts (the rollout: context folding,
	// sub-agents): its supervised phase trains with them too, on demonstrations played under
	// them, from a checkpoint of its own, and its held-out evaluations run with them. A policy
	// is measured under the scaffold it acts in, and learns a tool from demonstrations that
	// call it.
	scaffold bool
}

// paperClaim is an ordering a paper reports: better beats worse on figure.
type paperClaim struct {
	better, worse string
	figure        string
	paper         string
}

const (
	toolTokens   = "phases.rl.rl.train_tool_responses=true"
	clipHigher   = "phases.rl.rl.loss.ppo.clip_high=0.28" // DAPO §3.1: ε_low 0.2, ε_high 0.28
	noDynSampled = "phases.rl.rl.dynamic_sampling=null"
)

// paperBenches are the comparisons of issue 17, by name.
var paperBenches = map[string]paperBench{
	"retool": {
		what:    "ReTool: RL with the calculator vs RL on the same tasks without it (calc-notool, its own supervised checkpoint)",
		presets: []string{"calc"},
		arms:    []paperArm{{name: "calc"}, {name: "calc-notool", preset: "calc-notool"}},
		claims: []paperClaim{
			{"calc", "calc-notool", "end", "ReTool (arXiv 2504.11536): tool-integrated RL beats text-only RL"},
			{"calc", "calc-notool", "tokens", "ReTool: shorter responses with the tool (10k → 6k tokens)"},
		},
		figures: []string{"greedy", "tokens", "wall"},
	},
	"search-r1": {
		what:    "Search-R1: tool-response tokens masked out of the loss (the default) vs trained on",
		presets: []string{"search"},
		arms:    []paperArm{{name: "masked"}, {name: "unmasked", sets: []string{toolTokens}}},
		claims: []paperClaim{
			{"masked", "unmasked", "end", "Search-R1 (arXiv 2503.09516) Table 4: retrieved-token masking gives better results"},
			{"masked", "unmasked", "grad-max", "Search-R1 §3.1: masking stabilises training"},
		},
		figures: []string{"greedy", "entropy", "entropy-min", "grad", "grad-max"},
	},
	"dapo": {
		what:    "DAPO: dynamic sampling on vs off, and clip-higher (ε_high 0.28) vs symmetric clip (0.2)",
		presets: []string{"calc", "search"},
		arms: []paperArm{
			{name: "dapo", sets: []string{clipHigher}},
			{name: "no-dynamic-sampling", sets: []string{clipHigher, noDynSampled}},
			{name: "symmetric-clip"},
		},
		claims: []paperClaim{
			{"dapo", "no-dynamic-sampling", "end", "DAPO (arXiv 2503.14476) §3.2: dynamic sampling"},
			{"dapo", "symmetric-clip", "end", "DAPO §3.1: clip-higher"},
			{"dapo", "symmetric-clip", "entropy", "DAPO §3.1 Fig. 2: clip-higher keeps entropy from collapsing"},
		},
		figures: []string{"greedy", "entropy", "sampled", "wall"},
	},
	"gigpo": {
		what:    "GiGPO vs GRPO on maze (step-level credit in a POMDP)",
		presets: []string{"maze"},
		arms:    []paperArm{{name: "gigpo"}, {name: "grpo", sets: []string{"phases.rl.rl.advantage.name=grpo"}}},
		claims: []paperClaim{
			{"gigpo", "grpo", "end", "GiGPO (arXiv 2505.10978) Table 1"},
			{"gigpo", "grpo", "greedy", "GiGPO Table 1"},
		},
		figures: []string{"greedy", "at-eps", "entropy", "wall"},
	},
	// Dynamic sampling is off in every arm: it drops the zero-variance groups that a
	// group-relative estimator cannot learn from and a critic can, and with it off every arm
	// trains on every episode it samples. gae also gets its critic term (coef 0.5, clip 0.5).
	"estimators": {
		what:    "PPO+GAE vs GRPO vs RLOO vs REINFORCE++: held-out success per trained episode and per second of RL",
		presets: []string{"calc"},
		both:    []string{noDynSampled},
		arms: []paperArm{
			{name: "ppo-gae", sets: []string{"phases.rl.rl.advantage.name=gae"}},
			{name: "grpo", sets: []string{"phases.rl.rl.advantage.name=grpo"}},
			{name: "rloo", sets: []string{"phases.rl.rl.advantage.name=rloo"}},
			{name: "reinforce++", sets: []string{"phases.rl.rl.advantage.name=reinforce++"}},
		},
		claims: []paperClaim{
			{"grpo", "ppo-gae", "at-wall", "DeepSeekMath (arXiv 2402.03300) §4.1: GRPO drops the critic's cost"},
			{"rloo", "ppo-gae", "at-eps", "Ahmadian et al. (arXiv 2402.14740): RLOO is more sample-efficient than PPO"},
			{"reinforce++", "ppo-gae", "at-wall", "REINFORCE++ (arXiv 2501.03262): PPO's stability without the critic's cost"},
		},
		figures: []string{"at-eps", "lift-eps", "at-wall", "lift-min", "wall", "s-step"},
	},
	"distill": distillBench, // paper_distill.go
	"gspo": {
		what:    "GSPO and SAPO vs PPO-clip on search (each loss at its paper's defaults)",
		presets: []string{"search"},
		arms: []paperArm{
			{name: "ppo-clip"},
			{name: "gspo", sets: []string{"phases.rl.rl.loss.policy=gspo"}},
			{name: "sapo", sets: []string{"phases.rl.rl.loss.policy=sapo"}},
		},
		claims: []paperClaim{
			{"gspo", "ppo-clip", "end", "GSPO (arXiv 2507.18071) Fig. 1: beats GRPO's token-level clipping"},
			{"sapo", "ppo-clip", "end", "SAPO (arXiv 2511.20347): beats GRPO's token-level clipping"},
			{"sapo", "gspo", "end", "SAPO: beats GSPO"},
		},
		figures: []string{"greedy", "entropy", "grad-max", "wall"},
	},
}

// The arms of issue 27: context folding on ledger (whose long histories outgrow max_context) and
// sub-agents on parts (whose items are independent parts).
var (
	foldArm     = "rollout.context={trigger: both, max_tokens: 400, keep_turns: 0, max_summary_tokens: 32}"
	delegateArm = "rollout.delegate={max_depth: 1, max_per_turn: 4, max_tokens: 384, reward: own, tools: [lookup]}"
	// partsLatency is the simulated latency of parts' lookups in both delegation arms: each of
	// the single agent's steps waits it, and each sub-agent turn that looks up (in parallel with
	// its siblings).
	partsLatency = "phases.rl.envs.0.latency={dist: lognormal, median: 50ms, p99_over_p50: 5, max: 1s}"
)

func init() {
	paperBenches["folding"] = paperBench{
		what:    "context folding as an action (fold tool, and the scaffold's request past 400 tokens) vs truncation at max_context, on ledger",
		presets: []string{"ledger"},
		arms:    []paperArm{{name: "fold", sets: []string{foldArm}, scaffold: true}, {name: "truncate"}},
		claims: []paperClaim{
			{"fold", "truncate", "end", "context management (MiniMax, Kimi K2.5; issue 27): folding beats truncation where the history outgrows the context"},
		},
		figures: []string{"greedy", "tokens", "wall"},
	}
	paperBenches["delegation"] = paperBench{
		what:    "parallel sub-agents (delegate tool, sub-episodes trained with their graded answers) vs a single agent, on parts whose lookups wait a simulated latency (lognormal, median 50ms)",
		presets: []string{"parts"},
		both:    []string{partsLatency},
		arms:    []paperArm{{name: "delegate", sets: []string{delegateArm}, scaffold: true}, {name: "single"}},
		claims: []paperClaim{
			{"delegate", "single", "end", "PARL / Agent Swarm (Kimi K2.5): parallel sub-agents raise success"},
			{"delegate", "single", "critical", "PARL: fewer sequential model calls on the critical path"},
			{"delegate", "single", "ep-wall", "PARL: parallel sub-agents cut an episode's wall time under tool latency"},
		},
		figures: []string{"greedy", "critical", "ep-wall", "wall"},
	}
}

// paperAliases are other names of comparisons: ppo-gae, the estimators comparison's first name.
var paperAliases = map[string]string{"ppo-gae": "estimators"}

// PaperNames lists the comparisons `agentrl bench paper` runs.
func PaperNames() []string {
	names := make([]string, 0, len(paperBenches))
	for n := range paperBenches {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// paperRun is one arm at one seed: its held-out evaluations (step 0, the supervised checkpoint,
// first), the steps that trained, RL wall time and episodes sampled.
type paperRun struct {
	arm     string
	seed    uint64
	points  []evalPoint
	trained []stepPoint
	wall    float64
	steps   int
	sampled float64
	// episodeWall is the mean wall seconds of a training episode, sub-episodes included
	// (delegating runs only).
	episodeWall float64
}

// paperPlan is a comparison made ready to run: its arms, seeds, steps and starting checkpoints.
type paperPlan struct {
	name     string // the bench's, as asked
	b        paperBench
	arms     []paperArm
	presets  []string // the presets compared on (--presets, else the comparison's)
	seeds    []uint64
	inits    map[string]string // supervised checkpoint by preset (by sftKey for a scaffold arm)
	teachers map[string]string // RL-trained teacher by preset (paper_distill.go)
}

// Paper runs the comparison o.Name: for each of its presets, every selected arm at every seed
// trains that preset's RL phase from one supervised checkpoint (of the arm's preset, trained
// first unless o.Init gives it), with checkpoints every o.Every steps evaluated on held-out tasks
// after the arm has run, so evaluation takes no RL time. It prints per-seed and summary tables
// (mean ± 95% interval over seeds), whether each ordering its papers report reproduced (from the
// paired differences' intervals), and draws the curves as SVG.
func Paper(ctx context.Context, w io.Writer, o PaperOptions) error {
	if o.Name == stagesName {
		return paperStages(ctx, w, o) // paper_stages.go
	}
	pl, err := planPaper(o)
	if err != nil {
		return err
	}
	out := w
	if o.Quiet {
		out = nil
	}
	fmt.Fprintf(w, "bench paper %s: %s; arms %s, seeds %s\n", pl.name, pl.b.what, strings.Join(armNames(pl.arms), ", "), o.Seeds)
	own := ""
	for _, a := range pl.arms {
		if a.scaffold {
			own += fmt.Sprintf(" (the %s arm from its own, trained and evaluated under its settings)", a.name)
		}
	}
	fmt.Fprintf(w, "every arm: its preset's RL phase from one supervised checkpoint per preset (seed 1)%s; all runs one after another in this process on the same cores; the arms differ only in: %s\n",
		own, describeArms(pl.arms))
	if both := append(slices.Clone(pl.b.both), o.Set...); len(both) > 0 {
		fmt.Fprintf(w, "every arm (and, for --set, every supervised phase) also: %s\n", strings.Join(both, " "))
	}
	for _, preset := range pl.presets {
		if err := paperComparison(ctx, w, out, o, pl, preset); err != nil {
			return err
		}
	}
	return nil
}

// planPaper checks o and every arm's configuration before anything trains.
func planPaper(o PaperOptions) (*paperPlan, error) {
	name := o.Name
	if a, ok := paperAliases[name]; ok {
		name = a
	}
	b, ok := paperBenches[name]
	if !ok {
		return nil, fmt.Errorf("bench paper: unknown comparison %q (known: %s, %s)", o.Name, strings.Join(PaperNames(), ", "), stagesName)
	}
	pl := &paperPlan{name: o.Name, b: b}
	if o.Every < 1 || o.Steps < 0 || o.SFTSteps < 0 || o.Tasks < 0 || o.Samples < 0 || o.TeacherSteps < 0 {
		return nil, fmt.Errorf("bench paper %s: need every >= 1 and steps, sft-steps, teacher-steps, tasks and samples >= 0", o.Name)
	}
	if (o.Teacher != "" || o.TeacherInit != "" || o.TeacherSteps != 0) && !slices.ContainsFunc(b.arms, func(a paperArm) bool { return a.distill != "" }) {
		return nil, fmt.Errorf("bench paper %s: --teacher, --teacher-init and --teacher-steps are the distill comparison's; %s has no teacher", o.Name, o.Name)
	}
	if o.Teacher != "" && (o.TeacherInit != "" || o.TeacherSteps != 0) {
		return nil, fmt.Errorf("bench paper %s: --teacher names a trained teacher; --teacher-init and --teacher-steps train one (give one or the other)", o.Name)
	}
	if o.Arms == "" {
		pl.arms = b.arms
	}
	for _, a := range splitList(o.Arms) {
		i := slices.IndexFunc(b.arms, func(x paperArm) bool { return x.name == a })
		if i < 0 {
			return nil, fmt.Errorf("bench paper %s: unknown arm %q (known: %s)", o.Name, a, strings.Join(armNames(b.arms), ", "))
		}
		pl.arms = append(pl.arms, b.arms[i])
	}
	for _, s := range splitList(o.Seeds) {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bench paper %s: bad seed %q", o.Name, s)
		}
		pl.seeds = append(pl.seeds, v)
	}
	if len(pl.arms) == 0 || len(pl.seeds) == 0 {
		return nil, fmt.Errorf("bench paper %s: need at least one arm and one seed", o.Name)
	}
	pl.presets = b.presets
	if o.Presets != "" {
		pl.presets = nil
	}
	for _, p := range splitList(o.Presets) {
		if !slices.Contains(b.presets, p) {
			return nil, fmt.Errorf("bench paper %s: it compares on %s, not %q", o.Name, strings.Join(b.presets, ", "), p)
		}
		if !slices.Contains(pl.presets, p) {
			pl.presets = append(pl.presets, p)
		}
	}
	var presets []string // every supervised checkpoint the runs start from (sftKey)
	for _, p := range pl.presets {
		for _, a := range pl.arms {
			if k := sftKey(cmp.Or(a.preset, p), a); !slices.Contains(presets, k) {
				presets = append(presets, k)
			}
		}
	}
	var err error
	if pl.inits, err = parseInits(o.Init, presets); err != nil {
		return nil, fmt.Errorf("bench paper %s: %w", o.Name, err)
	}
	for _, p := range pl.presets {
		steps, err := paperSteps(o, p)
		if err != nil {
			return nil, err
		}
		if steps%o.Every != 0 {
			return nil, fmt.Errorf("bench paper %s: --every %d must divide the %d RL steps on %s", o.Name, o.Every, steps, p)
		}
		for _, a := range pl.arms {
			if _, err := config.Load(o.Envs, cmp.Or(a.preset, p), "", paperSets(o, pl, p, a, "", "", pl.seeds[0], steps)); err != nil {
				return nil, fmt.Errorf("arm %s on %s: %w", a.name, p, err)
			}
		}
	}
	return pl, nil
}

// paperComparison runs every arm at every seed on preset and reports them.
func paperComparison(ctx context.Context, w, out io.Writer, o PaperOptions, pl *paperPlan, preset string) error {
	steps, _ := paperSteps(o, preset)
	tasks, samples, err := paperEval(o, preset)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n== %s on %s: RL %d steps per arm, held-out evaluation every %d steps on %d tasks × %d samples ==\n", pl.name, preset, steps, o.Every, tasks, samples)
	type key struct {
		init string // the supervised checkpoint
		arm  string // the scaffold arm evaluated from it ("" for the preset's scaffold)
		seed uint64
	}
	base := map[key]evalPoint{}
	var runs []*paperRun
	for _, seed := range pl.seeds {
		for _, a := range pl.arms {
			ap := cmp.Or(a.preset, preset)
			arm := rlArm{envs: o.Envs, preset: ap, sets: o.Set, steps: steps, every: o.Every, tasks: tasks, samples: samples, terminal: o.Terminal}
			bk := key{seed: seed}
			if a.scaffold {
				arm.sets, bk.arm = append(slices.Clone(a.sets), o.Set...), a.name
			}
			init, err := pl.init(ctx, w, out, o, ap, a)
			if err != nil {
				return err
			}
			bk.init = init
			b, ok := base[bk]
			if !ok {
				if b, err = evalCheckpoint(ctx, init, seed, arm); err != nil {
					return err
				}
				base[bk] = b
			}
			teacher, err := pl.teacher(ctx, w, out, o, a, arm, preset, init, steps) // paper_distill.go
			if err != nil {
				return err
			}
			r, err := trainRLArm(ctx, out, arm, paperSets(o, pl, preset, a, init, teacher, seed, steps), seed)
			if err != nil {
				return fmt.Errorf("arm %s on %s seed %d: %w", a.name, preset, seed, err)
			}
			run := &paperRun{arm: a.name, seed: seed, points: append([]evalPoint{b}, r.points...), trained: r.trainedAt,
				wall: r.wall, steps: r.stepsTaken, sampled: r.episodes, episodeWall: r.episodeWall}
			runs = append(runs, run)
			fmt.Fprintf(w, "done: %s arm %s seed %d: RL wall %.1fs, held-out pass@1 %.1f%% -> %.1f%%\n", preset, a.name, seed, run.wall,
				100*run.points[0].pass1, 100*run.points[len(run.points)-1].pass1)
		}
	}
	arms := armNames(pl.arms)
	printPaper(w, pl.b, arms, runs)
	svg := o.SVG
	if svg == "" {
		svg = filepath.Join(o.RunsDir, "bench-paper-"+pl.name+".svg")
	}
	if len(pl.b.presets) > 1 {
		svg = strings.TrimSuffix(svg, ".svg") + "-" + preset + ".svg"
	}
	title := fmt.Sprintf("bench paper %s on %s, seeds %s", pl.name, preset, o.Seeds)
	if err := writePaperSVG(svg, title, arms, paperPanels(pl.b, arms, runs)); err != nil {
		return err
	}
	fmt.Fprintf(w, "\ncurves: %s\n", svg)
	return nil
}

// init is the supervised checkpoint arm a starts from on preset: given, or trained once (seed
// 1) and reused; a scaffold arm's is its own, trained with its sets (sftKey).
func (pl *paperPlan) init(ctx context.Context, w, out io.Writer, o PaperOptions, preset string, a paperArm) (string, error) {
	k := sftKey(preset, a)
	if dir, ok := pl.inits[k]; ok {
		return dir, nil
	}
	sets := o.Set
	if a.scaffold {
		sets = append(slices.Clone(a.sets), o.Set...)
	}
	t0 := time.Now()
	dir, err := supervisedCheckpoint(ctx, out, sftRun{envs: o.Envs, runsDir: o.RunsDir, name: "bench-paper-sft-" + k, preset: preset,
		steps: o.SFTSteps, seed: 1, sets: sets, terminal: o.Terminal})
	if err != nil {
		return "", err
	}
	fmt.Fprintf(w, "supervised checkpoint of %s: %s (%s)\n", k, dir, time.Since(t0).Round(time.Second))
	pl.inits[k] = dir
	return dir, nil
}

// sftKey names the supervised checkpoint arm a starts from on preset: the preset's, or for a
// scaffold arm PRESET-ARM (its own; --init gives it as PRESET-ARM=DIR).
func sftKey(preset string, a paperArm) string {
	if a.scaffold {
		return preset + "-" + a.name
	}
	return preset
}

// parseInits reads --init: one directory when the runs start from one preset's checkpoint, or
// PRESET=DIR pairs; presets not given are trained.
func parseInits(s string, presets []string) (map[string]string, error) {
	inits := map[string]string{}
	items := splitList(s)
	if len(items) == 1 && !strings.Contains(items[0], "=") {
		if len(presets) != 1 {
			return nil, fmt.Errorf("--init: the runs start from checkpoints of %s: give PRESET=DIR for each", strings.Join(presets, ", "))
		}
		inits[presets[0]] = items[0]
		return inits, nil
	}
	for _, it := range items {
		p, dir, ok := strings.Cut(it, "=")
		if !ok || dir == "" || !slices.Contains(presets, p) {
			return nil, fmt.Errorf("--init %q: want PRESET=DIR with PRESET one of %s", it, strings.Join(presets, ", "))
		}
		inits[p] = dir
	}
	return inits, nil
}

// paperSteps is the RL steps of the arms on preset: o.Steps, or the preset's.
func paperSteps(o PaperOptions, preset string) (int, error) {
	if o.Steps > 0 {
		return o.Steps, nil
	}
	c, err := config.Preset(preset)
	if err != nil {
		return 0, err
	}
	return c.Phases[len(c.Phases)-1].Steps, nil
}

// paperEval is the held-out evaluation's tasks and samples on preset: o's, or the preset's.
func paperEval(o PaperOptions, preset string) (tasks, samples int, err error) {
	c, err := config.Preset(preset)
	if err != nil {
		return 0, 0, err
	}
	return cmp.Or(o.Tasks, c.Eval.Tasks), cmp.Or(o.Samples, c.Eval.Samples), nil
}

// paperSets are the overrides of arm a on preset at seed, starting from init and distilling from
// teacher (both "" only to validate before anything trains): the run's name and seed, the steps
// and the checkpoints to evaluate, then the bench's settings of every arm, the arm's switch,
// --set, and the arm's settings after it.
func paperSets(o PaperOptions, pl *paperPlan, preset string, a paperArm, init, teacher string, seed uint64, steps int) []string {
	sets := []string{
		"runs_dir=" + o.RunsDir, fmt.Sprintf("name=bench-paper-%s-%s-%s-seed%d", pl.name, preset, strings.ReplaceAll(a.name, "+", "p"), seed),
		fmt.Sprintf("seed=%d", seed), fmt.Sprintf("phases.rl.steps=%d", steps),
		fmt.Sprintf("checkpoint.every=%d", o.Every), "checkpoint.keep=100000", "eval.tasks=8", "eval.samples=1", "eval.every=0",
	}
	if o.Steps > 0 {
		// The preset's learning-rate warmup, capped by a shorter phase.
		if c, err := config.Preset(cmp.Or(a.preset, preset)); err == nil {
			sets = append(sets, fmt.Sprintf("phases.rl.optim.warmup=%d", min(c.Phases[len(c.Phases)-1].Optim.Warmup, steps)))
		}
	}
	if init != "" {
		sets = append(sets, "init="+init)
	}
	sets = append(append(sets, pl.b.both...), a.sets...)
	if a.distill != "" {
		sets = append(sets, distillSet(a, teacher))
	}
	return append(append(sets, o.Set...), a.after...)
}

func armNames(arms []paperArm) []string {
	names := make([]string, len(arms))
	for i, a := range arms {
		names[i] = a.name
	}
	return names
}

// describeArms says what sets each arm apart.
func describeArms(arms []paperArm) string {
	var parts []string
	for _, a := range arms {
		what := "the preset as it is"
		switch {
		case a.preset != "":
			what = "the " + a.preset + " preset"
		case len(a.sets) > 0 || a.distill != "":
			parts := append(slices.Clone(a.sets), a.after...)
			if a.distill != "" {
				parts = append(parts, fmt.Sprintf(a.distill, "<the RL teacher>"))
			}
			what = strings.Join(parts, " ")
		}
		parts = append(parts, a.name+" = "+what)
	}
	return strings.Join(parts, "; ")
}
