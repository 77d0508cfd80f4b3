package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/model"
)

// PrecisionOptions says what Precision runs; `agentrl bench precision` documents each field.
type PrecisionOptions struct {
	Envs     *env.Registry
	RunsDir  string   // where the supervised checkpoint and the arms' runs go
	Init     string   // supervised checkpoint to start every arm's RL from ("" = train one first)
	SFTSteps int      // steps of the supervised phase when Init is empty
	Arms     string   // comma-separated arms (PrecisionArms), the first the baseline of the differences
	Seeds    string   // comma-separated RL seeds, one run per arm each
	Steps    int      // RL steps per arm
	Every    int      // RL steps between the checkpoints evaluated on held-out tasks
	Tasks    int      // held-out tasks per evaluation
	Samples  int      // samples per task for the sampled pass@1
	Set      []string // further overrides for both arms
	Quiet    bool
	Terminal bool
}

// PrecisionArms are the arms Precision knows: the rollout precision each samples in.
var PrecisionArms = map[string]model.DecodePrecision{
	"f32":          {},
	"bf16":         {Weights: model.BF16, KVCache: model.BF16},
	"bf16-weights": {Weights: model.BF16},
	"bf16-kv":      {KVCache: model.BF16},
}

// precisionCorrection is every arm's importance correction (token-level truncated IS, cap 2):
// rollout.precision bf16 requires one, and with f32 sampling the weights are 1 up to rounding,
// so the arms differ in the sampling precision alone.
var precisionCorrection = []string{"phases.rl.rl.loss.correction.level=token", "phases.rl.rl.loss.correction.cap=2"}

// Precision measures what sampling RL episodes in bfloat16 (rollout.precision: bf16 weights, KV
// cache or both) costs in learning and gains in speed on calc: for each seed it trains the calc
// preset's RL phase once per arm from the same supervised checkpoint, each arm sampling in its
// precision with the same importance correction, and prints per arm the held-out success after
// the same number of steps, the behaviour-vs-learner KL and importance-weight spread the steps
// measured, and the wall seconds spent sampling, each over the seeds with its 95% interval, and
// each arm's paired difference from the first. Checkpoints are evaluated on held-out tasks after
// each run, in f32 (evaluation measures the learned weights), so evaluation takes no RL time.
func Precision(ctx context.Context, w io.Writer, o PrecisionOptions) error {
	if o.Steps < 1 || o.Every < 1 || o.Every > o.Steps || o.Steps%o.Every != 0 {
		return fmt.Errorf("bench precision: need steps >= 1 and every in [1, steps] dividing steps")
	}
	arms := splitList(o.Arms)
	if len(arms) < 2 {
		return fmt.Errorf("bench precision: need at least two arms, the first the baseline")
	}
	for _, a := range arms {
		if _, ok := PrecisionArms[a]; !ok {
			return fmt.Errorf("bench precision: unknown arm %q (known: f32, bf16, bf16-weights, bf16-kv)", a)
		}
	}
	var seeds []uint64
	for _, s := range splitList(o.Seeds) {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("bench precision: bad seed %q", s)
		}
		seeds = append(seeds, v)
	}
	if len(seeds) == 0 {
		return fmt.Errorf("bench precision: need at least one seed")
	}
	// Both arms' configurations are checked before anything trains.
	for _, a := range arms {
		if _, err := config.Load(o.Envs, "calc", "", precisionSets(o, "", a, seeds[0])); err != nil {
			return fmt.Errorf("arm %s: %w", a, err)
		}
	}
	out := w
	if o.Quiet {
		out = nil
	}
	fmt.Fprintf(w, "bench precision: calc, RL %d steps per arm from one supervised checkpoint, seeds %s; held-out evaluation (f32) every %d steps on %d tasks × %d samples\n",
		o.Steps, o.Seeds, o.Every, o.Tasks, o.Samples)
	for _, a := range arms {
		fmt.Fprintf(w, "arm %s: samples with %s\n", a, PrecisionArms[a])
	}
	fmt.Fprintf(w, "every arm: the calc preset's RL phase with the same importance correction (%s); only the sampling precision differs; the arms run one after another in this process on the same cores\n",
		strings.Join(precisionCorrection, ", "))
	init := o.Init
	if init == "" {
		t0 := time.Now()
		var err error
		if init, err = supervisedCheckpoint(ctx, out, sftRun{envs: o.Envs, runsDir: o.RunsDir, name: "bench-precision-sft", preset: "calc", steps: o.SFTSteps, seed: 1, sets: o.Set, terminal: o.Terminal}); err != nil {
			return err
		}
		fmt.Fprintf(w, "supervised checkpoint: %s (%d SFT steps, %s)\n", init, o.SFTSteps, time.Since(t0).Round(time.Second))
	}
	ev := rlArm{envs: o.Envs, preset: "calc", sets: o.Set, steps: o.Steps, every: o.Every, tasks: o.Tasks, samples: o.Samples, terminal: o.Terminal}
	var runs []*asyncArm
	for _, seed := range seeds {
		base, err := evalCheckpoint(ctx, init, seed, ev)
		if err != nil {
			return err
		}
		for _, arm := range arms {
			a, err := trainRLArm(ctx, out, ev, precisionSets(o, init, arm, seed), seed)
			if err != nil {
				return fmt.Errorf("arm %s seed %d: %w", arm, seed, err)
			}
			a.points = append([]evalPoint{{pass1: base.pass1, greedy: base.greedy}}, a.points...)
			a.arm, a.seed = arm, seed
			runs = append(runs, a)
			fmt.Fprintf(w, "done: %s seed %d: RL wall %.1fs, sampling %.1fs, held-out pass@1 %.1f%% -> %.1f%%, behaviour KL %.2e per token (mean over steps)\n",
				arm, seed, a.wall, a.sampleWall, 100*a.points[0].pass1, 100*a.points[len(a.points)-1].pass1, a.shift.klMean)
		}
	}
	printPrecision(w, o, arms, runs)
	return nil
}

