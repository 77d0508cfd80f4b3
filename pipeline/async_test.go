package pipeline

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/traj"
)

// asyncSets make the tiny run's RL phase asynchronous with a staleness bound of one version, in
// the default admission mode (continuous; tests that need overlap set it), and (as in
// scheduleSets) keep every group and give the updates a gradient, so each step trains and the
// weights move while the next step samples.
var asyncSets = []string{
	"phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.loss.entropy_coef=0.01", "phases.rl.steps=6",
	"phases.rl.rl.loss.correction.level=token", "phases.rl.rl.loss.correction.cap=2", "phases.rl.rl.async.max_staleness=1",
}

// An asynchronous phase trains every step, and no token it trains on lags the learner by more
// than max_staleness versions, in both admission modes.
func TestAsyncPhaseHoldsTheStalenessBound(t *testing.T) {
	for _, mode := range []string{config.ModeContinuous, config.ModeOverlap} {
		t.Run(mode, func(t *testing.T) {
			c := tinyConfig(t, t.TempDir(), append(asyncSets, "phases.rl.rl.async.mode="+mode)...)
			run, err := NewRun(c, Options{Envs: all.Builtins()})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := run.Train(context.Background()); err != nil {
				t.Fatal(err)
			}
			rl, overlapped := 0, 0
			for _, m := range metricLines(t, run.Dir) {
				if m["phase"] != "rl" {
					continue
				}
				rl++
				if m["signal/effective_batch"] == nil && m["signal/groups_kept"].(float64) > 0 {
					t.Fatalf("step %v kept groups but did not train: %v", m["step"], m)
				}
				lag := m["shift/version_lag_max"].(float64)
				if lag > 1 {
					t.Fatalf("step %v trained on tokens %v versions old, bound 1", m["step"], lag)
				}
				if lag == 1 {
					overlapped++ // sampled while the learner trained the step before
				}
				if _, ok := m["async/dropped_stale"]; !ok {
					t.Fatalf("step %v lacks async/dropped_stale", m["step"])
				}
				_, cont := m["async/groups_in_flight"]
				if cont != (mode == config.ModeContinuous) {
					t.Fatalf("step %v in mode %s: async/groups_in_flight present %v", m["step"], mode, cont)
				}
			}
			if rl != 6 || overlapped == 0 {
				t.Fatalf("%d RL steps logged (want 6), %d of them sampled while the learner trained (want some)", rl, overlapped)
			}
		})
	}
}

