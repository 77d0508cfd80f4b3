package env

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// InfoLevel is the Info key a difficulty mix (WithDifficulty) sets on an episode's final
// transition: the task's difficulty level, in decimal.
const InfoLevel = "level"

// MaxLevel bounds a difficulty level.
const MaxLevel = 100

// Difficulty selects the levels an environment's tasks are drawn at: a task's level is drawn
// from Levels with probability proportional to Weights (equal when absent) by a generator
// seeded by the task seed alone, so the seed and the Difficulty still determine the whole task.
// The environment's Spec says which levels it has (Spec.Levels).
//
// In a run's YAML it is the difficulty block of a phase's environment entry:
//
//	envs:
//	  - name: calc
//	    weight: 1
//	    difficulty: {levels: [1, 2, 3], weights: [2, 1, 1]}
type Difficulty struct {
	Levels  []int     `yaml:"levels"`
	Weights []float64 `yaml:"weights,omitempty"`
}

// levelSalt separates the level draw from the tasks' own streams of the same seed.
const levelSalt = 0x1e7e1

// Validate reports the first problem, naming the setting by its YAML key under difficulty.
// levels are the levels the environment has (nil: it has none).
func (d Difficulty) Validate(levels []int) error {
	if len(levels) == 0 {
		return errors.New("difficulty: the environment has no difficulty levels")
	}
	if len(d.Levels) == 0 {
		return fmt.Errorf("difficulty.levels: at least one level is needed (the environment has %s)", FormatLevels(levels))
	}
	seen := map[int]bool{}
	for _, l := range d.Levels {
		if !slices.Contains(levels, l) {
			return fmt.Errorf("difficulty.levels: no level %d (the environment has %s)", l, FormatLevels(levels))
		}
		if seen[l] {
			return fmt.Errorf("difficulty.levels: level %d is listed twice", l)
		}
		seen[l] = true
	}
	if d.Weights == nil {
		return nil
	}
	if len(d.Weights) != len(d.Levels) {
		return fmt.Errorf("difficulty.weights: %d weights for %d levels", len(d.Weights), len(d.Levels))
	}
	for i, w := range d.Weights {
		if !(w > 0) || math.IsInf(w, 0) {
			return fmt.Errorf("difficulty.weights: the weight of level %d must be a positive number, got %v", d.Levels[i], w)
		}
	}
	if len(d.Levels) == 1 {
		return errors.New("difficulty.weights: a single level needs no weight")
	}
	return nil
}

// LevelOf is the level of the task of seed. d must be valid.
func (d Difficulty) LevelOf(seed int64) int {
	if len(d.Levels) == 1 {
		return d.Levels[0]
	}
	u := rand.New(rand.NewPCG(uint64(seed), levelSalt)).Float64()
	if d.Weights == nil {
		return d.Levels[int(u*float64(len(d.Levels)))]
	}
	var total float64
	for _, w := range d.Weights {
		total += w
	}
	u *= total
	for i, w := range d.Weights {
		if u < w {
			return d.Levels[i]
		}
		u -= w
	}
	return d.Levels[len(d.Levels)-1] // rounding
}

// String describes d, e.g. "levels 1, 2, 3" or "levels 1 (×2), 3 (×1)".
func (d Difficulty) String() string {
	parts := make([]string, len(d.Levels))
	for i, l := range d.Levels {
		parts[i] = strconv.Itoa(l)
		if d.Weights != nil {
			parts[i] += fmt.Sprintf(" (×%g)", d.Weights[i])
		}
	}
	if len(parts) == 1 {
		return "level " + parts[0]
	}
	return "levels " + strings.Join(parts, ", ")
}

// FormatLevels lists levels as "1, 2, 3".
func FormatLevels(levels []int) string {
	parts := make([]string, len(levels))
	for i, l := range levels {
		parts[i] = strconv.Itoa(l)
	}
	return strings.Join(parts, ", ")
}

