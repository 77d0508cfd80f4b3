package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentrl/agentrl/env"
)

// AsyncOptions says what Async runs; `agentrl bench async` documents each field.
type AsyncOptions struct {
	Envs     *env.Registry
	RunsDir  string        // where the supervised checkpoint and the arms' runs go
	Init     string        // supervised checkpoint to start RL from ("" = train one first)
	SFTSteps int           // steps of the supervised phase when Init is empty
	Arms     string        // comma-separated: sync, or an η for async
	Tails    string        // comma-separated p99/p50 ratios of the step latency (1 = no tail)
	Dist     string        // lognormal or pareto
	Median   time.Duration // median step latency
	Max      time.Duration // cap on one step's latency (0: none)
	Seeds    string        // comma-separated RL seeds
	Steps    int           // RL steps per arm
	Every    int           // RL steps between held-out evaluations (checkpoints evaluated after the run)
	Tasks    int           // held-out tasks per evaluation
	Samples  int           // samples per task for the sampled pass@1
	Target   float64       // held-out sampled pass@1 whose wall time is the primary figure
	Set      []string      // further overrides for every arm
	Quiet    bool
	Terminal bool
}

// rlArm is how the async bench's arms train and are evaluated: calc's RL phase.
func (o AsyncOptions) rlArm() rlArm {
	return rlArm{envs: o.Envs, preset: "calc", steps: o.Steps, every: o.Every, tasks: o.Tasks, samples: o.Samples, terminal: o.Terminal}
}

// asyncArm is one run of the bench: an arm at one tail and seed, and what it measured.
type asyncArm struct {
	arm        string
	tail       float64
	seed       uint64
	points     []evalPoint // step 0 (the supervised checkpoint) first
	wall       float64     // RL wall time, evaluations excluded
	episodes   float64     // sampled
	trained    float64     // ≈ episodes in the groups trained on
	learnWait  float64     // seconds the learner waited for a batch
	cancelled  float64     // episodes cancelled in flight as too stale to train
	genWait    float64     // seconds the sampler waited on the staleness bound (async), or for the learner (sync)
	lagMean    float64
	lagMax     float64
	lagHist    map[int]int // steps by their largest version lag
	trainedAt  []stepPoint // the steps that trained, in order
	stale      float64     // episodes dropped past the staleness bound
	filtered   float64     // episodes in groups the filter dropped
	failed     float64     // episodes whose environment failed
	stepsTaken int
	sampleWall float64 // wall seconds the steps spent sampling their batches (time/generate_env_s)
	// episodeWall is the mean wall seconds of a training episode, its sub-episodes included
	// (time/episode_s, logged by delegating runs; 0 otherwise), weighted by episodes sampled.
	episodeWall float64
	shift       shiftSummary // the behaviour-vs-learner gap of the trained steps
}

// shiftSummary is the behaviour-vs-learner gap over the trained steps of a run, from the shift/…
// metrics each step logs (algo.MeasureShift).
type shiftSummary struct {
	steps           int
	klMean, klMax   float64 // per-token k3 KL(behaviour ‖ learner)
	isStd, isMax    float64 // the importance weights' std (mean over steps) and largest weight
	essMean, essMin float64 // normalised effective sample size: mean over steps, smallest
}

// add counts one trained step's metrics.
func (s *shiftSummary) add(num func(string) float64) {
	kl, ess := num("shift/behaviour_kl"), num("shift/is_ess")
	if s.steps == 0 || ess < s.essMin {
		s.essMin = ess
	}
	s.steps++
	s.klMean += kl
	s.klMax = max(s.klMax, kl)
	s.isStd += num("shift/is_std")
	s.isMax = max(s.isMax, num("shift/is_max"))
	s.essMean += ess
}

// finish turns the sums into means.
func (s *shiftSummary) finish() {
	if s.steps > 0 {
		n := float64(s.steps)
		s.klMean, s.isStd, s.essMean = s.klMean/n, s.isStd/n, s.essMean/n
	}
}

// evalPoint is one held-out evaluation of a checkpoint the arm saved.
type evalPoint struct {
	step    int
	wall    float64 // RL seconds to reach the step
	trained float64 // episodes trained on by then
	pass1   float64 // sampled
	greedy  float64
	tokens  float64 // the policy's tokens per greedy episode
	// critical is the model calls on a greedy episode's longest chain, sub-episodes included
	// (its turns when it does not delegate).
	critical float64
}

