package env

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
)

// SeedRange is the half-open range [Lo, Hi) of task seeds.
type SeedRange struct {
	Lo, Hi int64
}

// Contains reports whether seed is in the range.
func (r SeedRange) Contains(seed int64) bool { return seed >= r.Lo && seed < r.Hi }

// Len is the number of seeds in the range.
func (r SeedRange) Len() int64 { return r.Hi - r.Lo }

// Spec describes an environment, as a Registry holds it.
type Spec struct {
	Name        string
	Description string
	// New makes a fresh environment with its tools attached, ready for Reset.
	New func() (Env, error)
	// Train and Heldout are disjoint task-seed ranges.
	Train, Heldout SeedRange
	// Expert returns a policy for the task of seed. noise in [0, 1] is how often it errs or
	// skips a tool; rng drives those choices so demonstrations are reproducible.
	Expert func(seed int64, noise float64, rng *rand.Rand) Agent
	// DelegatingExpert, when set, is the expert of a run whose policy may hand sub-tasks to
	// sub-agents (rollout's delegate tool, named tool): the task of seed played by calling tool,
	// and each sub-task it wrote played by its Sub. nil: the environment's demonstrations never
	// delegate.
	DelegatingExpert func(seed int64, noise float64, rng *rand.Rand, tool string) DelegatingAgent
	// Corpus returns n samples of the text this environment produces (prompts, observations,
	// expert actions) for training a tokenizer.
	Corpus func(n int) []string
	// Levels lists the difficulty levels the environment can fix its tasks at, easiest first
	// (nil: it has none). Its default tasks, those of New, need not be of any one level.
	Levels []int
	// AtLevel returns the spec whose every task is of level l, one of Levels: the same name and
	// seed ranges, with its own New, Expert and Corpus. Nil exactly when Levels is.
	AtLevel func(l int) Spec
}

// Registry maps names to environment Specs. It is a plain value with no global state: the
// built-in environments come in a fresh one from env/all's Builtins, and a test that adds its own
// environment changes nothing anyone else sees. Fill it before use: Register must not run
// concurrently with other calls, while Lookup, Names and New are safe for concurrent use.
type Registry struct {
	specs map[string]Spec
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{specs: map[string]Spec{}}
}

// Register adds s. An incomplete spec, empty or overlapping seed ranges or a taken name is an
// error.
func (r *Registry) Register(s Spec) error {
	if s.Name == "" || s.New == nil || s.Expert == nil || s.Corpus == nil {
		return fmt.Errorf("env: incomplete spec %q", s.Name)
	}
	if s.Train.Len() <= 0 || s.Heldout.Len() <= 0 || (s.Train.Lo < s.Heldout.Hi && s.Heldout.Lo < s.Train.Hi) {
		return fmt.Errorf("env %s: train %v and held-out %v seed ranges must be non-empty and disjoint", s.Name, s.Train, s.Heldout)
	}
	if (len(s.Levels) == 0) != (s.AtLevel == nil) {
		return fmt.Errorf("env %s: levels and AtLevel must be given together", s.Name)
	}
	for i, l := range s.Levels {
		if l < 1 || l > MaxLevel || (i > 0 && l <= s.Levels[i-1]) {
			return fmt.Errorf("env %s: levels %v must be ascending in [1, %d]", s.Name, s.Levels, MaxLevel)
		}
	}
	if _, dup := r.specs[s.Name]; dup {
		return fmt.Errorf("env: %q registered twice", s.Name)
	}
	r.specs[s.Name] = s
	return nil
}

// Lookup returns the Spec registered under name, or an error listing the known names. A nil
// registry knows no names.
func (r *Registry) Lookup(name string) (Spec, error) {
	var s Spec
	ok := false
	if r != nil {
		s, ok = r.specs[name]
	}
	if !ok {
		return Spec{}, fmt.Errorf("env: unknown environment %q (known: %s)", name, strings.Join(r.Names(), ", "))
	}
	return s, nil
}

// Names lists the registered environments in order.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	names := make([]string, 0, len(r.specs))
	for n := range r.specs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New makes a fresh environment of the one registered under name; its method value is a
// rollout.EnvFactory.
func (r *Registry) New(name string) (Env, error) {
	spec, err := r.Lookup(name)
	if err != nil {
		return nil, err
	}
	return spec.New()
}

// Clone returns a new registry holding the same specs, for a caller that adds its own
// environments without changing what anyone else sees.
func (r *Registry) Clone() *Registry {
	out := NewRegistry()
	if r != nil {
		for n, s := range r.specs {
			out.specs[n] = s
		}
	}
	return out
}