// precisionSets are the overrides of one arm at one seed.
func precisionSets(o PrecisionOptions, init, arm string, seed uint64) []string {
	sets := []string{
		"runs_dir=" + o.RunsDir, fmt.Sprintf("name=bench-precision-%s-seed%d", arm, seed), fmt.Sprintf("seed=%d", seed),
		fmt.Sprintf("phases.rl.steps=%d", o.Steps), fmt.Sprintf("phases.rl.optim.warmup=%d", min(5, o.Steps)),
		fmt.Sprintf("checkpoint.every=%d", o.Every), "checkpoint.keep=100000", "eval.tasks=8", "eval.samples=1", "eval.every=0",
	}
	sets = append(sets, precisionCorrection...)
	if p := PrecisionArms[arm]; !p.Exact() {
		if p.Weights != "" {
			sets = append(sets, "rollout.precision.weights="+string(p.Weights))
		}
		if p.KVCache != "" {
			sets = append(sets, "rollout.precision.kv_cache="+string(p.KVCache))
		}
	}
	if init != "" {
		sets = append(sets, "init="+init)
	}
	return append(sets, o.Set...)
}

// precisionFigure is one figure of a run, as the table prints it.
type precisionFigure struct {
	name  string
	get   func(*asyncArm) float64
	scale float64
	prec  int
	unit  string
}