// stepPoint is what one RL step that trained measured of the policy and its update.
type stepPoint struct {
	step              int
	entropy, gradNorm float64
}

// Async compares synchronous RL with the asynchronous controller on calc whose environment
// steps wait a simulated heavy-tailed latency. Every arm starts RL from the same supervised
// checkpoint (Init, or one trained first); checkpoints taken every Every steps are evaluated on
// held-out tasks after the arm has run, so evaluation takes no time from either side, and wall
// time counts RL steps only.
func Async(ctx context.Context, w io.Writer, o AsyncOptions) error {
	if o.Steps < 1 || o.Every < 1 || o.Every > o.Steps {
		return fmt.Errorf("bench async: need steps >= 1 and 1 <= every <= steps")
	}
	arms, tails, seeds := splitList(o.Arms), splitList(o.Tails), splitList(o.Seeds)
	for _, a := range arms {
		if _, err := armAsyncSets(a); err != nil {
			return err
		}
	}
	var tailVals []float64
	for _, t := range tails {
		v, err := strconv.ParseFloat(t, 64)
		if err != nil {
			return fmt.Errorf("bench async: bad tail %q", t)
		}
		if err := (env.LatencyConfig{Dist: o.Dist, Median: o.Median, P99OverP50: v, Max: o.Max}).Validate(); err != nil {
			return fmt.Errorf("bench async: tail %v: %w", v, err)
		}
		tailVals = append(tailVals, v)
	}
	out := w
	if o.Quiet {
		out = nil
	}
	fmt.Fprintf(w, "bench async: calc, RL %d steps per arm from a supervised checkpoint, evaluated every %d steps on %d held-out tasks × %d samples; env step latency SIMULATED (%s, median %v, p99/p50 %s)\n",
		o.Steps, o.Every, o.Tasks, o.Samples, o.Dist, o.Median, o.Tails)
	fmt.Fprintf(w, "shrunk from the calc preset: RL %d steps per arm (the preset trains 100), held-out evaluations of %d tasks (the preset: 200), one supervised checkpoint shared by every arm and seed; every arm runs in this process on the same cores, with the same loss, filters and engine\n", o.Steps, o.Tasks)
	init := o.Init
	if init == "" {
		t0 := time.Now()
		var err error
		if init, err = trainSupervised(ctx, out, o); err != nil {
			return err
		}
		fmt.Fprintf(w, "supervised checkpoint: %s (%d SFT steps, %s)\n", init, o.SFTSteps, time.Since(t0).Round(time.Second))
	}
	var results []*asyncArm
	for _, s := range seeds {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("bench async: bad seed %q", s)
		}
		base, err := evalCheckpoint(ctx, init, seed, o.rlArm())
		if err != nil {
			return err
		}
		for _, tail := range tailVals {
			for _, arm := range arms {
				a, err := runAsyncArm(ctx, out, o, init, arm, tail, seed)
				if err != nil {
					return fmt.Errorf("arm %s tail %g seed %d: %w", arm, tail, seed, err)
				}
				a.points = append([]evalPoint{{pass1: base.pass1, greedy: base.greedy}}, a.points...)
				results = append(results, a)
				fmt.Fprintf(w, "done: arm %s tail %g seed %d: RL wall %.1fs, held-out pass@1 %.1f%% -> %.1f%%\n", arm, tail, seed, a.wall, 100*a.points[0].pass1, 100*a.points[len(a.points)-1].pass1)
			}
		}
	}
	printAsync(w, o, results)
	return nil
}

// trainSupervised trains the calc preset's supervised phase alone and returns its checkpoint.
func trainSupervised(ctx context.Context, out io.Writer, o AsyncOptions) (string, error) {
	return supervisedCheckpoint(ctx, out, sftRun{envs: o.Envs, runsDir: o.RunsDir, name: "bench-async-sft", preset: "calc", steps: o.SFTSteps, seed: 1, terminal: o.Terminal})
}

