package monitor

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/all"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/learn"
)

func TestMonitorNamesTheBrokenInvariant(t *testing.T) {
	mo := New(config.MonitorConfig{MinEntropy: 0.1, MaxZeroVarShare: 0.8, MaxKL: 0.05})
	trained := func(entropy, kl float64) *learn.RLReport {
		return &learn.RLReport{RLStats: learn.RLStats{Entropy: entropy}, Shift: algo.Shift{KL: kl}}
	}
	cases := []struct {
		s    step
		want []string
	}{
		{step{learn: trained(0.5, 0.001), sample: Stats{zeroVarShare: 0.2}}, nil},
		{step{learn: trained(0.01, 0)}, []string{"exploration"}},
		{step{}, []string{"trained nothing"}}, // no entropy or shift was measured, and it says so
		{step{sample: Stats{zeroVarShare: 0.95}}, []string{"trained nothing", "learning signal"}},
		{step{learn: trained(0.5, 0.2), sample: Stats{zeroVarShare: 1}}, []string{"learning signal", "distribution shift"}},
	}
	for i, c := range cases {
		got := mo.Check(c.s.learn, c.s.sample)
		if len(got) != len(c.want) {
			t.Fatalf("case %d: warnings %q, want %d naming %v", i, got, len(c.want), c.want)
		}
		for j, w := range c.want {
			if !strings.Contains(got[j], w) {
				t.Fatalf("case %d: warning %q does not name %q", i, got[j], w)
			}
		}
	}
}

// A distilling step warns when its teacher's judgement is a degenerate signal: the teacher is
// the student (|logπ − logπ_T| ~0 at every token), gives every token one logprob, or failed for
// most episodes; a teacher that disagrees with the student, token by token, does not.
func TestMonitorWarnsOfDegenerateTeacher(t *testing.T) {
	distilled := func(m algo.Metrics) *learn.RLReport {
		return &learn.RLReport{RLStats: learn.RLStats{Entropy: 0.5}, Distill: m}
	}
	healthy := func() algo.Metrics {
		return algo.Metrics{"distill/tokens": 40, "distill/kl_mean": 0.3, "distill/kl_abs_max": 1.2, "distill/teacher_lp_range": 4, "distill/teacher_failed_episodes": 0}
	}
	with := func(k string, v float64) algo.Metrics { m := healthy(); m[k] = v; return m }
	sample := Stats{episodes: 10, zeroVarShare: 0.2}
	for _, c := range []struct {
		name string
		cfg  config.MonitorConfig
		m    algo.Metrics
		want []string
	}{
		{"healthy", config.MonitorConfig{}, healthy(), nil},
		{"teacher is the student", config.MonitorConfig{}, with("distill/kl_abs_max", 3e-7), []string{"as the student does"}},
		{"exactly the student", config.MonitorConfig{}, with("distill/kl_abs_max", 0), []string{"as the student does"}},
		{"under a configured floor", config.MonitorConfig{MinTeacherKL: 2}, healthy(), []string{"below 2"}},
		{"one logprob for every token", config.MonitorConfig{}, with("distill/teacher_lp_range", 0), []string{"the same logprob"}},
		{"student and teacher both constant", config.MonitorConfig{}, algo.Metrics{"distill/tokens": 5, "distill/kl_abs_max": 0, "distill/teacher_lp_range": 0}, []string{"as the student does", "the same logprob"}},
		{"teacher failed for most episodes", config.MonitorConfig{}, with("distill/teacher_failed_episodes", 9), []string{"failed for 9 of 10 episodes"}},
		{"teacher failed for a few episodes", config.MonitorConfig{}, with("distill/teacher_failed_episodes", 2), nil},
		{"a single judged token", config.MonitorConfig{}, algo.Metrics{"distill/tokens": 1, "distill/kl_abs_max": 0.5, "distill/teacher_lp_range": 0}, nil},
		{"no judged token", config.MonitorConfig{}, algo.Metrics{"distill/tokens": 0}, nil},
	} {
		c.cfg.MinEntropy, c.cfg.MaxZeroVarShare, c.cfg.MaxKL = 0.1, 0.8, 0.05
		got := New(c.cfg).Check(distilled(c.m), sample)
		if len(got) != len(c.want) {
			t.Fatalf("%s: warnings %q, want %d naming %v", c.name, got, len(c.want), c.want)
		}
		for j, w := range c.want {
			if !strings.Contains(got[j], w) || !strings.Contains(got[j], "learning signal degenerating") {
				t.Fatalf("%s: warning %q does not name %q", c.name, got[j], w)
			}
		}
	}
	// An RL step without a teacher has no distillation warnings.
	if got := New(config.MonitorConfig{MinEntropy: 0.1, MaxZeroVarShare: 0.8, MaxKL: 0.05}).Check(distilled(nil), sample); len(got) != 0 {
		t.Fatalf("warnings without a teacher: %q", got)
	}
}

