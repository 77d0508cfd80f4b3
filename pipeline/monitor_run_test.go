package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/monitor"
	"github.com/agentrl/agentrl/traj"
)

// levelsEnv is a one-turn task whose difficulty is its seed's: seeds ≡ 0 (mod 3) never succeed,
// ≡ 2 always do, and ≡ 1 succeed for about half of the possible answers (by a hash of the
// answer). Uniformly drawn, two thirds of its groups have no reward variance; a sampler that
// finds the third level does better.
type levelsEnv struct{ seed int64 }

func (e *levelsEnv) Reset(_ context.Context, seed int64) (env.Observation, error) {
	e.seed = seed
	return env.Observation{Text: fmt.Sprintf("Level task %d.", seed)}, nil
}

func (e *levelsEnv) Step(_ context.Context, action string) (env.Transition, error) {
	ok := false
	switch e.seed % 3 {
	case 1:
		h := fnv.New32a()
		fmt.Fprintf(h, "%d/%s", e.seed, action)
		ok = h.Sum32()%2 == 0
	case 2:
		ok = true
	}
	r := 0.0
	if ok {
		r = 1
	}
	return env.Transition{Role: traj.RoleEnv, Done: true, Reward: r, Info: map[string]string{env.InfoSuccess: fmt.Sprint(ok)}}, nil
}

type levelsExpert struct{}

func (levelsExpert) Act(context.Context, string) (string, error) { return "answer", nil }

// testEnvs is the built-in environments with the test ones: test-ones (learning_test.go) and
// test-levels.
func testEnvs() *env.Registry {
	r := onesEnvs()
	if err := r.Register(env.Spec{
		Name: "test-levels", Description: "tasks of three difficulties, by seed",
		New:     func() (env.Env, error) { return &levelsEnv{}, nil },
		Train:   env.SeedRange{Lo: 0, Hi: 3000},
		Heldout: env.SeedRange{Lo: 3000, Hi: 4000},
		Expert:  func(int64, float64, *rand.Rand) env.Agent { return levelsExpert{} },
		Corpus: func(n int) []string {
			out := make([]string, n)
			for i := range out {
				out[i] = fmt.Sprintf("Level task %d. answer %d", i, i*7)
			}
			return out
		},
	}); err != nil {
		panic(err)
	}
	return r
}