// armSets are the overrides of one arm. Every arm trains with the same loss (PPO with a
// token-level importance correction against the behaviour logprobs, which asynchronous training
// requires and which is the identity on on-policy data), filters and engine.
func armSets(o AsyncOptions, init, arm string, tail float64, seed uint64) []string {
	lat := fmt.Sprintf("{dist: %s, median: %s, p99_over_p50: %g", o.Dist, o.Median, tail)
	if o.Max > 0 {
		lat += ", max: " + o.Max.String()
	}
	lat += "}"
	sets := []string{
		"runs_dir=" + o.RunsDir, fmt.Sprintf("name=bench-async-%s-tail%g-seed%d", arm, tail, seed), fmt.Sprintf("seed=%d", seed), "init=" + init,
		fmt.Sprintf("phases.rl.steps=%d", o.Steps), "phases.rl.envs=[{name: calc, weight: 1, latency: " + lat + "}]",
		"phases.rl.rl.loss.correction.level=token", "phases.rl.rl.loss.correction.cap=2",
		fmt.Sprintf("checkpoint.every=%d", o.Every), "checkpoint.keep=100000", "eval.tasks=8", "eval.samples=1", "eval.every=0",
	}
	as, _ := armAsyncSets(arm) // Async checked every arm
	return append(append(sets, as...), o.Set...)
}

// armAsyncSets are the async overrides an arm names: "sync"; "overlap" (each step's batch sampled
// while the learner trains the step before: overlap mode, η = 1); "N" (continuous admission,
// η = N); "N-nopartial" (the same, weights switching only between completions).
func armAsyncSets(arm string) ([]string, error) {
	if arm == "sync" {
		return nil, nil
	}
	if arm == "overlap" {
		return []string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.async.mode=overlap"}, nil
	}
	eta, nopartial := strings.CutSuffix(arm, "-nopartial")
	if n, err := strconv.Atoi(eta); err != nil || n < 1 {
		return nil, fmt.Errorf("bench async: arm %q is none of sync, overlap, N or N-nopartial (N a max_staleness)", arm)
	}
	sets := []string{"phases.rl.rl.async.max_staleness=" + eta, "phases.rl.rl.async.mode=continuous"}
	if nopartial {
		sets = append(sets, "phases.rl.rl.async.partial_rollouts=false")
	}
	return sets, nil
}

// asyncArmName is how the tables name an arm.
func asyncArmName(arm string) string {
	switch {
	case arm == "sync":
		return "sync"
	case arm == "overlap":
		return "one-step overlap"
	case strings.HasSuffix(arm, "-nopartial"):
		return "async η=" + strings.TrimSuffix(arm, "-nopartial") + ", no partial rollouts"
	}
	return "async η=" + arm
}

// runAsyncArm runs one arm's RL phase, reads its metrics and evaluates its checkpoints.
func runAsyncArm(ctx context.Context, out io.Writer, o AsyncOptions, init, arm string, tail float64, seed uint64) (*asyncArm, error) {
	a, err := trainRLArm(ctx, out, o.rlArm(), armSets(o, init, arm, tail, seed), seed)
	if err != nil {
		return nil, err
	}
	a.arm, a.tail, a.seed = arm, tail, seed
	return a, nil
}