// A knob moves by its step (or factor) from the phase's value, stays within its bounds, and says
// when it cannot move.
func TestKnobMoves(t *testing.T) {
	add := &knob{start: 0.001, min: 0, max: 0.006, step: 0.002}
	var got []float64
	for _, dir := range []int{+1, +1, +1, +1, -1, -1, -1, -1, -1} {
		add.move(dir)
		got = append(got, add.value())
	}
	// 0.003, 0.005, 0.006 (0.007 clamped), stays; 0.005, 0.003, 0.001, 0 (−0.001 clamped), stays
	want := []float64{0.001 + 0.002, 0.001 + 2*0.002, 0.006, 0.006, 0.001 + 2*0.002, 0.001 + 0.002, 0.001, 0, 0}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-15 {
			t.Fatalf("additive knob after move %d: %v, want %v (all: %v)", i+1, got[i], want[i], got)
		}
	}
	mul := &knob{start: 4, min: 1, max: 8, factor: 0.5}
	moves := []struct {
		dir   int
		moved bool
		value float64
	}{{-1, true, 2}, {-1, true, 1}, {-1, false, 1}, {+1, true, 2}, {+1, true, 4}, {+1, true, 8}, {+1, false, 8}}
	for i, m := range moves {
		if moved := mul.move(m.dir); moved != m.moved || mul.value() != m.value {
			t.Fatalf("multiplicative knob, move %d (%+d): moved %v value %v, want %v %v", i+1, m.dir, moved, mul.value(), m.moved, m.value)
		}
	}
}

// step is what the monitor reads of an RL step: the learner's report (nil when nothing was
// trained) and the sampled episodes' statistics.
type step struct {
	learn  *learn.RLReport
	sample Stats
}

func trainedStep(entropy, ess, kl float64) *step {
	return &step{learn: &learn.RLReport{RLStats: learn.RLStats{Entropy: entropy}, Shift: algo.Shift{ESS: ess, KL: kl}}}
}

