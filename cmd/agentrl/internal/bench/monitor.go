package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/pipeline"
)

// MonitorOptions says what Monitor runs; `agentrl bench monitor` documents each field.
type MonitorOptions struct {
	Envs      *env.Registry
	Action    string   // entropy, tasks or shift (MonitorActions)
	RunsDir   string   // where the supervised checkpoints and the arms' runs go
	Init      string   // supervised checkpoint every arm starts from ("" = train one)
	SFTPer    bool     // train a supervised checkpoint per seed (with that seed) instead of one
	SFTSteps  int      // supervised steps when training one (0: the preset's)
	Seeds     string   // comma-separated seeds, one off and one on arm each
	Steps     int      // RL steps per arm (0: the preset's)
	Tasks     int      // held-out tasks of the evaluations (0: the preset's)
	Samples   int      // samples per task of the sampled pass@1 (0: the preset's)
	Set       []string // overrides of both arms
	ActionSet []string // the action's settings in the on arm (nil: the action's defaults)
	Quiet     bool
	Terminal  bool
}

// monitorAction is how one of the monitor's actions is measured: on which preset, with which
// settings in the on arm (and in both arms), and which figures it should move.
type monitorAction struct {
	preset string
	on     []string // the action's default settings
	both   []string // settings of both arms, beside the preset's
	what   string
}

// MonitorActions are the actions `agentrl bench monitor` measures, with the evidence issue 16
// asks for: the entropy controller on search (held-out success and entropy), difficulty-aware
// sampling on maze (zero-variance share and held-out success), and the shift controller on an
// asynchronous calc run (held-out success and the IS weights' ESS).
var MonitorActions = map[string]monitorAction{
	"entropy": {preset: "search",
		on:   []string{"monitor.entropy_control={low: 0.1, high: 0.8, entropy_coef: {min: 0, max: 0.02, step: 0.002}, clip_high: {min: 0.2, max: 0.28, step: 0.02}}"},
		what: "held-out success and token entropy"},
	"tasks": {preset: "maze",
		on:   []string{"monitor.task_sampling={explore: 0.25, decay: 0.5, max_tasks: 4096, oversample: 2}"},
		what: "zero-variance share and held-out success"},
	"shift": {preset: "calc",
		both: []string{"phases.rl.rl.async.max_staleness=2", "phases.rl.rl.loss.correction={level: token, cap: 4}"},
		on:   []string{"monitor.shift_control={ess_low: 0.9, ess_high: 0.98, kl_low: 0.001, kl_high: 0.01, factor: 0.8, cap: {min: 1.5, max: 8}}"},
		what: "held-out success and the importance weights' ESS"},
}

// monitorRun is one arm at one seed and what it measured.
type monitorRun struct {
	seed            uint64
	on              bool
	pass1, greedy   float64 // held-out, after RL
	start           float64 // held-out sampled pass@1 of the checkpoint RL started from
	entropyLast     float64 // mean token entropy over the last quarter of the trained steps
	zeroVar         float64 // mean share of zero-variance groups over the steps
	ess, kl         float64 // mean ESS and behaviour KL over the trained steps
	actions, warned int
	wall            time.Duration
}