// readArmMetrics sums an RL run's metrics.jsonl, and gives per step the wall seconds and
// episodes trained up to it.
func readArmMetrics(dir string, groupSize int) (*asyncArm, map[int][2]float64, error) {
	f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	a := &asyncArm{lagHist: map[int]int{}}
	byStep := map[int][2]float64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	origin := math.NaN()
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, nil, err
		}
		if m["phase"] != "rl" {
			continue
		}
		num := func(k string) float64 { v, _ := m[k].(float64); return v }
		if math.IsNaN(origin) {
			// The RL phase starts when its first step starts waiting for its batch; what came
			// before (loading, the run's first evaluation) is not RL time.
			origin = num("time/elapsed_s") - num("time/step_s")
		}
		a.stepsTaken++
		a.wall = num("time/elapsed_s") - origin
		a.episodes += num("episodes/sampled")
		stale := num("async/dropped_stale")
		a.cancelled += num("async/cancelled_stale")
		trained := num("signal/groups_kept")*float64(groupSize) - stale
		a.trained += trained
		a.learnWait += num("time/learner_wait_s")
		if _, ok := m["time/learner_wait_s"]; !ok {
			a.learnWait += num("time/generate_env_s") // a synchronous learner waits for the whole sampling
			a.genWait += num("time/train_s")          // and sampling waits for the whole update
		}
		a.genWait += num("time/generator_wait_s")
		a.sampleWall += num("time/generate_env_s")
		a.episodeWall += num("time/episode_s") * num("episodes/sampled")
		if _, trainedStep := m["signal/effective_batch"]; trainedStep {
			a.shift.add(num)
		}
		lag := num("shift/version_lag_max")
		a.lagMean += num("shift/version_lag_mean")
		a.lagMax = max(a.lagMax, lag)
		a.lagHist[int(lag)]++
		a.stale += stale
		a.failed += num("episodes/failed")
		a.filtered += max(num("episodes/sampled")-stale-num("signal/groups_kept")*float64(groupSize), 0)
		byStep[int(num("step"))] = [2]float64{a.wall, a.trained}
		if _, ok := m["signal/effective_batch"]; ok {
			a.trainedAt = append(a.trainedAt, stepPoint{step: int(num("step")), entropy: num("explore/entropy"), gradNorm: num("signal/grad_norm")})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if a.stepsTaken == 0 {
		return nil, nil, fmt.Errorf("%s: no RL step in metrics.jsonl", dir)
	}
	a.lagMean /= float64(a.stepsTaken)
	if a.episodes > 0 {
		a.episodeWall /= a.episodes
	}
	a.shift.finish()
	return a, byStep, nil
}

// timeToTarget is the wall time at which the held-out sampled pass@1 first reaches target,
// interpolated linearly between the evaluations around it; ok is false when it never does.
func timeToTarget(ps []evalPoint, target float64) (float64, bool) {
	for i, p := range ps {
		if p.pass1 >= target {
			if i == 0 {
				return 0, true
			}
			q := ps[i-1]
			return q.wall + (p.wall-q.wall)*(target-q.pass1)/(p.pass1-q.pass1), true
		}
	}
	return 0, false
}

// pass1At is the held-out sampled pass@1 after n trained episodes, interpolated linearly.
func pass1At(ps []evalPoint, n float64) float64 {
	return pass1Along(ps, func(p evalPoint) float64 { return p.trained }, n)
}

// pass1Along is the held-out sampled pass@1 where x (episodes trained, RL seconds), which grows
// from evaluation to evaluation, reaches t, interpolated linearly; the last evaluation's beyond.
func pass1Along(ps []evalPoint, x func(evalPoint) float64, t float64) float64 {
	for i := 1; i < len(ps); i++ {
		if x(ps[i]) >= t {
			q, p := ps[i-1], ps[i]
			if x(p) == x(q) {
				return p.pass1
			}
			return q.pass1 + (p.pass1-q.pass1)*(t-x(q))/(x(p)-x(q))
		}
	}
	return ps[len(ps)-1].pass1
}

func printAsync(w io.Writer, o AsyncOptions, rs []*asyncArm) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nheld-out sampled pass@1 target %.0f%%; wall = RL steps only (evaluation excluded); step latency SIMULATED\n", 100*o.Target)
	// Sample efficiency is compared at the fewest episodes any arm trained on.
	equal := math.Inf(1)
	for _, a := range rs {
		equal = min(equal, a.points[len(a.points)-1].trained)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "tail p99/p50\tseed\tarm\ttime to target\tspeedup\tpass@1 at %.0f trained eps\tpass@1 start -> end\tRL wall\tepisodes/s\tlearner idle\tgenerator idle\tlag mean / max\tlag-max histogram\tdropped: stale / cancelled / filter / failed\n", equal)
	syncTime := map[string]float64{}
	for _, a := range rs {
		if t, ok := timeToTarget(a.points, o.Target); ok && a.arm == "sync" {
			syncTime[fmt.Sprint(a.tail, a.seed)] = t
		}
	}
	for _, a := range rs {
		ttt, speed := "not reached", "-"
		if t, ok := timeToTarget(a.points, o.Target); ok {
			ttt = fmt.Sprintf("%.0fs", t)
			if s, ok := syncTime[fmt.Sprint(a.tail, a.seed)]; ok && t > 0 {
				speed = fmt.Sprintf("%.2f×", s/t)
			}
		}
		var hist []string
		for _, k := range slices.Sorted(maps.Keys(a.lagHist)) {
			hist = append(hist, fmt.Sprintf("%d:%d", k, a.lagHist[k]))
		}
		name := asyncArmName(a.arm)
		fmt.Fprintf(tw, "%g\t%d\t%s\t%s\t%s\t%.1f%%\t%.1f%% -> %.1f%%\t%.1fs\t%.2f\t%.0f%%\t%.0f%%\t%.2f / %.0f\t%s\t%.0f / %.0f / %.0f / %.0f\n",
			a.tail, a.seed, name, ttt, speed, 100*pass1At(a.points, equal), 100*a.points[0].pass1, 100*a.points[len(a.points)-1].pass1,
			a.wall, a.episodes/a.wall, 100*a.learnWait/a.wall, 100*a.genWait/a.wall, a.lagMean, a.lagMax, strings.Join(hist, " "),
			a.stale, a.cancelled, a.filtered, a.failed)
	}
	tw.Flush()
	printAsyncSeeds(w, o, rs, syncTime)
	fmt.Fprintf(w, "\nheld-out sampled pass@1 (greedy) at each evaluation, with RL wall seconds and ≈ episodes trained:\n")
	for _, a := range rs {
		var cells []string
		for _, p := range a.points {
			cells = append(cells, fmt.Sprintf("s%d %.1f%% (%.1f%%) %.0fs %.0f", p.step, 100*p.pass1, 100*p.greedy, p.wall, p.trained))
		}
		fmt.Fprintf(w, "  tail %g seed %d %s: %s\n", a.tail, a.seed, asyncArmName(a.arm), strings.Join(cells, " | "))
	}
}

