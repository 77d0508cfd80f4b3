package env

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
)

// SeedRange is the half-open range [Lo, Hi) of task seeds.
type SeedRange struct {
	Lo, Hi int64
}

// Contains reports whether seed is in the range.
func (r SeedRange) Contains(seed int64) bool { return seed >= r.Lo && seed < r.Hi }

// Len is the number of seeds in the range.
func (r SeedRange) Len() int64 { return r.Hi - r.Lo }

// Spec describes a registered environment.
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
	// Corpus returns n samples of the text this environment produces (prompts, observations,
	// expert actions) for training a tokenizer.
	Corpus func(n int) []string
}

// registry holds every Spec registered by the env/<name> packages' init functions.
var registry = struct {
	mu    sync.RWMutex // protects specs
	specs map[string]Spec
}{specs: map[string]Spec{}}

// Register adds s to the registry. It panics on an incomplete spec, overlapping seed ranges or a
// duplicate name: those are programming errors found at start-up.
func Register(s Spec) {
	if s.Name == "" || s.New == nil || s.Expert == nil || s.Corpus == nil {
		panic(fmt.Sprintf("env: incomplete spec %q", s.Name))
	}
	if s.Train.Len() <= 0 || s.Heldout.Len() <= 0 || (s.Train.Lo < s.Heldout.Hi && s.Heldout.Lo < s.Train.Hi) {
		panic(fmt.Sprintf("env %s: train %v and held-out %v seed ranges must be non-empty and disjoint", s.Name, s.Train, s.Heldout))
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if _, dup := registry.specs[s.Name]; dup {
		panic(fmt.Sprintf("env: %q registered twice", s.Name))
	}
	registry.specs[s.Name] = s
}

// Lookup returns the Spec registered under name, or an error listing the known names.
func Lookup(name string) (Spec, error) {
	registry.mu.RLock()
	s, ok := registry.specs[name]
	registry.mu.RUnlock()
	if !ok {
		return Spec{}, fmt.Errorf("env: unknown environment %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return s, nil
}

// Names lists the registered environments in order.
func Names() []string {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	names := make([]string, 0, len(registry.specs))
	for n := range registry.specs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
