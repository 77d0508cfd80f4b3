package remote

import (
	"context"
	"fmt"
	"sort"

	"github.com/agentrl/agentrl/env"
)

// Pools are a run's remote environments, open and registered.
type Pools map[string]*Pool

// Register opens a pool for each definition (name → its remote block) and registers its spec in
// reg under that name. onDead, when not nil, is called once for each pool that dies. On error
// the pools already opened are closed.
func Register(ctx context.Context, reg *env.Registry, defs map[string]PoolConfig, onDead func(error)) (Pools, error) {
	pools := Pools{}
	names := make([]string, 0, len(defs))
	for n := range defs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p, err := OpenPool(ctx, n, defs[n], onDead)
		if err != nil {
			pools.Close()
			return nil, err
		}
		pools[n] = p
		if err := reg.Register(p.Spec()); err != nil {
			pools.Close()
			return nil, err
		}
	}
	return pools, nil
}

// Close releases every pool's idle connections.
func (ps Pools) Close() {
	for _, p := range ps {
		p.Close()
	}
}

// Describe says, one line per pool, what each serves and how many of its calls failed, by
// reason.
func (ps Pools) Describe() []string {
	names := make([]string, 0, len(ps))
	for n := range ps {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		p := ps[n]
		line := fmt.Sprintf("env %s: remote %q on %d server(s), %d episodes started", n, p.md.Name, len(p.reps), p.Episodes())
		if f := p.DescribeFailures(); f != "" {
			line += "; failed calls: " + f
		}
		out = append(out, line)
	}
	return out
}
