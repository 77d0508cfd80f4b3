package algo

import (
	"fmt"
	"slices"
	"strings"
)

// Registry maps names to constructors of one extension point. It is a plain value: the built-in
// registries are returned fresh by Estimators and PolicyLosses, so a test that registers its own
// entry changes nothing anyone else sees.
type Registry[F any] struct {
	kind string // "advantage estimator", "policy loss": used in error messages
	m    map[string]F
}

func newRegistry[F any](kind string) *Registry[F] {
	return &Registry[F]{kind: kind, m: map[string]F{}}
}

// Register adds a constructor under name. An empty or taken name is an error.
func (r *Registry[F]) Register(name string, f F) error {
	if name == "" {
		return fmt.Errorf("algo: %s name is empty", r.kind)
	}
	if _, ok := r.m[name]; ok {
		return fmt.Errorf("algo: %s %q is already registered", r.kind, name)
	}
	r.m[name] = f
	return nil
}

// Lookup returns the constructor registered under name; an unknown name is an error that lists
// the valid ones.
func (r *Registry[F]) Lookup(name string) (F, error) {
	f, ok := r.m[name]
	if !ok {
		var zero F
		return zero, fmt.Errorf("algo: unknown %s %q (valid: %s)", r.kind, name, strings.Join(r.Names(), ", "))
	}
	return f, nil
}

// Names lists the registered names in sorted order.
func (r *Registry[F]) Names() []string {
	out := make([]string, 0, len(r.m))
	for n := range r.m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// oneOf checks that name is in valid and names them all when it is not.
func oneOf(what, name string, valid []string) error {
	if slices.Contains(valid, name) {
		return nil
	}
	return fmt.Errorf("algo: unknown %s %q (valid: %s)", what, name, strings.Join(valid, ", "))
}