func printPrecision(w io.Writer, o PrecisionOptions, arms []string, runs []*asyncArm) {
	last := func(r *asyncArm) evalPoint { return r.points[len(r.points)-1] }
	figures := []precisionFigure{
		{"held-out pass@1 sampled, start", func(r *asyncArm) float64 { return r.points[0].pass1 }, 100, 1, "%"},
		{fmt.Sprintf("held-out pass@1 sampled after %d steps", o.Steps), func(r *asyncArm) float64 { return last(r).pass1 }, 100, 1, "%"},
		{fmt.Sprintf("held-out pass@1 greedy after %d steps", o.Steps), func(r *asyncArm) float64 { return last(r).greedy }, 100, 1, "%"},
		{"behaviour KL per token, mean over steps (×1e-6)", func(r *asyncArm) float64 { return r.shift.klMean }, 1e6, 3, ""},
		{"behaviour KL per token, largest step (×1e-6)", func(r *asyncArm) float64 { return r.shift.klMax }, 1e6, 3, ""},
		{"IS weight std, mean over steps (×1e-3)", func(r *asyncArm) float64 { return r.shift.isStd }, 1e3, 3, ""},
		{"IS weight, largest", func(r *asyncArm) float64 { return r.shift.isMax }, 1, 4, ""},
		{"IS weight ESS, mean over steps", func(r *asyncArm) float64 { return r.shift.essMean }, 1, 6, ""},
		{"IS weight ESS, smallest step", func(r *asyncArm) float64 { return r.shift.essMin }, 1, 6, ""},
		{"sampling wall seconds per step (generation + environment)", func(r *asyncArm) float64 { return r.sampleWall / float64(max(r.stepsTaken, 1)) }, 1, 3, "s"},
		{"RL wall seconds", func(r *asyncArm) float64 { return r.wall }, 1, 1, "s"},
	}
	base := arms[0]
	baseAt := map[uint64]*asyncArm{}
	for _, r := range runs {
		if r.arm == base {
			baseAt[r.seed] = r
		}
	}
	// each is f of every run of arm, in seed order; paired is f of each of them against the
	// baseline's run at the same seed.
	each := func(arm string, f func(r *asyncArm) float64) []float64 {
		var v []float64
		for _, r := range runs {
			if r.arm == arm {
				v = append(v, f(r))
			}
		}
		return v
	}
	paired := func(arm string, f func(r, b *asyncArm) float64) []float64 {
		var v []float64
		for _, r := range runs {
			if b, ok := baseAt[r.seed]; ok && r.arm == arm {
				v = append(v, f(r, b))
			}
		}
		return v
	}
	fmt.Fprintf(w, "\nover %d seeds: mean ± half-width of the 95%% interval (Student's t); differences from %s paired by seed\n", len(baseAt), base)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "figure"
	for _, a := range arms {
		head += "\t" + a
	}
	for _, a := range arms[1:] {
		head += fmt.Sprintf("\t%s − %s", a, base)
	}
	fmt.Fprintln(tw, head)
	for _, f := range figures {
		row := f.name
		for _, a := range arms {
			row += "\t" + meanCI(each(a, f.get)).format(f.scale, f.prec, f.unit)
		}
		for _, a := range arms[1:] {
			row += "\t" + meanCI(paired(a, func(r, b *asyncArm) float64 { return f.get(r) - f.get(b) })).format(f.scale, f.prec, f.unit)
		}
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nsampling speed-up over %s in these runs (its sampling wall seconds over the arm's, paired by seed; calc's model is small enough for its weights to sit in the caches, where bfloat16 saves no memory traffic: `agentrl bench model` measures decoding alone at larger sizes):\n", base)
	for _, a := range arms[1:] {
		s := paired(a, func(r, b *asyncArm) float64 { return b.sampleWall / max(r.sampleWall, 1e-9) })
		fmt.Fprintf(w, "  %s: %s×\n", a, meanCI(s).format(1, 2, ""))
	}
	fmt.Fprintf(w, "\nheld-out sampled pass@1 (greedy) at each evaluation:\n")
	for _, r := range runs {
		var cells []string
		for _, p := range r.points {
			cells = append(cells, fmt.Sprintf("s%d %.1f%% (%.1f%%)", p.step, 100*p.pass1, 100*p.greedy))
		}
		fmt.Fprintf(w, "  %s seed %d: %s\n", r.arm, r.seed, strings.Join(cells, " | "))
	}
}