// The entropy controller raises both knobs below the band, lowers them above it, holds inside,
// and does nothing on a step that trained nothing; each move names the invariant, the entropy
// and the band, and the setting's old and new value.
func TestEntropyControl(t *testing.T) {
	coef := &knob{setting: "rl.loss.entropy_coef", start: 0, min: 0, max: 0.01, step: 0.005}
	clip := &knob{setting: "rl.loss.ppo.clip_high", start: 0.2, min: 0.2, max: 0.28, step: 0.04}
	e := &entropyControl{low: 0.1, high: 0.5, coef: coef, clip: clip, knobs: []*knob{coef, clip}}
	cases := []struct {
		s          *step
		want       []string
		coef, clip float64
	}{
		{trainedStep(0.05, 1, 0), []string{
			"exploration: mean token entropy 0.05 below the band [0.1, 0.5]: rl.loss.entropy_coef 0 → 0.005",
			"exploration: mean token entropy 0.05 below the band [0.1, 0.5]: rl.loss.ppo.clip_high 0.2 → 0.24"}, 0.005, 0.24},
		{trainedStep(0.3, 1, 0), nil, 0.005, 0.24},
		{&step{}, nil, 0.005, 0.24},
		{trainedStep(0.02, 1, 0), []string{
			"exploration: mean token entropy 0.02 below the band [0.1, 0.5]: rl.loss.entropy_coef 0.005 → 0.01",
			"exploration: mean token entropy 0.02 below the band [0.1, 0.5]: rl.loss.ppo.clip_high 0.24 → 0.28"}, 0.01, 0.28},
		{trainedStep(0.02, 1, 0), nil, 0.01, 0.28}, // both at their maximum
		{trainedStep(0.9, 1, 0), []string{
			"exploration: mean token entropy 0.9 above the band [0.1, 0.5]: rl.loss.entropy_coef 0.01 → 0.005",
			"exploration: mean token entropy 0.9 above the band [0.1, 0.5]: rl.loss.ppo.clip_high 0.28 → 0.24"}, 0.005, 0.24},
	}
	for i, c := range cases {
		got := e.act(c.s.learn)
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Fatalf("case %d: actions\n%s\nwant\n%s", i, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
		if math.Abs(coef.value()-c.coef) > 1e-15 || math.Abs(clip.value()-c.clip) > 1e-15 {
			t.Fatalf("case %d: entropy_coef %v clip_high %v, want %v %v", i, coef.value(), clip.value(), c.coef, c.clip)
		}
	}
}

// The shift controller tightens the cap and the mask when the ESS is low or the KL high, loosens
// them when both are well within bounds, and holds in between; the mask's lower bound moves with
// its upper bound, their product kept.
func TestShiftControl(t *testing.T) {
	cfg := config.ShiftControlConfig{ESSLow: 0.8, ESSHigh: 0.95, KLLow: 0.01, KLHigh: 0.05, Factor: 0.5,
		Cap: &config.RangeConfig{Min: 1, Max: 8}, Mask: &config.RangeConfig{Min: 1.5, Max: 4}}
	loss := algo.DefaultLossConfig()
	loss.Correction = algo.CorrectionConfig{Level: "token", Cap: 4, MaskLow: 0.5, MaskHigh: 4}
	a := &Actions{loss: loss}
	capK := &knob{setting: "rl.loss.correction.cap", start: 4, min: 1, max: 8, factor: 0.5}
	maskK := &knob{setting: "rl.loss.correction.mask_high", start: 4, min: 1.5, max: 4, factor: 0.5}
	a.shift = &shiftControl{cfg: cfg, cap: capK, mask: maskK, knobs: []*knob{capK, maskK}}
	cases := []struct {
		s           *step
		want        []string
		cap, hi, lo float64
	}{
		{trainedStep(0, 0.6, 0.02), []string{
			"distribution shift: importance-weight ESS 0.6 below 0.8 (behaviour KL 0.02): rl.loss.correction.cap 4 → 2",
			"distribution shift: importance-weight ESS 0.6 below 0.8 (behaviour KL 0.02): rl.loss.correction.mask_high 4 → 2"}, 2, 2, 1},
		{trainedStep(0, 0.9, 0.03), nil, 2, 2, 1}, // within both bands
		{trainedStep(0, 0.9, 0.2), []string{
			"distribution shift: behaviour KL 0.2 above 0.05 (importance-weight ESS 0.9): rl.loss.correction.cap 2 → 1",
			"distribution shift: behaviour KL 0.2 above 0.05 (importance-weight ESS 0.9): rl.loss.correction.mask_high 2 → 1.5"}, 1, 1.5, 2.0 / 1.5},
		{&step{}, nil, 1, 1.5, 2.0 / 1.5},
		{trainedStep(0, 0.99, 0.001), []string{
			"distribution shift: importance-weight ESS 0.99 above 0.95 and behaviour KL 0.001 below 0.01: rl.loss.correction.cap 1 → 2",
			"distribution shift: importance-weight ESS 0.99 above 0.95 and behaviour KL 0.001 below 0.01: rl.loss.correction.mask_high 1.5 → 2"}, 2, 2, 1},
		{trainedStep(0, 0.99, 0.02), nil, 2, 2, 1}, // ESS high but KL not low: hold
	}
	for i, c := range cases {
		got := a.shift.act(c.s.learn)
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Fatalf("case %d: actions\n%s\nwant\n%s", i, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
		lc := a.lossConfig().Correction
		if lc.Cap != c.cap || lc.MaskHigh != c.hi || math.Abs(lc.MaskLow-c.lo) > 1e-15 || lc.Level != "token" {
			t.Fatalf("case %d: correction %+v, want cap %v mask [%v, %v]", i, lc, c.cap, c.lo, c.hi)
		}
	}
}

func outcome(env string, seed int64, n, succ int) groupOutcome {
	return groupOutcome{env: env, seed: seed, n: n, succ: succ}
}

// The task sampler's estimates decay, it forgets the least recently observed task, draws a
// remembered task in proportion to p̂(1−p̂) among those not already drawn, and falls back to
// a fresh task when none is learnable.
func TestTaskSamplerEstimatesAndDraws(t *testing.T) {
	envs := all.Builtins()
	mix := []config.EnvWeight{{Name: "calc", Weight: 1}}
	s := newTaskSampler(config.TaskSamplingConfig{Explore: 0, Decay: 0.5, MaxTasks: 2}, envs, mix)
	s.observe([]groupOutcome{outcome("calc", 1, 4, 2), outcome("calc", 2, 4, 0)}, 0, 1)
	// seed 1: p̂ 2/4 → 0.25; seed 2: p̂ 0 → 0. A third task forgets seed 1 (observed first)…
	s.observe([]groupOutcome{outcome("calc", 2, 4, 0), outcome("calc", 3, 4, 1)}, 0, 1)
	if len(s.known) != 2 || s.known[0].Seed != 2 || s.known[1].Seed != 3 {
		t.Fatalf("remembered %+v, want seeds 2 and 3", s.known)
	}
	// …and seed 2 observed again: succ 0.5·0 + 0, n 0.5·4 + 4 = 6.
	if k := s.known[0]; k.Succ != 0 || k.N != 6 {
		t.Fatalf("seed 2: %+v, want succ 0 n 6", k)
	}
	// seed 3 again, all 4 succeed: succ 0.5·1 + 4 = 4.5, n 0.5·4 + 4 = 6, p̂ 0.75, p̂(1−p̂) 0.1875.
	s.observe([]groupOutcome{outcome("calc", 3, 4, 4)}, 0, 1)
	if k := s.known[1]; k.Succ != 4.5 || k.N != 6 || k.learnability() != 0.1875 {
		t.Fatalf("seed 3: %+v (learnability %v), want succ 4.5 n 6, 0.1875", k, k.learnability())
	}
	// Only seed 3 is learnable: drawn once, then (drawn, not observed) fresh tasks follow.
	rng := rand.New(rand.NewPCG(1, 2))
	tasks, err := s.draw(rng, 3, 100)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := envs.Lookup("calc")
	if tasks[0].Seed != 3 || tasks[0].GroupID != 100 {
		t.Fatalf("first draw %+v, want the learnable seed 3 as group 100", tasks[0])
	}
	for i, tk := range tasks[1:] {
		if tk.Seed == 3 || tk.Seed < spec.Train.Lo || tk.Seed >= spec.Train.Hi || tk.GroupID != uint64(101+i) || tk.Env != "calc" {
			t.Fatalf("draw %d: %+v, want a fresh calc task as group %d", i+1, tk, 101+i)
		}
	}
	if c := s.takeCounts(); c.replayed != 1 || c.fresh != 2 || c.known != 2 || c.learnable != 1 {
		t.Fatalf("counts %+v, want 1 replayed, 2 fresh, 2 known, 1 learnable", c)
	}
}

// Among learnable tasks the draw is proportional to p̂(1−p̂): the draw's uniform number, taken
// from the same stream, falls in the first task's share or the second's.
func TestTaskSamplerProportional(t *testing.T) {
	mix := []config.EnvWeight{{Name: "calc", Weight: 1}}
	for seed := range uint64(40) {
		s := newTaskSampler(config.TaskSamplingConfig{Explore: 0.25, Decay: 0.5, MaxTasks: 8}, all.Builtins(), mix)
		s.observe([]groupOutcome{outcome("calc", 10, 4, 2), outcome("calc", 20, 4, 1), outcome("calc", 30, 4, 4)}, 0, 1)
		// learnability: seed 10: 0.25, seed 20: 0.1875, seed 30: 0 (never drawn).
		ref := rand.New(rand.NewPCG(seed, 7))
		explore := ref.Float64()
		u := ref.Float64() * (0.25 + 0.1875)
		got, err := s.next(rand.New(rand.NewPCG(seed, 7)), 5)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case explore < 0.25:
			if got.Seed == 10 || got.Seed == 20 || got.Seed == 30 {
				t.Fatalf("stream %d: an exploring draw gave remembered seed %d", seed, got.Seed)
			}
		case u < 0.25:
			if got.Seed != 10 {
				t.Fatalf("stream %d: u %v in seed 10's share, drew %d", seed, u, got.Seed)
			}
		default:
			if got.Seed != 20 {
				t.Fatalf("stream %d: u %v in seed 20's share, drew %d", seed, u, got.Seed)
			}
		}
	}
}

// Drawing a step's tasks one group at a time (as an asynchronous controller that admits groups
// one by one does) gives the tasks draw gives for the step, and a sampler restored from its
// saved state draws what the original draws.
func TestTaskSamplerOneAtATimeAndRestore(t *testing.T) {
	mix := []config.EnvWeight{{Name: "calc", Weight: 2}, {Name: "maze", Weight: 1}}
	cfg := config.TaskSamplingConfig{Explore: 0.3, Decay: 0.7, MaxTasks: 64}
	mk := func() *taskSampler {
		s := newTaskSampler(cfg, all.Builtins(), mix)
		var obs []groupOutcome
		for i := range 20 {
			obs = append(obs, outcome([]string{"calc", "maze"}[i%2], int64(i), 8, i%9))
		}
		s.observe(obs, 0, 1)
		return s
	}
	a, b := mk(), mk()
	ra, rb := rand.New(rand.NewPCG(3, 4)), rand.New(rand.NewPCG(3, 4))
	batch, err := a.draw(ra, 12, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for i := range batch {
		one, err := b.next(rb, 1000+uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		if one != batch[i] {
			t.Fatalf("group %d: one at a time %+v, in a batch %+v", i, one, batch[i])
		}
	}
	data, err := json.Marshal(mk().state())
	if err != nil {
		t.Fatal(err)
	}
	var st taskSamplerState
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	c := newTaskSampler(cfg, all.Builtins(), mix)
	if err := c.restore(&st); err != nil {
		t.Fatal(err)
	}
	again, err := c.draw(rand.New(rand.NewPCG(3, 4)), 12, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, batch) {
		t.Fatalf("restored sampler drew\n%+v\nthe original\n%+v", again, batch)
	}
}

// Oversampling switches on after a step whose zero-variance share is above the limit, and off
// after one at or below it, saying so each time.
func TestTaskSamplerOversample(t *testing.T) {
	s := newTaskSampler(config.TaskSamplingConfig{Explore: 0.5, Decay: 0.5, MaxTasks: 8, Oversample: 2.5}, all.Builtins(), []config.EnvWeight{{Name: "calc", Weight: 1}})
	g := []groupOutcome{outcome("calc", 1, 4, 0)}
	if got := s.observe(g, 0.5, 0.9); got != nil || s.groups(4) != 4 {
		t.Fatalf("below the limit: %q, groups(4) = %d", got, s.groups(4))
	}
	got := s.observe(g, 0.95, 0.9)
	if len(got) != 1 || got[0] != "learning signal: 95% of the step's groups had zero reward variance (limit 90%): dynamic sampling asks for ×2.5 the groups it misses" {
		t.Fatalf("above the limit: %q", got)
	}
	if n := s.groups(3); n != 8 { // ⌈3 · 2.5⌉
		t.Fatalf("groups(3) = %d while oversampling, want 8", n)
	}
	if got := s.observe(g, 1, 0.9); got != nil {
		t.Fatalf("still above: %q", got)
	}
	if got := s.observe(g, 0.9, 0.9); len(got) != 1 || !strings.Contains(got[0], "back to ×1") || s.groups(3) != 3 {
		t.Fatalf("at the limit: %q, groups(3) = %d", got, s.groups(3))
	}
}

// Drawing a round's tasks one group at a time (DrawTask) gives what DrawTasks gives for the
// round, with and without the task sampler.
func TestDrawTaskOneAtATime(t *testing.T) {
	p := config.Phase{Name: "rl", Kind: "rl", Envs: []config.EnvWeight{{Name: "calc", Weight: 1}, {Name: "maze", Weight: 3}}, RL: &config.RLConfig{}}
	for _, on := range []bool{false, true} {
		reg := all.Builtins()
		mk := func() *Actions {
			if !on {
				return nil
			}
			a := &Actions{tasks: newTaskSampler(config.TaskSamplingConfig{Explore: 0.4, Decay: 0.5, MaxTasks: 16}, reg, p.Envs)}
			a.tasks.observe([]groupOutcome{outcome("calc", 3, 4, 1), outcome("maze", 9, 4, 2), outcome("maze", 11, 4, 3)}, 0, 1)
			return a
		}
		batch, err := mk().DrawTasks(reg, rand.New(rand.NewPCG(5, 6)), p, 10, 300)
		if err != nil {
			t.Fatal(err)
		}
		r, rng := mk(), rand.New(rand.NewPCG(5, 6))
		for i, want := range batch {
			got, err := r.DrawTask(reg, rng, p, 300+uint64(i))
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("sampler on %v, group %d: one at a time %+v, in a round %+v", on, i, got, want)
			}
		}
	}
}

// The latency-bias warning fires above monitor.max_latency_bias only, and never when it is 0.
func TestCheckLatencyBias(t *testing.T) {
	mo := New(config.MonitorConfig{MaxLatencyBias: 1.2})
	if w := mo.CheckLatencyBias(1.3); !strings.HasPrefix(w, LatencyBiasWarning) || !strings.Contains(w, "1.30×") || !strings.Contains(w, "limit 1.20×") {
		t.Fatalf("bias 1.3 over 1.2: warning %q", w)
	}
	for _, b := range []float64{1.2, 1.1, 0.8, math.NaN()} {
		if w := mo.CheckLatencyBias(b); w != "" {
			t.Errorf("bias %v within 1.2 warned %q", b, w)
		}
	}
	if w := New(config.MonitorConfig{}).CheckLatencyBias(5); w != "" {
		t.Errorf("max_latency_bias 0 (off) warned %q", w)
	}
}