// Monitor measures one of the monitor's actions: for each seed it trains RL from the same
// supervised checkpoint twice, without and with the action, and prints each run's figures and,
// over the seeds, each figure's mean with its 95% interval (Student's t) in both arms and of the
// paired difference on − off.
func Monitor(ctx context.Context, w io.Writer, o MonitorOptions) error {
	act, ok := MonitorActions[o.Action]
	if !ok {
		return fmt.Errorf("bench monitor: unknown action %q (known: entropy, tasks, shift)", o.Action)
	}
	if o.Steps < 0 || o.SFTSteps < 0 || o.Tasks < 0 || o.Samples < 0 {
		return fmt.Errorf("bench monitor: --steps, --sft-steps, --tasks and --samples must not be negative")
	}
	if o.Init != "" && o.SFTPer {
		return fmt.Errorf("bench monitor: --init and --sft-per-seed exclude each other")
	}
	var seeds []uint64
	for _, s := range splitList(o.Seeds) {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("bench monitor: bad seed %q", s)
		}
		seeds = append(seeds, v)
	}
	if len(seeds) == 0 {
		return fmt.Errorf("bench monitor: no seeds")
	}
	on := act.on
	if len(o.ActionSet) > 0 {
		on = o.ActionSet
	}
	out := w
	if o.Quiet {
		out = nil
	}
	fmt.Fprintf(w, "bench monitor %s: preset %s, %s, seeds %s; off arm: the preset%s; on arm adds: %v\n",
		o.Action, act.preset, act.what, o.Seeds, describeSets(append(append([]string{}, act.both...), o.Set...)), on)
	init := o.Init
	var runs []monitorRun
	for _, seed := range seeds {
		if init == "" || o.SFTPer {
			t0 := time.Now()
			var err error
			sftSeed := uint64(1)
			if o.SFTPer {
				sftSeed = seed
			}
			if init, err = supervised(ctx, out, o, act.preset, sftSeed); err != nil {
				return err
			}
			fmt.Fprintf(w, "supervised checkpoint (seed %d): %s (%s)\n", sftSeed, init, time.Since(t0).Round(time.Second))
		}
		for _, arm := range []bool{false, true} {
			sets := append(append([]string{}, act.both...), o.Set...)
			if arm {
				sets = append(sets, on...)
			}
			r, err := runMonitorArm(ctx, out, o, act.preset, init, seed, arm, sets)
			if err != nil {
				return fmt.Errorf("seed %d, action %s: %w", seed, armName(arm), err)
			}
			runs = append(runs, r)
			fmt.Fprintf(w, "done: seed %d action %s: held-out pass@1 %.1f%% -> %.1f%%, %d actions, %s\n", seed, armName(arm), 100*r.start, 100*r.pass1, r.actions, r.wall.Round(time.Second))
		}
	}
	printMonitor(w, runs)
	return nil
}

func armName(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

func describeSets(sets []string) string {
	if len(sets) == 0 {
		return ""
	}
	return fmt.Sprintf(" with %v", sets)
}

// supervised trains the preset's supervised phase alone with seed and returns its checkpoint.
func supervised(ctx context.Context, out io.Writer, o MonitorOptions, preset string, seed uint64) (string, error) {
	return supervisedCheckpoint(ctx, out, sftRun{envs: o.Envs, runsDir: o.RunsDir, name: fmt.Sprintf("bench-monitor-%s-sft-seed%d", preset, seed),
		preset: preset, steps: o.SFTSteps, seed: seed, terminal: o.Terminal})
}

// runMonitorArm trains the preset's RL phase from init with seed and sets, and reads what it
// measured from its evaluations and metrics.
func runMonitorArm(ctx context.Context, out io.Writer, o MonitorOptions, preset, init string, seed uint64, on bool, sets []string) (monitorRun, error) {
	r := monitorRun{seed: seed, on: on}
	all := []string{"runs_dir=" + o.RunsDir, fmt.Sprintf("name=bench-monitor-%s-%s-seed%d", o.Action, armName(on), seed), fmt.Sprintf("seed=%d", seed), "init=" + init}
	if o.Steps > 0 {
		all = append(all, fmt.Sprintf("phases.rl.steps=%d", o.Steps), fmt.Sprintf("phases.rl.optim.warmup=%d", min(5, o.Steps)))
	}
	if o.Tasks > 0 {
		all = append(all, fmt.Sprintf("eval.tasks=%d", o.Tasks))
	}
	if o.Samples > 0 {
		all = append(all, fmt.Sprintf("eval.samples=%d", o.Samples))
	}
	cfg, err := config.Load(o.Envs, preset, "", append(all, sets...))
	if err != nil {
		return r, err
	}
	cfg.Phases = cfg.Phases[1:] // RL only, from the supervised checkpoint
	if err := cfg.Validate(o.Envs); err != nil {
		return r, err
	}
	run, err := pipeline.NewRun(cfg, pipeline.Options{Out: out, Terminal: o.Terminal, Envs: o.Envs})
	if err != nil {
		return r, err
	}
	t0 := time.Now()
	sum, err := run.Train(ctx)
	if err != nil {
		return r, err
	}
	r.wall = time.Since(t0)
	first, last := sum.Evals[0], sum.Evals[len(sum.Evals)-1]
	for i, e := range last.Envs {
		r.pass1 += *e.Pass1Sampled / float64(len(last.Envs))
		r.greedy += e.Pass1Greedy / float64(len(last.Envs))
		r.start += *first.Envs[i].Pass1Sampled / float64(len(last.Envs))
	}
	return r, readMonitorMetrics(sum.Dir, &r)
}

// readMonitorMetrics reads the RL step lines of the run in dir into r.
func readMonitorMetrics(dir string, r *monitorRun) error {
	f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		return err
	}
	defer f.Close()
	var entropies []float64
	steps, trained := 0, 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return err
		}
		if m["phase"] != "rl" || m["eval"] != nil {
			continue
		}
		steps++
		num := func(k string) float64 { v, _ := m[k].(float64); return v }
		r.zeroVar += num("signal/zero_var_share")
		if a, ok := m["actions"].([]any); ok {
			r.actions += len(a)
		}
		if a, ok := m["warnings"].([]any); ok {
			r.warned += len(a)
		}
		if _, ok := m["signal/effective_batch"]; ok {
			trained++
			entropies = append(entropies, num("explore/entropy"))
			r.ess += num("shift/is_ess")
			r.kl += num("shift/behaviour_kl")
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if steps == 0 {
		return fmt.Errorf("%s: no RL step in metrics.jsonl", dir)
	}
	r.zeroVar /= float64(steps)
	if trained > 0 {
		r.ess /= float64(trained)
		r.kl /= float64(trained)
		tail := entropies[len(entropies)*3/4:]
		for _, e := range tail {
			r.entropyLast += e / float64(len(tail))
		}
	}
	return nil
}