// WithDifficulty returns spec drawing its tasks at the levels of d: the same name and seed
// ranges, a New whose instances play each task at the level d gives its seed (an instance of
// spec.AtLevel of that level, made on first use and kept), the expert of that level, and a
// corpus that interleaves the levels' corpora in proportion to d's weights; it has no levels
// of its own. An invalid d, or
// a spec without levels, is an error.
func WithDifficulty(spec Spec, d Difficulty) (Spec, error) {
	if err := d.Validate(spec.Levels); err != nil {
		return Spec{}, fmt.Errorf("env %s: %w", spec.Name, err)
	}
	at := make(map[int]Spec, len(d.Levels))
	for _, l := range d.Levels {
		at[l] = spec.AtLevel(l)
	}
	out := spec
	out.Description = fmt.Sprintf("%s; %s", spec.Description, d)
	out.Levels, out.AtLevel = nil, nil // a mix is not fixed at one level
	out.New = func() (Env, error) { return &mixEnv{d: d, at: at, inst: map[int]Env{}}, nil }
	out.Expert = func(seed int64, noise float64, rng *rand.Rand) Agent {
		return at[d.LevelOf(seed)].Expert(seed, noise, rng)
	}
	if spec.DelegatingExpert != nil {
		out.DelegatingExpert = func(seed int64, noise float64, rng *rand.Rand, tool string) DelegatingAgent {
			return at[d.LevelOf(seed)].DelegatingExpert(seed, noise, rng, tool)
		}
	}
	out.Corpus = func(n int) []string { return mixCorpus(d, at, n) }
	return out, nil
}

// mixCorpus takes n samples from the levels' corpora: level i's share is its weight's, the
// largest remainders rounded up, and the samples of the levels alternate.
func mixCorpus(d Difficulty, at map[int]Spec, n int) []string {
	if n <= 0 {
		return nil
	}
	w := d.Weights
	if w == nil {
		w = make([]float64, len(d.Levels))
		for i := range w {
			w[i] = 1
		}
	}
	var total float64
	for _, x := range w {
		total += x
	}
	counts := make([]int, len(d.Levels))
	left := n
	for i, x := range w {
		counts[i] = int(float64(n) * x / total)
		left -= counts[i]
	}
	for i := 0; left > 0; i = (i + 1) % len(counts) {
		counts[i]++
		left--
	}
	parts := make([][]string, len(d.Levels))
	for i, l := range d.Levels {
		parts[i] = at[l].Corpus(counts[i])
	}
	out := make([]string, 0, n)
	for j := 0; len(out) < n; j++ {
		added := false
		for i := range parts {
			if j < len(parts[i]) {
				out = append(out, parts[i][j])
				added = true
			}
		}
		if !added {
			break // a level's corpus came up short
		}
	}
	return out
}

// mixEnv plays each task with the instance of its level.
type mixEnv struct {
	d    Difficulty
	at   map[int]Spec
	inst map[int]Env // made on first use; closed by Close
	cur  Env         // the instance of the current episode
	lvl  int
	done bool
}

func (e *mixEnv) Reset(ctx context.Context, seed int64) (Observation, error) {
	e.cur, e.done = nil, false
	l := e.d.LevelOf(seed)
	in, ok := e.inst[l]
	if !ok {
		var err error
		if in, err = e.at[l].New(); err != nil {
			return Observation{}, fmt.Errorf("env: level %d: %w", l, err)
		}
		e.inst[l] = in
	}
	obs, err := in.Reset(ctx, seed)
	if err != nil {
		return obs, err
	}
	e.cur, e.lvl = in, l
	return obs, nil
}

func (e *mixEnv) Step(ctx context.Context, action string) (Transition, error) {
	switch {
	case e.cur == nil:
		return Transition{}, ErrNotReset
	case e.done:
		return Transition{}, ErrEpisodeDone
	}
	tr, err := e.cur.Step(ctx, action)
	if err != nil || !tr.Done {
		return tr, err
	}
	e.done = true
	info := make(map[string]string, len(tr.Info)+1)
	maps.Copy(info, tr.Info)
	info[InfoLevel] = strconv.Itoa(e.lvl)
	tr.Info = info
	return tr, nil
}

// Close closes every level's instance.
func (e *mixEnv) Close() error {
	var errs []error
	for _, l := range slices.Sorted(maps.Keys(e.inst)) {
		errs = append(errs, closeInner(e.inst[l]))
	}
	e.inst, e.cur = map[int]Env{}, nil
	return errors.Join(errs...)
}