// monitorRun trains a tiny run (tinyConfig with sets) on testEnvs and returns its RL step lines
// and its console output.
func monitorRun(t *testing.T, sets ...string) ([]map[string]any, string) {
	t.Helper()
	var out bytes.Buffer
	run, err := NewRun(tinyConfig(t, t.TempDir(), sets...), Options{Envs: testEnvs(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	var lines []map[string]any
	for _, m := range metricLines(t, run.Dir) {
		if m["phase"] == "rl" && m["eval"] == nil {
			lines = append(lines, m)
		}
	}
	return lines, out.String()
}

func actionsOf(m map[string]any) []string {
	var out []string
	as, _ := m["actions"].([]any)
	for _, a := range as {
		out = append(out, a.(string))
	}
	return out
}

// entropySets trains 6 RL steps with an entropy bonus and an entropy band no policy reaches, so
// that the controller raises the bonus after every trained step until its maximum.
var entropySets = []string{
	"phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.loss.entropy_coef=0.01", "phases.rl.steps=6",
	"monitor.entropy_control={low: 50, high: 60, entropy_coef: {min: 0, max: 0.04, step: 0.01}, clip_high: {min: 0.2, max: 0.3, step: 0.05}}",
}

// The entropy controller fires on every trained step whose entropy is below its band, moves the
// bonus and the upper clip by their steps up to their bounds, and logs each move in the metrics
// line, with the value the step trained with, and on the console.
func TestEntropyControlRun(t *testing.T) {
	lines, out := monitorRun(t, entropySets...)
	if len(lines) != 6 {
		t.Fatalf("%d RL lines, want 6", len(lines))
	}
	kc, kh := 0, 0 // the knobs' positions
	coef, clip := 0.01, 0.2
	for i, m := range lines {
		if m["monitor/entropy_coef"] != coef || m["monitor/clip_high"] != clip {
			t.Fatalf("step %d trained with entropy_coef %v clip_high %v, want %v %v", i+1, m["monitor/entropy_coef"], m["monitor/clip_high"], coef, clip)
		}
		acts := actionsOf(m)
		t.Logf("step %d: entropy %v, actions %q", i+1, m["explore/entropy"], acts)
		if m["signal/effective_batch"] == nil {
			if len(acts) != 0 {
				t.Fatalf("step %d trained nothing yet acted: %q", i+1, acts)
			}
			continue
		}
		var want []string
		why := fmt.Sprintf("exploration: mean token entropy %.4g below the band [50, 60]: ", m["explore/entropy"])
		if coef < 0.04 {
			kc++
			want = append(want, fmt.Sprintf("%srl.loss.entropy_coef %.4g → %.4g", why, coef, 0.01+float64(kc)*0.01))
			coef = min(0.01+float64(kc)*0.01, 0.04)
		}
		if clip < 0.3 {
			kh++
			want = append(want, fmt.Sprintf("%srl.loss.ppo.clip_high %.4g → %.4g", why, clip, 0.2+float64(kh)*0.05))
			clip = min(0.2+float64(kh)*0.05, 0.3)
		}
		if strings.Join(acts, "\n") != strings.Join(want, "\n") {
			t.Fatalf("step %d actions\n%s\nwant\n%s", i+1, strings.Join(acts, "\n"), strings.Join(want, "\n"))
		}
		for _, a := range acts {
			if !strings.Contains(out, fmt.Sprintf("monitor: rl step: %s\n", a)) {
				t.Fatalf("console lacks %q:\n%s", a, out)
			}
		}
	}
	if coef < 0.04 {
		t.Fatalf("the bonus reached only %v", coef)
	}
}

// A run killed while the entropy controller had moved its knobs resumes with their positions.
func TestResumeAfterKillWithEntropyControl(t *testing.T) {
	testResumeAfterKill(t, entropySets, []int{11, 13})
}

// levelsSets trains 8 RL steps of 4 groups of 4 on test-levels with dynamic sampling.
var levelsSets = []string{
	"phases.rl.envs=[{name: test-levels, weight: 1}]", "phases.rl.steps=8", "phases.rl.rl.groups_per_step=4",
	"phases.rl.rl.dynamic_sampling.max_rounds=2", "phases.rl.rl.loss.entropy_coef=0.01", "monitor.max_zero_var_share=0.5",
}

var taskSets = append(append([]string{}, levelsSets...),
	"monitor.task_sampling={explore: 0.25, decay: 0.5, max_tasks: 256, oversample: 2}")

// Difficulty-aware sampling replays the tasks whose groups had mixed outcomes: fewer groups have
// zero reward variance than when tasks are drawn uniformly, and the oversampling it switches on
// is logged.
func TestTaskSamplingRun(t *testing.T) {
	plain, _ := monitorRun(t, levelsSets...)
	aimed, out := monitorRun(t, taskSets...)
	mean := func(lines []map[string]any, key string) float64 {
		var s float64
		for _, m := range lines[1:] { // the first step knows no task yet
			s += m[key].(float64)
		}
		return s / float64(len(lines)-1)
	}
	replayed := 0.0
	var acts []string
	for i, m := range aimed {
		replayed += m["signal/tasks_replayed"].(float64)
		acts = append(acts, actionsOf(m)...)
		t.Logf("step %d: zero-variance share %v (uniform %v); fresh %v replayed %v, known %v learnable %v, oversample %v; %q", i+1,
			m["signal/zero_var_share"], plain[i]["signal/zero_var_share"], m["signal/tasks_fresh"], m["signal/tasks_replayed"],
			m["signal/tasks_known"], m["signal/tasks_learnable"], m["signal/oversample"], actionsOf(m))
		if _, ok := plain[i]["signal/tasks_fresh"]; ok {
			t.Fatal("a run without task sampling logs signal/tasks_fresh")
		}
	}
	zPlain, zAimed := mean(plain, "signal/zero_var_share"), mean(aimed, "signal/zero_var_share")
	t.Logf("zero-variance share after step 1: uniform %.3f, difficulty-aware %.3f; %v tasks replayed", zPlain, zAimed, replayed)
	if replayed == 0 {
		t.Fatal("no task was replayed")
	}
	if !(zAimed < zPlain-0.15) {
		t.Fatalf("zero-variance share %.3f with difficulty-aware sampling, %.3f without", zAimed, zPlain)
	}
	if len(acts) == 0 || !strings.HasPrefix(acts[0], "learning signal: ") || !strings.Contains(acts[0], "asks for ×2") {
		t.Fatalf("actions %q: want oversampling switched on, named as the learning signal's", acts)
	}
	if !strings.Contains(out, "monitor: rl step: learning signal: ") {
		t.Fatalf("console lacks the action:\n%s", out)
	}
}

// A run killed mid-phase resumes with the task sampler's estimates: its metrics are the
// uninterrupted run's.
func TestResumeAfterKillWithTaskSampling(t *testing.T) {
	testResumeAfterKill(t, taskSets, []int{13, 16})
}

// shiftSets trains at temperature 0.7 with a token-level correction: the behaviour
// distribution differs from the learner's every step, so the ESS is below 1, and the shift
// controller, told to want an ESS of at least 0.999999, tightens the cap after every trained
// step.
var shiftSets = []string{
	"phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.loss.entropy_coef=0.01", "phases.rl.steps=5",
	"rollout.temperature=0.7", "phases.rl.rl.allow_sampling_mismatch=true",
	"phases.rl.rl.loss.correction={level: token, cap: 8}",
	"monitor.shift_control={ess_low: 0.999999, ess_high: 1, kl_low: 0, kl_high: 1, factor: 0.5, cap: {min: 1, max: 8}}",
}

// The shift controller tightens the correction's cap while the measured ESS is below its bound,
// each move logged with the ESS and KL that fired it, and the update uses the cap it chose.
func TestShiftControlRun(t *testing.T) {
	lines, _ := monitorRun(t, shiftSets...)
	capV := 8.0
	for i, m := range lines {
		acts := actionsOf(m)
		t.Logf("step %d: ESS %v KL %v cap %v truncated %v; %q", i+1, m["shift/is_ess"], m["shift/behaviour_kl"], m["monitor/is_cap"], m["is/truncated_frac"], acts)
		if m["monitor/is_cap"] != capV {
			t.Fatalf("step %d trained with cap %v, want %v", i+1, m["monitor/is_cap"], capV)
		}
		if m["signal/effective_batch"] == nil {
			continue
		}
		if ess := m["shift/is_ess"].(float64); ess >= 0.999999 {
			t.Fatalf("step %d: ESS %v: the test needs a shift", i+1, ess)
		}
		if capV > 1 {
			want := fmt.Sprintf("distribution shift: importance-weight ESS %.6g below 0.999999 (behaviour KL %.3g): rl.loss.correction.cap %.4g → %.4g",
				m["shift/is_ess"], m["shift/behaviour_kl"], capV, capV/2)
			if len(acts) != 1 || acts[0] != want {
				t.Fatalf("step %d: actions %q, want %q", i+1, acts, want)
			}
			capV /= 2
		}
	}
	if capV > 1 {
		t.Fatalf("the cap came down only to %v", capV)
	}
	if last := lines[len(lines)-1]; !(last["is/truncated_frac"].(float64) > 0) {
		t.Fatalf("the last step, at cap 1, truncated no weight: the update did not use the chosen cap")
	}
}

// A run with the entropy controller and the task sampler replays exactly: the actions are
// decided from what the run logged, and the sampler's draws from the step's random stream.
func TestReplayWithMonitorActions(t *testing.T) {
	sets := append(append([]string{}, taskSets...), "phases.rl.rl.loss.entropy_coef=0.01",
		"monitor.entropy_control={low: 50, high: 60, entropy_coef: {min: 0, max: 0.04, step: 0.01}}")
	run, err := NewRun(tinyConfig(t, t.TempDir(), sets...), Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	sum, err := Replay(context.Background(), run.Dir, ReplayOptions{Opts: Options{Envs: testEnvs()}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Mismatch != "" || sum.Compared != 8 {
		t.Fatalf("replay compared %d lines: %s", sum.Compared, sum.Mismatch)
	}
}

// stalenessAccounting checks an asynchronous step line of a phase without dynamic sampling and
// without failed episodes against its groups of size members: the staleness histogram holds
// every episode trained, the episodes taken less those dropped as stale, and falls short of
// groups_kept × size only by the stale members of kept groups, each such group counted in
// async/partial_stale (it lost 1 to size−1 members). m is a line as the run builds it or as
// read back from metrics.jsonl.
func stalenessAccounting(m map[string]any, size int) error {
	num := func(v any) float64 {
		switch v := v.(type) {
		case int:
			return float64(v)
		case float64:
			return v
		}
		return math.NaN()
	}
	hist := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, "async/staleness/") {
			hist += num(v)
		}
	}
	sampled, stale := num(m["episodes/sampled"]), num(m["async/dropped_stale"])
	kept, partial := num(m["signal/groups_kept"]), num(m["async/partial_stale"])
	if hist != sampled-stale {
		return fmt.Errorf("staleness histogram holds %v episodes; %v were taken and %v dropped as stale", hist, sampled, stale)
	}
	if short := kept*float64(size) - hist; !(short >= partial && short <= partial*float64(size-1)) {
		return fmt.Errorf("staleness histogram holds %v episodes, %v groups of %d were trained, %v of them counted short of stale members", hist, kept, size, partial)
	}
	return nil
}

// In an asynchronous phase the actions act as in a synchronous one (the producer draws tasks
// while the learner observes steps), and each step logs its staleness histogram: the trained
// episodes by their version lag, which sum to the episodes trained.
func TestMonitorActionsAsync(t *testing.T) {
	sets := append(append([]string{}, asyncSets...), "phases.rl.envs=[{name: test-levels, weight: 1}]", "phases.rl.rl.groups_per_step=4",
		"monitor.task_sampling={explore: 0.25, decay: 0.5, max_tasks: 256}",
		"monitor.shift_control={ess_low: 0.999999, ess_high: 1, kl_low: 0, kl_high: 1, factor: 0.5, cap: {min: 1, max: 2}}")
	lines, _ := monitorRun(t, sets...)
	replayed, lagged, shiftActs := 0.0, 0.0, 0
	for i, m := range lines {
		for k, v := range m {
			if lag, ok := strings.CutPrefix(k, "async/staleness/"); ok && lag != "0" {
				lagged += v.(float64)
			}
		}
		if m["signal/effective_batch"] != nil {
			if err := stalenessAccounting(m, 4); err != nil {
				t.Fatalf("step %d: %v", i+1, err)
			}
		}
		replayed += m["signal/tasks_replayed"].(float64)
		for _, a := range actionsOf(m) {
			if strings.HasPrefix(a, "distribution shift: ") {
				shiftActs++
			}
		}
		t.Logf("step %d: lag max %v, replayed %v, actions %q", i+1, m["shift/version_lag_max"], m["signal/tasks_replayed"], actionsOf(m))
	}
	if replayed == 0 || lagged == 0 || shiftActs == 0 {
		t.Fatalf("over %d steps: %v tasks replayed, %v episodes trained with a lag, %d shift actions; want some of each", len(lines), replayed, lagged, shiftActs)
	}
}

// The step TestMonitorActionsAsync once failed on, rebuilt: with η = 1 the learner, at version
// 10, takes a group admitted at version 8 whose first three members started under version 8 and
// whose last one waited for an engine slot until version 9 (it finished after groups admitted
// later, so it was not taken a step earlier). The stale members are dropped and the other one is
// trained as a group of one: the step counts that group as partial, and its histogram holds the
// 13 episodes trained, not groups_kept × 4.
func TestStaleMembersOfAKeptGroupAreCounted(t *testing.T) {
	const size = 4
	ep := func(group uint64, v int32) *traj.Trajectory {
		return &traj.Trajectory{GroupID: group, Env: "test-levels", Tokens: []int32{1, 2, 3}, Versions: []int32{traj.NoVersion, v, v + 1},
			LossMask: []bool{false, true, true}, Status: traj.StatusOK, Turns: []traj.Turn{{Start: 1, End: 3, ObsEnd: 3}}, Reward: float64(group % 2)}
	}
	group := func(id uint64, versions ...int32) []*traj.Trajectory {
		var g []*traj.Trajectory
		for _, v := range versions {
			g = append(g, ep(id, v))
		}
		return g
	}
	p := config.Phase{RL: &config.RLConfig{GroupsPerStep: 4, GroupSize: size, Async: &config.AsyncConfig{MaxStaleness: 1}}}
	f := newStepFill(p, 10)
	for _, g := range [][]*traj.Trajectory{group(13, 8, 8, 8, 9), group(14, 9, 9, 9, 9), group(16, 9, 9, 9, 9), group(19, 9, 9, 9, 9)} {
		if !f.offer(g) {
			t.Fatalf("group %d was discarded", g[0].GroupID)
		}
	}
	f.done()
	st := &rlStep{phase: "rl", step: 5, version: 10, sample: monitor.Measure(f.taken, f.groups), fill: f.fill, async: f.asyncStats()}
	m := st.fields()
	if err := stalenessAccounting(m, size); err != nil {
		t.Fatal(err)
	}
	if m["signal/groups_kept"] != 4 || m["async/dropped_stale"] != 3 || m["async/partial_stale"] != 1 || m["async/staleness/1"] != 13 {
		t.Fatalf("groups kept %v, dropped stale %v, partial %v, histogram %v; want 4, 3, 1 and 13 episodes one version old",
			m["signal/groups_kept"], m["async/dropped_stale"], m["async/partial_stale"], m["async/staleness/1"])
	}
	// A group that loses every member is discarded whole, and is not partial.
	f = newStepFill(p, 10)
	if f.offer(group(12, 8, 8, 8, 8)) || !f.offer(group(13, 8, 9, 9, 9)) || f.stale != 5 || f.partial != 1 || f.discards != 1 {
		t.Fatalf("stale %d, partial %d, discards %d; want 5, 1 and 1", f.stale, f.partial, f.discards)
	}
}