func fmtCI(mean, half float64, scale float64, unit string) string {
	if math.IsNaN(mean) {
		return "—"
	}
	if math.IsNaN(half) {
		return fmt.Sprintf("%.3g%s", scale*mean, unit)
	}
	return fmt.Sprintf("%.3g%s ± %.2g", scale*mean, unit, scale*half)
}

// printMonitor prints every run, then per figure the mean and 95% interval of each arm and of
// the paired difference.
func printMonitor(w io.Writer, runs []monitorRun) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nseed\taction\tpass@1 sampled: start -> end\tgreedy\tentropy (last quarter)\tzero-var share\tESS\tbehaviour KL\tactions\twarnings\twall")
	for _, r := range runs {
		fmt.Fprintf(tw, "%d\t%s\t%.1f%% -> %.1f%%\t%.1f%%\t%.4f\t%.3f\t%.4f\t%.2e\t%d\t%d\t%s\n", r.seed, armName(r.on), 100*r.start, 100*r.pass1,
			100*r.greedy, r.entropyLast, r.zeroVar, r.ess, r.kl, r.actions, r.warned, r.wall.Round(time.Second))
	}
	tw.Flush()
	figures := []struct {
		name  string
		get   func(monitorRun) float64
		scale float64
		unit  string
	}{
		{"held-out pass@1 sampled", func(r monitorRun) float64 { return r.pass1 }, 100, "%"},
		{"held-out pass@1 greedy", func(r monitorRun) float64 { return r.greedy }, 100, "%"},
		{"token entropy, last quarter of RL (nats)", func(r monitorRun) float64 { return r.entropyLast }, 1, ""},
		{"zero-variance share of groups", func(r monitorRun) float64 { return r.zeroVar }, 1, ""},
		{"importance-weight ESS", func(r monitorRun) float64 { return r.ess }, 1, ""},
		{"monitor actions per run", func(r monitorRun) float64 { return float64(r.actions) }, 1, ""},
	}
	bySeed := map[uint64][2]*monitorRun{}
	for i := range runs {
		p := bySeed[runs[i].seed]
		if runs[i].on {
			p[1] = &runs[i]
		} else {
			p[0] = &runs[i]
		}
		bySeed[runs[i].seed] = p
	}
	n := 0
	for _, p := range bySeed {
		if p[0] != nil && p[1] != nil {
			n++
		}
	}
	fmt.Fprintf(w, "\nover %d seeds: mean ± half-width of the 95%% interval (Student's t); on − off paired by seed\n", n)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\toff\ton\ton − off")
	for _, f := range figures {
		var off, on, diff []float64
		for _, r := range runs {
			if r.on {
				on = append(on, f.get(r))
			} else {
				off = append(off, f.get(r))
			}
		}
		for _, p := range bySeed {
			if p[0] != nil && p[1] != nil {
				diff = append(diff, f.get(*p[1])-f.get(*p[0]))
			}
		}
		mo, ho := ci95(off)
		mn, hn := ci95(on)
		md, hd := ci95(diff)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.name, fmtCI(mo, ho, f.scale, f.unit), fmtCI(mn, hn, f.scale, f.unit), fmtCI(md, hd, f.scale, f.unit))
	}
	tw.Flush()
}