// Continuous admission takes a step's batch from the first groups to finish: under a heavy-tailed
// environment latency, steps are taken while other groups are still running (a step-at-a-time
// producer would have none in flight when its batch is complete), and the admission bound holds:
// groups in flight and ready never exceed (η+1)·B.
func TestContinuousAdmissionDoesNotWaitForStragglers(t *testing.T) {
	sets := append(asyncSets, "phases.rl.steps=5",
		`phases.rl.envs=[{name: calc, weight: 1, latency: {dist: lognormal, median: 2ms, p99_over_p50: 50}}]`)
	c := tinyConfig(t, t.TempDir(), sets...)
	run, err := NewRun(c, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := c.Phases[len(c.Phases)-1].RL
	bound := float64((p.Async.MaxStaleness + 1) * p.GroupsPerStep)
	behind := 0
	for _, m := range metricLines(t, run.Dir) {
		if m["phase"] != "rl" {
			continue
		}
		in, ready := m["async/groups_in_flight"].(float64), m["async/groups_ready"].(float64)
		if in+ready > bound {
			t.Fatalf("step %v: %v groups in flight and %v ready, above (η+1)·B = %v", m["step"], in, ready, bound)
		}
		if in > 0 {
			behind++
		}
	}
	if behind == 0 {
		t.Fatal("every step's batch was taken with no group in flight: admission waited for stragglers")
	}
}

// The admission rule and the learner's fill, by hand.
func TestAdmissionAndFill(t *testing.T) {
	a := &admission{eta: 1, B: 2}
	n := 0
	for a.canAdmit() {
		a.admitted++
		n++
	}
	if n != 4 {
		t.Fatalf("η=1, B=2 admitted %d groups before the first step, want (0+1+1)·2 = 4", n)
	}
	a.discarded++ // a filtered group is replaced
	if !a.canAdmit() {
		t.Fatal("a discarded group must free its place")
	}
	a.admitted++
	a.trained++
	if !a.canAdmit() {
		t.Fatal("a trained step must let B more start")
	}

	ep := func(v int32, r float64) *traj.Trajectory {
		return &traj.Trajectory{Tokens: []int32{1, 2}, Versions: []int32{traj.NoVersion, v}, LossMask: []bool{false, true}, Status: traj.StatusOK,
			Turns: []traj.Turn{{Start: 1, End: 2, ObsEnd: 2}}, Reward: r}
	}
	p := config.Phase{RL: &config.RLConfig{GroupsPerStep: 2, GroupSize: 2, DynamicSampling: &config.DynamicSamplingConfig{MaxRounds: 2}, Async: &config.AsyncConfig{MaxStaleness: 1}}}
	f := newStepFill(p, 5)
	f.offer([]*traj.Trajectory{ep(3, 1), ep(3, 0)}) // 2 versions old: both dropped, group discarded
	f.offer([]*traj.Trajectory{ep(5, 1), ep(5, 1)}) // no variance: filtered
	f.offer([]*traj.Trajectory{ep(4, 1), ep(5, 0)}) // kept
	if f.full() {
		t.Fatal("full after 3 of a limit of 4 groups with 1 kept")
	}
	f.offer([]*traj.Trajectory{ep(5, 0), ep(5, 1)})
	f.done()
	if !f.full() || len(f.groups) != 2 || f.stale != 2 || f.discards != 2 || f.fill.ZeroVariance != 1 || f.fill.Sampled != 4 || f.fill.Rounds != 2 || f.fill.Partial || len(f.taken) != 8 {
		t.Fatalf("fill %+v: groups %d, stale %d, discards %d, taken %d", f.fill, len(f.groups), f.stale, f.discards, len(f.taken))
	}
}

func TestAsyncConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"phases.rl.rl.async.max_staleness=0", "phases.rl.rl.loss.correction.level=token"}, "max_staleness must be in [1, 16]"},
		{[]string{"phases.rl.rl.async.max_staleness=1"}, "needs an importance correction"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.async.mode=eager"}, "rl.async.mode must be"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.async.partial_rollouts=false", "phases.rl.rl.async.workers.listen=127.0.0.1:0"}, "not to remote workers"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.async.mode=overlap", "phases.rl.rl.async.workers.listen=127.0.0.1:0"}, "applies to in-process generation"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.async.workers.listen=127.0.0.1:0", "phases.rl.rl.groups_per_step=4096", "phases.rl.rl.group_size=2", "rollout.max_context=64"}, "exceed the 8192 the data plane numbers"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.async.workers.listen=127.0.0.1:0", "phases.rl.rl.async.workers.token=secret"}, "${NAME}"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.async.workers.url=nats://h:1", "phases.rl.rl.async.workers.listen=127.0.0.1:0"}, "exactly one of listen"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.async.workers.bogus=1"}, "bogus"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.async.order=fifo"}, "rl.async.order must be"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.async.stale=hold"}, "rl.async.stale must be"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.async.order=bounded", "phases.rl.rl.async.stale=keep"}, "keep does nothing with order"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.async.mode=overlap", "phases.rl.rl.async.order=bounded"}, "continuous admission's learner"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.async.allow_uncorrected=true"}, "allow_uncorrected does nothing"},
		{[]string{"phases.rl.rl.async.max_staleness=1", "monitor.max_latency_bias=0.5", "phases.rl.rl.loss.correction.level=token"}, "max_latency_bias must be 0"},
	} {
		_, err := config.Load(all.Builtins(), "", "", tc.sets)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.sets, err, tc.want)
		}
	}
}

func TestDropStale(t *testing.T) {
	ep := func(versions ...int32) *traj.Trajectory {
		t := &traj.Trajectory{Versions: append([]int32{traj.NoVersion}, versions...)}
		t.LossMask = make([]bool, len(t.Versions))
		for i := 1; i < len(t.LossMask); i++ {
			t.LossMask[i] = true
		}
		return t
	}
	fresh, mixed, old := ep(5, 5), ep(3, 5), ep(2, 2)
	groups, dropped, partial := dropStale([][]*traj.Trajectory{{fresh, mixed}, {old}}, 5, 2)
	if dropped != 1 || partial != 0 || len(groups) != 1 || len(groups[0]) != 2 {
		t.Fatalf("kept %v, dropped %d, partial %d; want the first group whole and the episode 3 versions old dropped with its group", groups, dropped, partial)
	}
	// The oldest policy token decides: an episode begun at version 2 that continued at 5 is 3 old.
	if _, d, _ := dropStale([][]*traj.Trajectory{{ep(2, 5)}}, 5, 2); d != 1 {
		t.Fatal("an episode is as stale as its oldest policy token")
	}
	// A group keeps its members within the bound, and is counted as partial.
	groups, dropped, partial = dropStale([][]*traj.Trajectory{{fresh, ep(2, 5), mixed}}, 5, 2)
	if dropped != 1 || partial != 1 || len(groups) != 1 || len(groups[0]) != 2 || groups[0][0] != fresh || groups[0][1] != mixed {
		t.Fatalf("kept %v, dropped %d, partial %d; want the group without its stale member, counted partial", groups, dropped, partial)
	}
}

