// Package envtest is the suite every environment passes: built-in ones call Run from their own
// tests, and env/remote runs it through an HTTP client whose Spec.New returns remote clients.
//
// It checks reproducibility (a seed and an expert rng seed reproduce the whole episode), the
// contract (valid roles, finite rewards, episodes that end, Step before Reset and after Done
// failing with an error), that the expert solves held-out tasks and the noisy expert solves fewer,
// that hostile actions (garbage, binary, invalid UTF-8, 1 MiB, fake and broken tool tags, JSON
// bombs, mutations of the expert's own tool calls) yield observations rather than errors or
// panics, that train and held-out seeds both make valid tasks, that 32 instances run in parallel
// (run with -race), and that Close leaves no goroutine behind. An environment with difficulty
// levels passes the suite at each level, and as the equal mix of its levels.
//
// It does not check task quality beyond that, nor timing: there are no wall-clock limits. Run
// counts goroutines, so it must not run in parallel with other tests of the same binary.
package envtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/agentrl/agentrl/env"
)

// Options tunes the suite. Zero fields take the defaults in parentheses.
type Options struct {
	// Samples is the number of held-out seeds the expert is scored on (48; 16 with -short).
	Samples int
	// MinExpertSuccess is the share of those the noise-0 expert must solve (0.9).
	MinExpertSuccess float64
	// MaxSteps is the step budget of one episode; every episode, even one of garbage actions,
	// must end within it (64).
	MaxSteps int
	// Parallel is the number of goroutines each running its own instance (32; 8 with -short).
	Parallel int
}

func (o Options) withDefaults() Options {
	if o.Samples == 0 {
		o.Samples = 48
		if testing.Short() {
			o.Samples = 16
		}
	}
	if o.MinExpertSuccess == 0 {
		o.MinExpertSuccess = 0.9
	}
	if o.MaxSteps == 0 {
		o.MaxSteps = 64
	}
	if o.Parallel == 0 {
		o.Parallel = 32
		if testing.Short() {
			o.Parallel = 8
		}
	}
	return o
}

// NoisyNoise is the expert noise whose success rate must fall below the clean expert's.
const NoisyNoise = 0.5

// Run runs the whole suite against spec with default options.
func Run(t *testing.T, spec env.Spec) { RunWith(t, spec, Options{}) }

// RunWith runs the whole suite against spec.
func RunWith(t *testing.T, spec env.Spec, opts Options) {
	t.Helper()
	opts = opts.withDefaults()
	s := &suite{spec: spec, opts: opts}
	// Warm up once so goroutines a package starts lazily and keeps (pools, shared clients) are in
	// the baseline, then take it from inside a subtest, as the leak check will run in one.
	var baseline int
	t.Run("WarmUp", func(t *testing.T) {
		s.warmUp(t)
		baseline = settledGoroutines(0)
	})
	t.Run("Spec", s.testSpec)
	t.Run("SeedRanges", s.testSeedRanges)
	t.Run("Determinism", s.testDeterminism)
	t.Run("Contract", s.testContract)
	t.Run("Expert", s.testExpert)
	t.Run("Adversarial", s.testAdversarial)
	t.Run("Parallel", s.testParallel)
	t.Run("NoGoroutineLeak", func(t *testing.T) { checkLeaks(t, baseline) })
	if len(spec.Levels) > 0 && spec.AtLevel != nil {
		// Each level is an environment of its own, and so is the equal mix of them all.
		for _, l := range spec.Levels {
			t.Run(fmt.Sprintf("Level%d", l), func(t *testing.T) { RunWith(t, spec.AtLevel(l), opts) })
		}
		t.Run("LevelMix", func(t *testing.T) {
			mix, err := env.WithDifficulty(spec, env.Difficulty{Levels: spec.Levels})
			if err != nil {
				t.Fatal(err)
			}
			RunWith(t, mix, opts)
		})
	}
}

type suite struct {
	spec env.Spec
	opts Options
}

// expertRNG is the rng an expert gets for the task of seed in this suite; run twice, it must
// reproduce the same choices.
func expertRNG(seed int64) *rand.Rand { return rand.New(rand.NewPCG(uint64(seed), 0x5eed)) }

// newEnv makes an instance and registers its Close.
func (s *suite) newEnv(t testing.TB) env.Env {
	t.Helper()
	e, err := s.spec.New()
	if err != nil {
		t.Fatalf("%s: New: %v", s.spec.Name, err)
	}
	if e == nil {
		t.Fatalf("%s: New returned a nil Env", s.spec.Name)
	}
	t.Cleanup(func() { closeEnv(t, e) })
	return e
}

func closeEnv(t testing.TB, e env.Env) {
	if c, ok := e.(env.Closer); ok {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

func (s *suite) warmUp(t *testing.T) {
	t.Helper()
	e, err := s.spec.New()
	if err != nil {
		t.Fatalf("%s: New: %v", s.spec.Name, err)
	}
	defer closeEnv(t, e)
	seed := s.spec.Train.Lo
	if _, err := env.Play(context.Background(), e, s.spec.Expert(seed, 0, expertRNG(seed)), seed, s.opts.MaxSteps); err != nil {
		t.Fatalf("%s: expert episode for seed %d: %v", s.spec.Name, seed, err)
	}
}

// sampleSeeds returns n seeds spread over r, its ends included, the same on every run.
func sampleSeeds(r env.SeedRange, n int) []int64 {
	if int64(n) >= r.Len() {
		seeds := make([]int64, 0, r.Len())
		for s := r.Lo; s < r.Hi; s++ {
			seeds = append(seeds, s)
		}
		return seeds
	}
	seeds := []int64{r.Lo, r.Hi - 1}
	rng := rand.New(rand.NewPCG(uint64(r.Lo), uint64(r.Hi)))
	seen := map[int64]bool{r.Lo: true, r.Hi - 1: true}
	for len(seeds) < n {
		s := r.Lo + rng.Int64N(r.Len())
		if !seen[s] {
			seen[s] = true
			seeds = append(seeds, s)
		}
	}
	return seeds
}