// printAsyncSeeds summarizes, for every tail and arm run with two or more seeds, the mean and 95%
// interval over seeds of the time to target, the speedup over sync (each seed against the sync
// arm of the same seed) and the final held-out pass@1 and its difference from sync's.
func printAsyncSeeds(w io.Writer, o AsyncOptions, rs []*asyncArm, syncTime map[string]float64) {
	type key struct {
		tail float64
		arm  string
	}
	var order []key
	by := map[key][]*asyncArm{}
	syncFinal := map[string]float64{}
	for _, a := range rs {
		k := key{a.tail, a.arm}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], a)
		if a.arm == "sync" {
			syncFinal[fmt.Sprint(a.tail, a.seed)] = a.points[len(a.points)-1].pass1
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := false
	for _, k := range order {
		as := by[k]
		if len(as) < 2 {
			continue
		}
		if !header {
			fmt.Fprintf(w, "\nover seeds (mean ± 95%% interval, Student t):\n")
			fmt.Fprintf(tw, "tail p99/p50\tarm\tseeds\ttime to target\tspeedup over sync\tfinal pass@1\tfinal pass@1 − sync's\n")
			header = true
		}
		var ttt, speed, final, diff []float64
		missed := 0
		for _, a := range as {
			fin := a.points[len(a.points)-1].pass1
			final = append(final, 100*fin)
			if s, ok := syncFinal[fmt.Sprint(a.tail, a.seed)]; ok {
				diff = append(diff, 100*(fin-s))
			}
			t, ok := timeToTarget(a.points, o.Target)
			if !ok {
				missed++
				continue
			}
			ttt = append(ttt, t)
			if s, ok := syncTime[fmt.Sprint(a.tail, a.seed)]; ok && t > 0 {
				speed = append(speed, s/t)
			}
		}
		miss := ""
		if missed > 0 {
			miss = fmt.Sprintf(" (%d did not reach it)", missed)
		}
		fmt.Fprintf(tw, "%g\t%s\t%d\t%s s%s\t%s×\t%s%%\t%s points\n", k.tail, asyncArmName(k.arm), len(as),
			meanInterval(ttt, "%.0f"), miss, meanInterval(speed, "%.2f"), meanInterval(final, "%.1f"), meanInterval(diff, "%+.1f"))
	}
	tw.Flush()
}

// meanInterval formats the mean of xs and the half-width of its 95% Student-t interval ("-" for
// none, the value alone for one).
func meanInterval(xs []float64, format string) string {
	mean, half := ci95(xs)
	switch {
	case len(xs) == 0:
		return "-"
	case math.IsNaN(half):
		return fmt.Sprintf(format, mean)
	}
	return fmt.Sprintf(format+" ± "+strings.Replace(format, "%+", "%", 1), mean, half)
}
