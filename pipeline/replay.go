package pipeline

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/monitor"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/traj"
)

// ReplayOptions are the settings of Replay.
type ReplayOptions struct {
	// Out receives progress and the summary (nothing when nil).
	Out io.Writer
	// OutDir receives the replay's metrics.jsonl (default: <run>/replay).
	OutDir string
	Opts   Options // the environment registry (for the phases' seed ranges) and the clock
}

// ReplaySummary is what Replay did.
type ReplaySummary struct {
	Dir      string // the replay's directory, holding its metrics.jsonl
	Steps    int    // RL steps replayed
	Compared int    // of them, steps whose metrics line the run had and that were compared
	// Mismatch describes the first metric that differs from the run's (timings and the
	// asynchronous queue depth aside); empty when every compared line is identical.
	Mismatch string
}

// Replay trains the RL phases of the run in runDir again from its recorded trajectories
// (trajectories.atrs), without generating or running an environment: for each RL step, the
// trajectories recorded for it are grouped and filtered exactly as the run filtered them
// (dynamic sampling's rounds are reconstructed from the tasks the step's random stream draws, and
// checked against the recording; an asynchronous phase's staleness bound drops the same
// episodes), then fed to the same learner update with the same random streams, starting from
// the checkpoint the run took when the phase started. The metrics it writes are then those of
// the run, timings aside, so a learner bug can be reproduced, bisected and debugged without the
// environments. It compares them with the run's metrics.jsonl line by line.
func Replay(ctx context.Context, runDir string, o ReplayOptions) (*ReplaySummary, error) {
	data, err := os.ReadFile(filepath.Join(runDir, "config.yaml"))
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	cfg, err := config.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("replay: %s config.yaml: %w", runDir, err)
	}
	recorded, err := readRecorded(filepath.Join(runDir, "trajectories.atrs"))
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	out := o.OutDir
	if out == "" {
		out = filepath.Join(runDir, "replay")
	}
	unlock, err := openReplayDir(runDir, out)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	defer unlock()
	mpath := filepath.Join(out, "metrics.jsonl")
	if err := os.Remove(mpath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("replay: %w", err)
	}
	opts := o.Opts
	opts.Out = o.Out
	r := &Run{Cfg: cfg, Dir: out, opts: opts}
	if r.metrics, err = openMetrics(mpath); err != nil {
		return nil, err
	}
	defer r.metrics.Close()
	r.start = r.now()
	logged, err := loggedSteps(filepath.Join(runDir, "metrics.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	sum := &ReplaySummary{Dir: out}
	for pi, p := range cfg.Phases {
		if p.Kind != "rl" {
			continue
		}
		start := r.stepName(0, 0)
		if pi > 0 {
			start = r.stepName(pi-1, cfg.Phases[pi-1].Steps)
		}
		ck, err := checkpoint.Load(filepath.Join(runDir, checkpointsDir, start))
		if err != nil {
			return nil, fmt.Errorf("replay: phase %s starts from checkpoint %s, which the run must keep: %w", p.Name, start, err)
		}
		var st progressState
		if ck.State == nil || json.Unmarshal(ck.State.Extra, &st) != nil {
			return nil, fmt.Errorf("replay: checkpoint %s has no progress state", start)
		}
		r.model, r.tok, r.version = ck.Model, ck.Tokenizer, st.Version
		if r.opts.NewConversation == nil { // the run's chat rendering, for its sample metrics
			cr, err := NewChatRendering(cfg.ChatSettings(), r.tok, nil)
			if err != nil {
				return nil, fmt.Errorf("replay: %w", err)
			}
			r.opts.NewConversation = cr.NewConversation
		}
		n, err := r.replayRL(ctx, pi, p, recorded[p.Name], func(step int) bool { return logged[fmt.Sprintf("%s/%d", p.Name, step)] })
		sum.Steps += n
		if err != nil {
			return sum, fmt.Errorf("replay: phase %s step %d: %w", p.Name, n+1, err)
		}
	}
	if err := r.metrics.f.Sync(); err != nil {
		return sum, err
	}
	sum.Compared, sum.Mismatch, err = compareMetrics(filepath.Join(runDir, "metrics.jsonl"), mpath)
	return sum, err
}

// replayRL replays one RL phase from the trajectories recorded for its steps (keyed by the
// step's 1-based number) and returns how many steps it trained. logged says whether the run's
// metrics logged a step (by its 1-based number): one logged with nothing recorded trained nothing.
func (r *Run) replayRL(ctx context.Context, pi int, p config.Phase, byStep map[int][]*traj.Trajectory, logged func(int) bool) (int, error) {
	if p.RL.Async != nil && r.Cfg.Monitor.TaskSampling != nil {
		return 0, errors.New("monitor.task_sampling drew the tasks of an asynchronous phase while its steps trained, in an order the recording does not keep: it cannot be replayed")
	}
	upd, err := r.newRLUpdate(p, 0)
	if err != nil {
		return 0, err
	}
	mon := monitor.New(r.Cfg.Monitor)
	bar := r.newProgress("replay "+p.Name, p.Steps)
	defer bar.finish()
	for step := range p.Steps {
		if err := ctx.Err(); err != nil {
			return step, err
		}
		rec, ok := byStep[step+1]
		if !ok && !logged(step+1) {
			r.printf("replay: phase %s: nothing recorded for step %d: the run stopped there\n", p.Name, step+1)
			return step, nil
		}
		st0 := r.now()
		rng := r.stepRNG(pi, step, 3)
		var groups [][]*traj.Trajectory
		var fill reward.FillStats
		var as *asyncStats
		if a := p.RL.Async; a != nil && a.Workers != nil {
			if groups, fill, as, err = r.replayDistStep(pi, p, step, rec); err != nil {
				return step, err
			}
			rng = r.stepRNG(pi, step, 4)
		} else if a != nil && a.Mode == config.ModeContinuous {
			f, err := r.replayContinuous(pi, p, rec)
			if err != nil {
				return step, err
			}
			groups, fill = f.groups, f.fill
			as = f.asyncStats()
			rng = r.stepRNG(pi, step, 4)
		} else if groups, fill, err = r.replaySample(p, step, rng, rec); err != nil {
			return step, err
		} else if a := p.RL.Async; a != nil {
			// The producer sampled with its own stream; the learner shuffles with another.
			var dropped, partial int
			groups, dropped, partial = dropStale(groups, r.version, int32(a.MaxStaleness))
			as = &asyncStats{droppedStale: dropped, partialStale: partial}
			rng = r.stepRNG(pi, step, 4)
		}
		s := &rlStep{phase: p.Name, step: step + 1, version: r.version, sample: monitor.Measure(rec, groups), fill: fill, async: as, simLatency: simulatedLatency(p.Envs), rewards: rewardMetrics(rec), samples: r.sampleMetrics(rec)}
		if trajs := slices.Concat(groups...); len(trajs) > 0 {
			rep, err := r.learnStep(upd, trajs, step, rng)
			if err != nil {
				return step, err
			}
			s.learn = rep
		}
		el := r.now().Sub(st0).Seconds()
		s.times = stepTimes{train: el, step: el, elapsed: r.now().Sub(r.start).Seconds()}
		if err := r.logRL(s, mon, bar); err != nil {
			return step, err
		}
	}
	return p.Steps, nil
}

// replayContinuous rebuilds a step of continuous admission from its recorded trajectories: the
// groups the learner took, in the order it took them. Each group's task is redrawn from its place
// in the admission stream and checked, and the groups go through the same fill as the live step.
func (r *Run) replayContinuous(pi int, p config.Phase, rec []*traj.Trajectory) (*stepFill, error) {
	f := newStepFill(p, r.version)
	for _, g := range recordedGroups(rec) {
		start, k, ok := parseAsyncGroup(g[0])
		if !ok {
			return nil, fmt.Errorf("recorded group %d has no %s: it was not sampled by continuous admission", g[0].GroupID, asyncGroupKey)
		}
		t, err := r.asyncTask(pi, p, start, k)
		if err != nil {
			return nil, err
		}
		if g[0].GroupID != t.GroupID || g[0].TaskSeed != t.Seed || g[0].Env != t.Env || len(g) != p.RL.GroupSize {
			return nil, fmt.Errorf("recorded group %d (%s seed %d, %d episodes) is not the task admission %d/%d draws (group %d, %s seed %d, %d episodes): the recording does not match the config", g[0].GroupID, g[0].Env, g[0].TaskSeed, len(g), start, k, t.GroupID, t.Env, t.Seed, p.RL.GroupSize)
		}
		if f.full() {
			return nil, fmt.Errorf("the recording holds more groups than the step took (it was full before group %d)", g[0].GroupID)
		}
		f.offer(g)
	}
	f.done()
	return f, nil
}

// recordedGroups splits a step's recorded trajectories into their groups, in order.
func recordedGroups(rec []*traj.Trajectory) [][]*traj.Trajectory {
	var out [][]*traj.Trajectory
	for _, t := range rec {
		if n := len(out); n > 0 && out[n-1][0].GroupID == t.GroupID {
			out[n-1] = append(out[n-1], t)
		} else {
			out = append(out, []*traj.Trajectory{t})
		}
	}
	return out
}

// replaySample rebuilds a step's groups from its recorded trajectories as sampleRL made them:
// it draws the same tasks from rng (so rng ends where the run's did), checks that the recording
// holds those tasks' groups, and filters them with the phase's dynamic sampling.
func (r *Run) replaySample(p config.Phase, step int, rng *rand.Rand, rec []*traj.Trajectory) ([][]*traj.Trajectory, reward.FillStats, error) {
	c := p.RL
	_ = rng.Uint64() // the rollout runner's sample seed
	recGroups := recordedGroups(rec)
	next, round := 0, 0
	sample := func(_ context.Context, n int) ([][]*traj.Trajectory, error) {
		tasks, err := r.drawTasks(rng, p, n, uint64(step)<<16|uint64(round)<<12)
		round++
		if err != nil {
			return nil, err
		}
		if next+len(tasks) > len(recGroups) {
			return nil, fmt.Errorf("the run sampled %d groups in round %d, the recording holds %d more", len(tasks), round, len(recGroups)-next)
		}
		out := recGroups[next : next+len(tasks)]
		next += len(tasks)
		for i, g := range out {
			t := tasks[i]
			if g[0].GroupID != t.GroupID || g[0].TaskSeed != t.Seed || g[0].Env != t.Env || len(g) != c.GroupSize {
				return nil, fmt.Errorf("recorded group %d (%s seed %d, %d episodes) is not the task the run drew (group %d, %s seed %d, %d episodes): the recording does not match the config", g[0].GroupID, g[0].Env, g[0].TaskSeed, len(g), t.GroupID, t.Env, t.Seed, c.GroupSize)
			}
		}
		return out, nil
	}
	var groups [][]*traj.Trajectory
	var fill reward.FillStats
	var err error
	if ds := c.DynamicSampling; ds != nil {
		groups, fill, err = reward.DynamicSampling{Groups: c.GroupsPerStep, MaxRounds: ds.MaxRounds, AllowPartial: true}.Fill(context.Background(), sample)
	} else {
		groups, err = sample(context.Background(), c.GroupsPerStep)
		fill = reward.FillStats{Rounds: 1, Sampled: len(groups)}
	}
	if err != nil {
		return nil, fill, err
	}
	if next != len(recGroups) {
		return nil, fill, fmt.Errorf("%d recorded groups were never drawn: the recording does not match the config", len(recGroups)-next)
	}
	return groups, fill, nil
}

// readRecorded reads a run's trajectory stream and sorts the trajectories by the phase and step
// they were recorded for, in file order.
func readRecorded(path string) (map[string]map[int][]*traj.Trajectory, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rd, err := traj.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]map[int][]*traj.Trajectory{}
	for {
		t, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		phase, stepText := "", ""
		for _, kv := range t.Meta {
			switch kv.Key {
			case "phase":
				phase = kv.Value
			case "step":
				stepText = kv.Value
			}
		}
		step, err := strconv.Atoi(stepText)
		if phase == "" || err != nil {
			continue // not tagged by a training step
		}
		if out[phase] == nil {
			out[phase] = map[int][]*traj.Trajectory{}
		}
		out[phase][step] = append(out[phase][step], t)
	}
}

