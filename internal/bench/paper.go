package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/pipeline"
)

// PaperOptions says what a `bench paper` comparison runs; `agentrl bench paper` documents each
// field.
type PaperOptions struct {
	Envs     *env.Registry
	RunsDir  string   // where the supervised checkpoint and the arms' runs go
	Init     string   // supervised checkpoint to start every arm's RL from ("" = train one first)
	SFTSteps int      // steps of the supervised phase when Init is empty
	Arms     string   // comma-separated arm names
	Seeds    string   // comma-separated RL seeds
	Steps    int      // RL steps per arm
	Every    int      // RL steps between the checkpoints evaluated on held-out tasks
	Tasks    int      // held-out tasks per evaluation
	Samples  int      // samples per task for the sampled pass@1
	Set      []string // further overrides for every arm
	SVG      string   // where to draw the curves ("" = <RunsDir>/bench-paper-ppo-gae.svg)
	Quiet    bool
	Terminal bool
}

// ppoGAEArms are the arms of issue 17's ordering 5 and the estimator each selects. Setting
// rl.advantage.name through the configuration's override gives each estimator its defaults, and
// gae also the critic term (coef 0.5, clip 0.5) that trains its value head; nothing else differs.
var ppoGAEArms = map[string]string{
	"ppo-gae":     "gae",
	"grpo":        "grpo",
	"rloo":        "rloo",
	"reinforce++": "reinforce++",
}

// PPOGAEArms is the default arm list of PaperPPOGAE, in the order.
const PPOGAEArms = "ppo-gae,grpo,rloo,reinforce++"

// paperRun is one arm at one seed: its held-out evaluations (step 0, the supervised checkpoint,
// first) and RL wall time.
type paperRun struct {
	arm    string
	seed   uint64
	points []evalPoint
	wall   float64
	steps  int
}

// PaperPPOGAE compares PPO with GAE and a learned value against GRPO, RLOO and REINFORCE++ on
// calc (issue 17, ordering 5): held-out success per trained episode and per second of RL. Every
// arm starts RL from the same supervised checkpoint (Init, or one trained first) with the calc
// preset's RL phase, the same PPO-clip loss, engine, steps and seeds; only the advantage
// estimator differs, and PPO+GAE's critic term with it. Dynamic sampling is off in every arm (it
// drops the zero-variance groups a group-relative estimator cannot learn from, which a critic
// can), so every arm trains on every episode it samples. Checkpoints taken every Every steps are
// evaluated on held-out tasks after the arm has run, so evaluation takes no RL time.
func PaperPPOGAE(ctx context.Context, w io.Writer, o PaperOptions) error {
	if o.Steps < 1 || o.Every < 1 || o.Every > o.Steps || o.Steps%o.Every != 0 {
		return fmt.Errorf("bench paper ppo-gae: need steps >= 1 and every in [1, steps] dividing steps")
	}
	arms, seeds := splitList(o.Arms), splitList(o.Seeds)
	if len(arms) == 0 || len(seeds) == 0 {
		return fmt.Errorf("bench paper ppo-gae: need at least one arm and one seed")
	}
	for _, a := range arms {
		if _, ok := ppoGAEArms[a]; !ok {
			return fmt.Errorf("bench paper ppo-gae: unknown arm %q (known: %s)", a, PPOGAEArms)
		}
	}
	var seedVals []uint64
	for _, s := range seeds {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("bench paper ppo-gae: bad seed %q", s)
		}
		seedVals = append(seedVals, v)
	}
	// Every arm's configuration is checked before anything trains.
	for _, a := range arms {
		if _, err := pipeline.Load(o.Envs, "calc", "", paperSets(o, "", a, seedVals[0])); err != nil {
			return fmt.Errorf("arm %s: %w", a, err)
		}
	}
	out := w
	if o.Quiet {
		out = nil
	}
	fmt.Fprintf(w, "bench paper ppo-gae: calc, arms %s, seeds %s; RL %d steps per arm from one supervised checkpoint, held-out evaluation every %d steps on %d tasks × %d samples\n",
		strings.Join(arms, ", "), strings.Join(seeds, ", "), o.Steps, o.Every, o.Tasks, o.Samples)
	fmt.Fprintf(w, "every arm: the calc preset's RL phase (PPO-clip, token-mean, same optimizer, engine and steps) with only the advantage estimator changed (ppo-gae adds its critic term, rl.loss.critic coef 0.5 clip 0.5); dynamic sampling off in every arm; all arms run one after another in this process on the same cores\n")
	init := o.Init
	if init == "" {
		t0 := time.Now()
		var err error
		if init, err = supervisedCheckpoint(ctx, out, o.Envs, o.RunsDir, "bench-paper-sft", o.SFTSteps, o.Terminal); err != nil {
			return err
		}
		fmt.Fprintf(w, "supervised checkpoint: %s (%d SFT steps, %s)\n", init, o.SFTSteps, time.Since(t0).Round(time.Second))
	}
	ev := AsyncOptions{Envs: o.Envs, Tasks: o.Tasks, Samples: o.Samples}
	var runs []*paperRun
	for _, seed := range seedVals {
		base, err := evalCheckpoint(ctx, init, seed, ev)
		if err != nil {
			return err
		}
		for _, arm := range arms {
			r, err := runPaperArm(ctx, out, o, init, arm, seed)
			if err != nil {
				return fmt.Errorf("arm %s seed %d: %w", arm, seed, err)
			}
			r.points = append([]evalPoint{{pass1: base.pass1, greedy: base.greedy}}, r.points...)
			runs = append(runs, r)
			fmt.Fprintf(w, "done: arm %s seed %d: RL wall %.1fs, held-out pass@1 %.1f%% -> %.1f%%\n", arm, seed, r.wall, 100*r.points[0].pass1, 100*r.points[len(r.points)-1].pass1)
		}
	}
	printPaper(w, arms, runs)
	svg := o.SVG
	if svg == "" {
		svg = filepath.Join(o.RunsDir, "bench-paper-ppo-gae.svg")
	}
	title := fmt.Sprintf("calc: held-out pass@1 of %s from one supervised checkpoint, seeds %s", strings.Join(arms, ", "), strings.Join(seeds, ", "))
	if err := writePaperSVG(svg, title, arms, runs); err != nil {
		return err
	}
	fmt.Fprintf(w, "\ncurves: %s\n", svg)
	return nil
}

