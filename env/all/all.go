// Package all gathers the built-in environments: Builtins returns a fresh registry of them.
package all

import (
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/calc"
	"github.com/agentrl/agentrl/env/code"
	"github.com/agentrl/agentrl/env/ledger"
	"github.com/agentrl/agentrl/env/maze"
	"github.com/agentrl/agentrl/env/parts"
	"github.com/agentrl/agentrl/env/search"
)

// Builtins returns a new registry holding every built-in environment. Each call builds a fresh
// one, so a caller that adds its own environments changes nothing anyone else sees.
func Builtins() *env.Registry {
	r := env.NewRegistry()
	for _, s := range []env.Spec{calc.Spec(), calc.NoToolSpec(), code.Spec(), ledger.Spec(), maze.Spec(), parts.Spec(), search.Spec()} {
		if err := r.Register(s); err != nil {
			panic(err) // a built-in spec is incomplete or two share a name: a programming error
		}
	}
	return r
}