// replayIgnored says which metrics a replay does not reproduce: wall-clock timings, how much an
// asynchronous producer had in flight or ready, the groups it cancelled in flight (never
// recorded), the latency bias and its warning (from timings and the cancelled groups), and the
// workers' data plane's counters. Everything learning computed is compared.
func replayIgnored(key string) bool {
	switch key {
	case "async/batches_ahead", "async/groups_in_flight", "async/groups_ready", "async/cancelled_stale", "async/latency_bias":
		return true
	}
	// dist/: the data plane's bookkeeping (deliveries, drops, redeliveries by cause), which
	// depends on the workers and the server, not on learning.
	return strings.HasPrefix(key, "time/") || strings.HasPrefix(key, "dist/")
}

// compareMetrics compares the RL step lines of the replay's metrics (at path replay) with the
// run's, and returns how many lines it compared and the first difference.
func compareMetrics(run, replay string) (int, string, error) {
	load := func(path string) (map[string]map[string]any, []string, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		defer f.Close()
		lines := map[string]map[string]any{}
		var order []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", path, err)
			}
			if _, ok := m["step"]; !ok || m["eval"] != nil {
				continue
			}
			key := fmt.Sprintf("%v/%v", m["phase"], m["step"])
			lines[key] = m
			order = append(order, key)
		}
		return lines, order, sc.Err()
	}
	want, _, err := load(run)
	if err != nil {
		return 0, "", err
	}
	got, order, err := load(replay)
	if err != nil {
		return 0, "", err
	}
	n, first, differing := 0, "", 0
	for _, key := range order {
		w, ok := want[key]
		if !ok {
			continue
		}
		n++
		g := got[key]
		keys := map[string]bool{}
		for k := range w {
			keys[k] = true
		}
		for k := range g {
			keys[k] = true
		}
		var sorted []string
		for k := range keys {
			if !replayIgnored(k) {
				sorted = append(sorted, k)
			}
		}
		sort.Strings(sorted)
		var diffs []string
		for _, k := range sorted {
			if k == "warnings" {
				w[k], g[k] = replayedWarnings(w[k]), replayedWarnings(g[k])
			}
			if !reflect.DeepEqual(w[k], g[k]) {
				diffs = append(diffs, fmt.Sprintf("%s is %v in the run, %v in the replay", k, show(w[k]), show(g[k])))
			}
		}
		if len(diffs) > 0 {
			differing++
			if first == "" {
				first = fmt.Sprintf("step %s: %s", key, strings.Join(diffs, "; "))
			}
		}
	}
	if differing > 1 {
		first += fmt.Sprintf(" (and %d later steps differ)", differing-1)
	}
	return n, first, nil
}

// show prints a metric's value for a mismatch, saying when it is absent.
func show(v any) string {
	if v == nil {
		return "absent"
	}
	return fmt.Sprint(v)
}

// replayedWarnings are a metrics line's warnings less the latency-bias warning, which a replay
// does not reproduce (nil when none is left).
func replayedWarnings(v any) any {
	ws, ok := v.([]any)
	if !ok {
		return v
	}
	var out []any
	for _, w := range ws {
		if s, ok := w.(string); !ok || !strings.HasPrefix(s, monitor.LatencyBiasWarning) {
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