// paperSets are the overrides of one arm at one seed.
func paperSets(o PaperOptions, init, arm string, seed uint64) []string {
	sets := []string{
		"runs_dir=" + o.RunsDir, fmt.Sprintf("name=bench-paper-ppo-gae-%s-seed%d", strings.ReplaceAll(arm, "+", "p"), seed), fmt.Sprintf("seed=%d", seed),
		"phases.rl.rl.advantage.name=" + ppoGAEArms[arm], "phases.rl.rl.dynamic_sampling=null",
		fmt.Sprintf("phases.rl.steps=%d", o.Steps), fmt.Sprintf("checkpoint.every=%d", o.Every), "checkpoint.keep=100000",
		"eval.tasks=8", "eval.samples=1", "eval.every=0",
	}
	if init != "" {
		sets = append(sets, "init="+init)
	}
	return append(sets, o.Set...)
}

// runPaperArm runs one arm's RL phase from init and evaluates its checkpoints.
func runPaperArm(ctx context.Context, out io.Writer, o PaperOptions, init, arm string, seed uint64) (*paperRun, error) {
	a, err := trainRLArm(ctx, out, AsyncOptions{Envs: o.Envs, Terminal: o.Terminal, Steps: o.Steps, Every: o.Every, Tasks: o.Tasks, Samples: o.Samples},
		paperSets(o, init, arm, seed), seed)
	if err != nil {
		return nil, err
	}
	return &paperRun{arm: arm, seed: seed, wall: a.wall, steps: a.stepsTaken, points: a.points}, nil
}

// supervisedCheckpoint trains the calc preset's supervised phase alone, as run name under runsDir,
// and returns its last checkpoint.
func supervisedCheckpoint(ctx context.Context, out io.Writer, envs *env.Registry, runsDir, name string, steps int, terminal bool) (string, error) {
	cfg, err := pipeline.Load(envs, "calc", "", []string{"runs_dir=" + runsDir, "name=" + name,
		fmt.Sprintf("phases.sft.steps=%d", steps), "eval.tasks=8", "eval.samples=1"})
	if err != nil {
		return "", err
	}
	cfg.Phases = cfg.Phases[:1]
	run, err := pipeline.NewRun(cfg, pipeline.Options{Out: out, Terminal: terminal, Envs: envs})
	if err != nil {
		return "", err
	}
	sum, err := run.Train(ctx)
	if err != nil {
		return "", err
	}
	return filepath.Join(sum.Dir, "checkpoints", fmt.Sprintf("sft-p0.s%06d", steps)), nil
}

// pass1AtWall is the held-out sampled pass@1 after t seconds of RL, interpolated linearly.
func pass1AtWall(ps []evalPoint, t float64) float64 {
	for i := 1; i < len(ps); i++ {
		if ps[i].wall >= t {
			q, p := ps[i-1], ps[i]
			if p.wall == q.wall {
				return p.pass1
			}
			return q.pass1 + (p.pass1-q.pass1)*(t-q.wall)/(p.wall-q.wall)
		}
	}
	return ps[len(ps)-1].pass1
}

// interval is a mean over seeds with the half-width of its 95% interval (NaN with one seed).
type interval struct{ mean, half float64 }

func meanCI(v []float64) interval {
	mean, half := ci95(v)
	return interval{mean, half}
}

// format prints the interval scaled by k with prec decimals: "m ± h", or "m" with one seed.
func (c interval) format(k float64, prec int, unit string) string {
	if math.IsNaN(c.half) {
		return strconv.FormatFloat(k*c.mean, 'f', prec, 64) + unit
	}
	return fmt.Sprintf("%.*f%s ± %.*f", prec, k*c.mean, unit, prec, k*c.half)
}

