package env

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/traj"
)

// levelEnv poses "level L task S" and ends at the first step, succeeding.
type levelEnv struct {
	level  int
	seed   int64
	closed *int
}

func (e *levelEnv) Reset(_ context.Context, seed int64) (Observation, error) {
	e.seed = seed
	return Observation{Text: fmt.Sprintf("level %d task %d", e.level, seed)}, nil
}

func (e *levelEnv) Step(context.Context, string) (Transition, error) {
	return Transition{Role: traj.RoleEnv, Done: true, Reward: 1, Info: map[string]string{InfoSuccess: "true"}}, nil
}

func (e *levelEnv) Close() error { *e.closed++; return nil }

// leveledSpec has levels 1, 2 and 3; closed counts the instances closed.
func leveledSpec(closed *int) Spec {
	s := testSpec("lv")
	s.Levels = []int{1, 2, 3}
	s.AtLevel = func(l int) Spec {
		at := testSpec("lv")
		at.New = func() (Env, error) { return &levelEnv{level: l, closed: closed}, nil }
		at.Corpus = func(n int) []string {
			out := make([]string, n)
			for i := range out {
				out[i] = fmt.Sprintf("L%d", l)
			}
			return out
		}
		return at
	}
	return s
}

func TestDifficultyValidate(t *testing.T) {
	levels := []int{1, 2, 3}
	for _, tc := range []struct {
		d      Difficulty
		levels []int
		want   string
	}{
		{Difficulty{Levels: []int{1}}, levels, ""},
		{Difficulty{Levels: []int{3, 1}, Weights: []float64{1, 2}}, levels, ""},
		{Difficulty{Levels: []int{1}}, nil, "has no difficulty levels"},
		{Difficulty{}, levels, "at least one level"},
		{Difficulty{Levels: []int{4}}, levels, "no level 4 (the environment has 1, 2, 3)"},
		{Difficulty{Levels: []int{1, 1}}, levels, "listed twice"},
		{Difficulty{Levels: []int{1, 2}, Weights: []float64{1}}, levels, "1 weights for 2 levels"},
		{Difficulty{Levels: []int{1, 2}, Weights: []float64{1, 0}}, levels, "weight of level 2 must be a positive number"},
		{Difficulty{Levels: []int{1, 2}, Weights: []float64{1, math.NaN()}}, levels, "positive number"},
		{Difficulty{Levels: []int{1, 2}, Weights: []float64{1, math.Inf(1)}}, levels, "positive number"},
		{Difficulty{Levels: []int{2}, Weights: []float64{1}}, levels, "a single level needs no weight"},
	} {
		err := tc.d.Validate(tc.levels)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v on %v: %v, want %q", tc.d, tc.levels, err, tc.want)
		}
	}
}

// TestLevelOf checks that the level is a function of the seed and that levels come in
// proportion to their weights.
func TestLevelOf(t *testing.T) {
	for _, d := range []Difficulty{
		{Levels: []int{1, 2, 3}},
		{Levels: []int{3, 1}, Weights: []float64{3, 1}},
		{Levels: []int{2}},
	} {
		const n = 20000
		count := map[int]int{}
		for seed := int64(0); seed < n; seed++ {
			l := d.LevelOf(seed)
			if l != d.LevelOf(seed) {
				t.Fatalf("%v: seed %d gives two levels", d, seed)
			}
			count[l]++
		}
		var total float64
		for i := range d.Levels {
			total += weight(d, i)
		}
		for i, l := range d.Levels {
			want := weight(d, i) / total
			// The binomial standard deviation at n = 20,000 is at most 0.0036: allow five.
			if got := float64(count[l]) / n; math.Abs(got-want) > 0.018 {
				t.Errorf("%v: level %d is %.3f of tasks, want %.3f", d, l, got, want)
			}
		}
		if len(count) != len(d.Levels) {
			t.Errorf("%v: levels drawn %v", d, count)
		}
	}
}

func weight(d Difficulty, i int) float64 {
	if d.Weights == nil {
		return 1
	}
	return d.Weights[i]
}

func TestWithDifficulty(t *testing.T) {
	ctx := context.Background()
	closed := 0
	d := Difficulty{Levels: []int{1, 3}, Weights: []float64{1, 3}}
	mix, err := WithDifficulty(leveledSpec(&closed), d)
	if err != nil {
		t.Fatal(err)
	}
	if mix.Levels != nil || mix.AtLevel != nil || !strings.Contains(mix.Description, "levels 1 (×1), 3 (×3)") {
		t.Errorf("mix spec: levels %v, description %q", mix.Levels, mix.Description)
	}
	e, err := mix.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Step(ctx, "x"); !errors.Is(err, ErrNotReset) {
		t.Errorf("step before reset: %v", err)
	}
	for seed := int64(0); seed < 40; seed++ {
		obs, err := e.Reset(ctx, seed)
		want := fmt.Sprintf("level %d task %d", d.LevelOf(seed), seed)
		if err != nil || obs.Text != want {
			t.Fatalf("seed %d: %q (%v), want %q", seed, obs.Text, err, want)
		}
		tr, err := e.Step(ctx, "a")
		if err != nil || tr.Info[InfoLevel] != fmt.Sprint(d.LevelOf(seed)) || tr.Info[InfoSuccess] != "true" {
			t.Fatalf("seed %d: final %+v, %v", seed, tr, err)
		}
		if _, err := e.Step(ctx, "a"); !errors.Is(err, ErrEpisodeDone) {
			t.Fatalf("seed %d: step after done: %v", seed, err)
		}
	}
	if err := e.(Closer).Close(); err != nil || closed != 2 {
		t.Errorf("Close: %v, %d level instances closed, want 2", err, closed)
	}
	// The corpus follows the weights: a quarter level 1, three quarters level 3, interleaved.
	c := mix.Corpus(8)
	if got := strings.Join(c, " "); got != "L1 L3 L1 L3 L3 L3 L3 L3" {
		t.Errorf("corpus %q", got)
	}
	if _, err := WithDifficulty(leveledSpec(&closed), Difficulty{Levels: []int{5}}); err == nil {
		t.Error("level 5 accepted")
	}
	if _, err := WithDifficulty(testSpec("flat"), Difficulty{Levels: []int{1}}); err == nil {
		t.Error("a spec without levels accepted a difficulty")
	}
}

func TestRegisterLevels(t *testing.T) {
	closed := 0
	for _, tc := range []struct {
		mod func(*Spec)
		ok  bool
	}{
		{func(*Spec) {}, true},
		{func(s *Spec) { s.AtLevel = nil }, false},
		{func(s *Spec) { s.Levels = nil }, false},
		{func(s *Spec) { s.Levels = []int{2, 1} }, false},
		{func(s *Spec) { s.Levels = []int{0, 1} }, false},
		{func(s *Spec) { s.Levels = []int{1, MaxLevel + 1} }, false},
	} {
		s := leveledSpec(&closed)
		tc.mod(&s)
		if err := NewRegistry().Register(s); (err == nil) != tc.ok {
			t.Errorf("levels %v, AtLevel %v: %v, want ok=%v", s.Levels, s.AtLevel != nil, err, tc.ok)
		}
	}
}
