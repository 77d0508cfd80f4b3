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
	Steps    int           // RL steps per arm (sync's; async arms run on to sync's trained episodes)
	Extra    float64       // share of Steps an async arm may run beyond them to reach sync's trained episodes
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
	bias       float64         // async/latency_bias at the last step that logged it (0: none)
	trainedBy  map[int]float64 // episodes trained up to each step
	// equal is the evaluation at the first step whose trained episodes reach sync's final ones
	// (same tail and seed; nil for sync, or when the arm never reached them); atSteps is the
	// evaluation at Steps (the same number of steps as sync).
	equal, atSteps *evalPoint
	sampleWall     float64 // wall seconds the steps spent sampling their batches (time/generate_env_s)
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
	se      float64 // the sampled pass@1's standard error over the held-out tasks
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
	if o.Steps < 1 || o.Every < 1 || o.Every > o.Steps || !(o.Extra >= 0 && o.Extra <= 10) {
		return fmt.Errorf("bench async: need steps >= 1, 1 <= every <= steps and extra in [0, 10]")
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
	fmt.Fprintf(w, "bench async: calc, RL %d steps of sync (asynchronous arms run to sync's trained episodes) from a supervised checkpoint, evaluated every %d steps on %d held-out tasks × %d samples; env step latency SIMULATED (%s, median %v, p99/p50 %s)\n",
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
		fmt.Fprintf(w, "seed %d: supervised checkpoint held-out pass@1 %.1f%% (standard error %.2f points over %d tasks)\n", seed, 100*base.pass1, 100*base.se, o.Tasks)
		for _, tail := range tailVals {
			var sync *asyncArm // the tail and seed's sync arm, run first
			for _, arm := range syncFirst(arms) {
				a, err := runAsyncArm(ctx, out, o, init, arm, tail, seed, sync)
				if err != nil {
					return fmt.Errorf("arm %s tail %g seed %d: %w", arm, tail, seed, err)
				}
				a.points = append([]evalPoint{{pass1: base.pass1, se: base.se, greedy: base.greedy}}, a.points...)
				if arm == "sync" {
					sync = a
				}
				results = append(results, a)
				fin := a.points[len(a.points)-1]
				fmt.Fprintf(w, "done: arm %s tail %g seed %d: %d steps, RL wall %.1fs, %.0f episodes trained, held-out pass@1 %.1f%% -> %.1f%% (SE %.2f points)\n",
					arm, tail, seed, a.stepsTaken, a.wall, a.trained, 100*a.points[0].pass1, 100*fin.pass1, 100*fin.se)
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
		"checkpoint.every=1", "checkpoint.keep=100000", "eval.tasks=8", "eval.samples=1", "eval.every=0",
	}
	as, _ := armAsyncSets(arm) // Async checked every arm
	return append(append(sets, as...), o.Set...)
}

// armOptions are the options an asynchronous arm may add to its η, "N-opt-opt…": the settings
// each sets and how the tables name it.
var armOptions = []struct {
	opt, name string
	sets      []string
}{
	{"nopartial", "no partial rollouts", []string{"phases.rl.rl.async.partial_rollouts=false"}},
	{"bounded", "bounded order", []string{"phases.rl.rl.async.order=bounded"}},
	{"admission", "admission order", []string{"phases.rl.rl.async.order=admission"}},
	{"keep", "stale kept", []string{"phases.rl.rl.async.stale=keep"}},
	// The importance correction: every arm's default is a token-level weight capped at 2.
	{"mask", "IS mask [0.5, 2]", []string{"phases.rl.rl.loss.correction.cap=0", "phases.rl.rl.loss.correction.mask_low=0.5", "phases.rl.rl.loss.correction.mask_high=2"}},
	{"nocap", "IS uncapped", []string{"phases.rl.rl.loss.correction.cap=0"}},
	{"none", "no IS correction", []string{"phases.rl.rl.loss.correction.cap=0", "phases.rl.rl.loss.correction.level=", "phases.rl.rl.async.allow_uncorrected=true"}},
}

// armAsyncSets are the async overrides an arm names: "sync"; "overlap" (each step's batch sampled
// while the learner trains the step before: overlap mode, η = 1); "N" (continuous admission,
// η = N, finish order); "N-opt…", the same with options of armOptions (e.g. "2-bounded",
// "4-keep", "2-none"). Config validation refuses combinations that do nothing.
func armAsyncSets(arm string) ([]string, error) {
	if arm == "sync" {
		return nil, nil
	}
	if arm == "overlap" {
		return []string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.async.mode=overlap"}, nil
	}
	parts := strings.Split(arm, "-")
	if n, err := strconv.Atoi(parts[0]); err != nil || n < 1 {
		return nil, fmt.Errorf("bench async: arm %q is none of sync, overlap, N or N-option… (N a max_staleness)", arm)
	}
	sets := []string{"phases.rl.rl.async.max_staleness=" + parts[0], "phases.rl.rl.async.mode=continuous"}
	seen := map[string]bool{}
	for _, opt := range parts[1:] {
		i := slices.IndexFunc(armOptions, func(o struct {
			opt, name string
			sets      []string
		}) bool {
			return o.opt == opt
		})
		if i < 0 || seen[opt] {
			return nil, fmt.Errorf("bench async: arm %q: option %q is not one of nopartial, bounded, admission, keep, mask, nocap, none (each once)", arm, opt)
		}
		seen[opt] = true
		sets = append(sets, armOptions[i].sets...)
	}
	return sets, nil
}

// asyncArmName is how the tables name an arm.
func asyncArmName(arm string) string {
	switch arm {
	case "sync":
		return "sync"
	case "overlap":
		return "one-step overlap"
	}
	parts := strings.Split(arm, "-")
	name := "async η=" + parts[0]
	for _, opt := range parts[1:] {
		for _, o := range armOptions {
			if o.opt == opt {
				name += ", " + o.name
			}
		}
	}
	return name
}

// syncFirst is arms with sync, when present, moved first: the other arms of a tail and seed run
// to its trained episodes.
func syncFirst(arms []string) []string {
	out := slices.Clone(arms)
	if i := slices.Index(out, "sync"); i > 0 {
		out = slices.Insert(slices.Delete(out, i, i+1), 0, "sync")
	}
	return out
}

// runAsyncArm runs one arm's RL phase, reads its metrics and evaluates its checkpoints. Sync
// (and any arm when sync is nil) runs Steps steps, evaluated every Every. An asynchronous arm
// with sync's run beside it runs until it has trained as many episodes as sync did, at most
// Steps·(1 + Extra) steps, and is evaluated where its trained episodes first reach those sync
// had trained at each of its evaluations (so the curves compare at equal trained episodes; the
// last is a.equal) and at Steps when it ran that far (a.atSteps).
func runAsyncArm(ctx context.Context, out io.Writer, o AsyncOptions, init, arm string, tail float64, seed uint64, sync *asyncArm) (*asyncArm, error) {
	ra, steps := o.rlArm(), o.Steps
	var marks []float64 // sync's trained episodes at its evaluations
	if sync != nil && arm != "sync" {
		steps = o.Steps + int(math.Ceil(o.Extra*float64(o.Steps)))
		for _, p := range sync.points[1:] {
			marks = append(marks, p.trained)
		}
		ra.steps = steps
		ra.at = func(trained map[int]float64) []int { return equalSteps(trained, marks, o.Steps) }
		ra.stopAt = marks[len(marks)-1]
	}
	sets := armSets(o, init, arm, tail, seed)
	sets = append(sets[:len(sets):len(sets)], fmt.Sprintf("phases.rl.steps=%d", steps))
	a, err := trainRLArm(ctx, out, ra, sets, seed)
	if err != nil {
		return nil, err
	}
	a.arm, a.tail, a.seed = arm, tail, seed
	for i := range a.points {
		p := &a.points[i]
		if p.step == o.Steps {
			a.atSteps = p
		}
	}
	if marks != nil {
		a.equal = atSyncEpisodes(a.points, marks[len(marks)-1])
	}
	if sync == nil || arm == "sync" {
		a.equal = &a.points[len(a.points)-1]
	}
	return a, nil
}

// equalSteps are the steps to evaluate an asynchronous arm at: for each of sync's marks (episodes
// trained at its evaluations), the first step whose trained episodes reach it (for the last mark,
// the step before it too, to interpolate between them), and the step `steps` (sync's), ascending
// and each once. A mark never reached adds nothing.
func equalSteps(trained map[int]float64, marks []float64, steps int) []int {
	var out []int
	ordered := slices.Sorted(maps.Keys(trained))
	for i, m := range marks {
		for j, s := range ordered {
			if trained[s] >= m {
				out = append(out, s)
				if i == len(marks)-1 && j > 0 {
					out = append(out, ordered[j-1])
				}
				break
			}
		}
	}
	if _, ok := trained[steps]; ok {
		out = append(out, steps)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// readArmMetrics sums an RL run's metrics.jsonl, and gives per step the wall seconds and
// episodes trained up to it.
func readArmMetrics(dir string, groupSize int) (*asyncArm, map[int][2]float64, error) {
	f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	a := &asyncArm{lagHist: map[int]int{}, trainedBy: map[int]float64{}}
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
		a.trainedBy[int(num("step"))] = a.trained
		if b, ok := m["async/latency_bias"].(float64); ok {
			a.bias = b
		}
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
	maxSE := 0.0
	for _, a := range rs {
		equal = min(equal, a.points[len(a.points)-1].trained)
		for _, p := range a.points {
			maxSE = max(maxSE, p.se)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "tail p99/p50\tseed\tarm\tsteps\ttime to target\tspeedup\tpass@1 at %.0f trained eps\tpass@1 at sync's episodes\tpass@1 start -> end\tRL wall\tepisodes/s\tlearner idle\tgenerator idle\tlag mean / max\tlag-max histogram\tdropped: stale / cancelled / filter / failed\tlatency bias\n", equal)
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
		eq, bias := "not reached", "-"
		if a.equal != nil {
			eq = fmt.Sprintf("%.1f%% (step %d)", 100*a.equal.pass1, a.equal.step)
		}
		if a.bias > 0 {
			bias = fmt.Sprintf("%.2f", a.bias)
		}
		fmt.Fprintf(tw, "%g\t%d\t%s\t%d\t%s\t%s\t%.1f%%\t%s\t%.1f%% -> %.1f%%\t%.1fs\t%.2f\t%.0f%%\t%.0f%%\t%.2f / %.0f\t%s\t%.0f / %.0f / %.0f / %.0f\t%s\n",
			a.tail, a.seed, asyncArmName(a.arm), a.stepsTaken, ttt, speed, 100*pass1At(a.points, equal), eq, 100*a.points[0].pass1, 100*a.points[len(a.points)-1].pass1,
			a.wall, a.episodes/a.wall, 100*a.learnWait/a.wall, 100*a.genWait/a.wall, a.lagMean, a.lagMax, strings.Join(hist, " "),
			a.stale, a.cancelled, a.filtered, a.failed, bias)
	}
	tw.Flush()
	fmt.Fprintf(w, "one held-out evaluation's standard error (over its %d tasks): at most %.2f points", o.Tasks, 100*maxSE)
	if maxSE > 0.01 {
		fmt.Fprintf(w, " — above 1 point: raise --tasks")
	}
	fmt.Fprintln(w)
	printAsyncPaired(w, o, rs)
	fmt.Fprintf(w, "\nheld-out sampled pass@1 ± standard error (greedy) at each evaluation, with RL wall seconds and ≈ episodes trained:\n")
	for _, a := range rs {
		var cells []string
		for _, p := range a.points {
			cells = append(cells, fmt.Sprintf("s%d %.1f±%.1f%% (%.1f%%) %.0fs %.0f", p.step, 100*p.pass1, 100*p.se, 100*p.greedy, p.wall, p.trained))
		}
		fmt.Fprintf(w, "  tail %g seed %d %s: %s\n", a.tail, a.seed, asyncArmName(a.arm), strings.Join(cells, " | "))
	}
}

// asyncPaired is one tail and asynchronous arm against sync over the seeds both ran: per seed,
// the arm's held-out pass@1 at sync's trained episodes and at sync's steps minus sync's final,
// and the speedup to target.
type asyncPaired struct {
	tail                float64
	arm                 string
	seeds               int
	equal, steps, speed []float64 // per seed that has the value
	notReached          int       // seeds whose arm never trained sync's episodes
	bias, stale, cancel []float64
	stepsToEqual        []float64
}

// pairAsync pairs each asynchronous arm with sync at the same tail and seed.
func pairAsync(o AsyncOptions, rs []*asyncArm) []*asyncPaired {
	syncs := map[string]*asyncArm{}
	for _, a := range rs {
		if a.arm == "sync" {
			syncs[fmt.Sprint(a.tail, a.seed)] = a
		}
	}
	var out []*asyncPaired
	by := map[string]*asyncPaired{}
	for _, a := range rs {
		s, ok := syncs[fmt.Sprint(a.tail, a.seed)]
		if a.arm == "sync" || !ok {
			continue
		}
		k := fmt.Sprint(a.tail, a.arm)
		p := by[k]
		if p == nil {
			p = &asyncPaired{tail: a.tail, arm: a.arm}
			by[k] = p
			out = append(out, p)
		}
		p.seeds++
		final := s.points[len(s.points)-1].pass1
		if a.equal != nil {
			p.equal = append(p.equal, 100*(a.equal.pass1-final))
			p.stepsToEqual = append(p.stepsToEqual, float64(a.equal.step))
		} else {
			p.notReached++
		}
		if a.atSteps != nil {
			p.steps = append(p.steps, 100*(a.atSteps.pass1-final))
		}
		ta, ok1 := timeToTarget(a.points, o.Target)
		ts, ok2 := timeToTarget(s.points, o.Target)
		if ok1 && ok2 && ta > 0 {
			p.speed = append(p.speed, ts/ta)
		}
		p.bias = append(p.bias, a.bias)
		p.stale, p.cancel = append(p.stale, a.stale), append(p.cancel, a.cancelled)
	}
	return out
}

// printAsyncPaired prints, per tail: sync's final pass@1 over seeds, then each asynchronous
// arm's paired differences to it (mean ± 95% Student-t interval over seeds, and each seed's).
func printAsyncPaired(w io.Writer, o AsyncOptions, rs []*asyncArm) {
	ps := pairAsync(o, rs)
	if len(ps) == 0 {
		return
	}
	fmt.Fprintf(w, "\npaired against sync at the same tail and seed (async − sync, points of held-out pass@1; mean ± 95%% interval, Student t over seeds):\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "tail p99/p50\tarm\tseeds\tat sync's trained episodes\tper seed\tat sync's steps\tspeedup to target\tsteps to sync's episodes\tlatency bias\tstale / cancelled per run\n")
	for _, tail := range uniqueTails(rs) {
		var final []float64
		for _, a := range rs {
			if a.arm == "sync" && a.tail == tail {
				final = append(final, 100*a.points[len(a.points)-1].pass1)
			}
		}
		if len(final) > 0 {
			fmt.Fprintf(tw, "%g\tsync\t%d\tfinal pass@1 %s%%\t%s\t\t\t%d\t\t\n", tail, len(final), meanInterval(final, "%.1f"), joinf(final, "%.1f"), o.Steps)
		}
		for _, p := range ps {
			if p.tail != tail {
				continue
			}
			eq := meanInterval(p.equal, "%+.1f")
			if p.notReached > 0 {
				eq += fmt.Sprintf(" (%d never reached)", p.notReached)
			}
			fmt.Fprintf(tw, "%g\t%s\t%d\t%s\t%s\t%s\t%s×\t%s\t%s\t%s / %s\n", tail, asyncArmName(p.arm), p.seeds, eq, joinf(p.equal, "%+.1f"),
				meanInterval(p.steps, "%+.1f"), meanInterval(p.speed, "%.2f"), meanInterval(p.stepsToEqual, "%.1f"), meanInterval(p.bias, "%.2f"),
				meanInterval(p.stale, "%.0f"), meanInterval(p.cancel, "%.0f"))
		}
	}
	tw.Flush()
}

// atSyncEpisodes is an arm's evaluation at mark trained episodes: at the first evaluated step that
// reached them, its held-out pass@1 interpolated linearly between it and the evaluation before
// (the step before, which equalSteps evaluates too), since that step may overshoot the mark by
// most of a step's episodes; nil when no evaluation reached the mark.
func atSyncEpisodes(ps []evalPoint, mark float64) *evalPoint {
	for _, p := range ps {
		if p.trained >= mark {
			return &evalPoint{step: p.step, trained: mark, pass1: pass1At(ps, mark), se: p.se, wall: p.wall}
		}
	}
	return nil
}

// uniqueTails are the tails of rs in the order they first appear.
func uniqueTails(rs []*asyncArm) []float64 {
	var out []float64
	for _, a := range rs {
		if !slices.Contains(out, a.tail) {
			out = append(out, a.tail)
		}
	}
	return out
}

// joinf formats each of xs and joins them with commas.
func joinf(xs []float64, format string) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf(format, x))
	}
	return strings.Join(parts, ", ")
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