func (c interval) lo() float64 { return c.mean - c.half }
func (c interval) hi() float64 { return c.mean + c.half }

// paperSummary is one arm's figures over its seeds.
type paperSummary struct {
	arm                           string
	n                             int
	start, end, atEps, atWall     interval
	perKEps, perMin, wall, secStp interval
}

// summarize computes every arm's figures. Sample efficiency is compared at the fewest episodes
// and the least RL wall time any run reached, so every arm is read inside its own curve.
func summarize(arms []string, runs []*paperRun) (sums []paperSummary, eqEps, eqWall float64) {
	eqEps, eqWall = math.Inf(1), math.Inf(1)
	for _, r := range runs {
		last := r.points[len(r.points)-1]
		eqEps, eqWall = min(eqEps, last.trained), min(eqWall, last.wall)
	}
	for _, arm := range arms {
		var start, end, atEps, atWall, perK, perMin, wall, secStep []float64
		for _, r := range runs {
			if r.arm != arm {
				continue
			}
			p0, last := r.points[0], r.points[len(r.points)-1]
			e, tw := pass1At(r.points, eqEps), pass1AtWall(r.points, eqWall)
			start, end = append(start, p0.pass1), append(end, last.pass1)
			atEps, atWall = append(atEps, e), append(atWall, tw)
			perK = append(perK, 1000*(e-p0.pass1)/eqEps)
			perMin = append(perMin, 60*(tw-p0.pass1)/eqWall)
			wall, secStep = append(wall, r.wall), append(secStep, r.wall/float64(max(r.steps, 1)))
		}
		if len(start) == 0 {
			continue
		}
		sums = append(sums, paperSummary{arm: arm, n: len(start), start: meanCI(start), end: meanCI(end), atEps: meanCI(atEps),
			atWall: meanCI(atWall), perKEps: meanCI(perK), perMin: meanCI(perMin), wall: meanCI(wall), secStp: meanCI(secStep)})
	}
	return sums, eqEps, eqWall
}

// ordering names the arms from best to worst by f, and says which neighbours' 95% intervals
// overlap (an ordering between them is not resolved at this many seeds).
func ordering(sums []paperSummary, f func(paperSummary) interval) string {
	s := slices.Clone(sums)
	slices.SortStableFunc(s, func(a, b paperSummary) int { return -cmpFloat(f(a).mean, f(b).mean) })
	var b strings.Builder
	for i, x := range s {
		if i > 0 {
			prev := f(s[i-1])
			if math.IsNaN(prev.half) || prev.lo() <= f(x).hi() {
				b.WriteString(" ≈ ")
			} else {
				b.WriteString(" > ")
			}
		}
		b.WriteString(x.arm)
	}
	return b.String()
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func printPaper(w io.Writer, arms []string, runs []*paperRun) {
	if len(runs) == 0 {
		return
	}
	sums, eqEps, eqWall := summarize(arms, runs)
	fmt.Fprintf(w, "\nheld-out sampled pass@1, mean ± 95%% interval over seeds (Student's t); wall = RL steps only (evaluation excluded)\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "arm\tseeds\tpass@1 start\tpass@1 end\tpass@1 at %.0f trained eps\tlift per 1k trained eps\tpass@1 at %.1fs RL\tlift per RL minute\tRL wall\ts/step\n", eqEps, eqWall)
	for _, s := range sums {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.arm, s.n, s.start.format(100, 1, "%"), s.end.format(100, 1, "%"),
			s.atEps.format(100, 1, "%"), s.perKEps.format(100, 2, " pt"), s.atWall.format(100, 1, "%"), s.perMin.format(100, 2, " pt"),
			s.wall.format(1, 0, "s"), s.secStp.format(1, 2, "s"))
	}
	tw.Flush()
	fmt.Fprintf(w, "\nordering per trained episode (pass@1 at %.0f episodes): %s\n", eqEps, ordering(sums, func(s paperSummary) interval { return s.atEps }))
	fmt.Fprintf(w, "ordering per second (pass@1 at %.1fs of RL):            %s\n", eqWall, ordering(sums, func(s paperSummary) interval { return s.atWall }))
	fmt.Fprintf(w, "(\">\": the 95%% intervals are apart; \"≈\": they overlap, so this many seeds do not resolve the order)\n")
	fmt.Fprintf(w, "\nheld-out sampled pass@1 (greedy) at each evaluation, with RL wall seconds and episodes trained:\n")
	for _, r := range runs {
		var cells []string
		for _, p := range r.points {
			cells = append(cells, fmt.Sprintf("s%d %.1f%% (%.1f%%) %.0fs %.0f", p.step, 100*p.pass1, 100*p.greedy, p.wall, p.trained))
		}
		fmt.Fprintf(w, "  %s seed %d: %s\n", r.arm, r.seed, strings.Join(cells, " | "))
	}
}