// With partial_rollouts: false every completion is sampled by one policy version, and the phase
// still overlaps generation with training (some episodes span versions at turn boundaries or
// were sampled one version behind).
func TestAsyncWithoutPartialRolloutsKeepsCompletionsOnOneVersion(t *testing.T) {
	c := tinyConfig(t, t.TempDir(), append(asyncSets, "phases.rl.rl.async.partial_rollouts=false")...)
	run, err := NewRun(c, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	turns, lagged := 0, 0
	for _, tr := range readTrajs(t, run.Dir) {
		if !slices.ContainsFunc(tr.Meta, func(kv traj.KV) bool { return kv.Key == "phase" && kv.Value == "rl" }) {
			continue
		}
		for _, tu := range tr.Turns {
			turns++
			var vs []int32 // the versions of the completion's sampled tokens
			for i := tu.Start; i < tu.End; i++ {
				if tr.LossMask[i] && tr.Versions[i] != traj.NoVersion {
					vs = append(vs, tr.Versions[i])
				}
			}
			for _, v := range vs {
				if v != vs[0] {
					t.Fatalf("trajectory %s: one completion sampled by versions %v", tr.ID, vs)
				}
			}
		}
	}
	for _, m := range metricLines(t, run.Dir) {
		if m["phase"] == "rl" && m["shift/version_lag_max"].(float64) > 0 {
			lagged++
		}
	}
	if turns == 0 || lagged == 0 {
		t.Fatalf("%d completions checked, %d steps trained on older tokens: the test proves nothing", turns, lagged)
	}
}

// A continuous-admission run with dynamic sampling replays: the learner's fill (stale drops,
// filtered groups, the rounds' limit) is rebuilt from the recording in the order it took groups.
func TestReplayContinuousWithDynamicSampling(t *testing.T) {
	sum := replayRun(t, 3, append(slices.Clone(asyncSets), "phases.rl.rl.dynamic_sampling={max_rounds: 2}", "phases.rl.steps=3", "checkpoint.keep=1")...)
	taken := 0 // the replay's lines equal the run's, episodes taken included
	for _, m := range metricLines(t, sum.Dir) {
		if m["phase"] == "rl" {
			taken += int(m["episodes/sampled"].(float64))
		}
	}
	if taken == 0 {
		t.Fatal("no episode taken: the replay proves nothing")
	}
}

// Under a heavy-tailed latency, bounded and admission order train every admitted group within
// η versions (nothing stale or cancelled), finish order with stale: keep cancels nothing, and
// each logs async/latency_bias; a bounded run and a kept-stale run replay.
func TestContinuousOrdersUnderATail(t *testing.T) {
	tail := `phases.rl.envs=[{name: calc, weight: 1, latency: {dist: lognormal, median: 2ms, p99_over_p50: 50}}]`
	for _, tc := range []struct{ order, stale string }{{"bounded", ""}, {"admission", ""}, {"finish", "keep"}} {
		t.Run(tc.order+tc.stale, func(t *testing.T) {
			sets := append(slices.Clone(asyncSets), "phases.rl.steps=4", tail, "phases.rl.rl.async.order="+tc.order)
			if tc.stale != "" {
				sets = append(sets, "phases.rl.rl.async.stale="+tc.stale)
			}
			if tc.order != "admission" {
				replayRun(t, 4, sets...)
			}
			c := tinyConfig(t, t.TempDir(), sets...)
			run, err := NewRun(c, Options{Envs: all.Builtins()})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := run.Train(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, m := range metricLines(t, run.Dir) {
				if m["phase"] != "rl" {
					continue
				}
				if m["async/cancelled_stale"].(float64) != 0 {
					t.Fatalf("step %v cancelled %v episodes", m["step"], m["async/cancelled_stale"])
				}
				if tc.stale == "" && (m["async/dropped_stale"].(float64) != 0 || m["shift/version_lag_max"].(float64) > 1) {
					t.Fatalf("step %v: %v dropped stale, lag max %v (bound 1)", m["step"], m["async/dropped_stale"], m["shift/version_lag_max"])
				}
				if b, ok := m["async/latency_bias"].(float64); !ok || !(b > 0) {
					t.Fatalf("step %v: async/latency_bias %v", m["step"], m["async/latency_bias"])
				}
			}
		})
	}
}
