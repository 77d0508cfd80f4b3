package bench

import (
	"context"
	"testing"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
)

// BenchmarkLoop and BenchmarkBaseline run one expert episode per op through the agent loop
// (RunGroups at concurrency 64) and through the plain loop of the overhead baseline; the
// difference in allocs/op and B/op is the loop's own, which, unlike its CPU time, does not
// depend on what else the machine is running.
func BenchmarkLoop(b *testing.B) {
	for _, name := range []string{"calc", "search"} {
		b.Run(name, func(b *testing.B) {
			spec, tok, cfg := benchSetup(b, name)
			runner := &rollout.Runner{Tok: tok, Cfg: cfg, NewGen: expertGen(spec, tok)}
			ts := tasks(spec, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			if _, err := runner.RunGroups(context.Background(), specEnvs(spec), ts, 1, 64); err != nil {
				b.Fatal(err)
			}
		})
	}
}

func BenchmarkBaseline(b *testing.B) {
	for _, name := range []string{"calc", "search"} {
		b.Run(name, func(b *testing.B) {
			spec, tok, cfg := benchSetup(b, name)
			ts := tasks(spec, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			if err := baseline(context.Background(), spec, tok, ts, cfg); err != nil {
				b.Fatal(err)
			}
		})
	}
}

func benchSetup(b *testing.B, name string) (env.Spec, *tokenizer.Tokenizer, rollout.Config) {
	envs := all.Builtins()
	spec, err := envs.Lookup(name)
	if err != nil {
		b.Fatal(err)
	}
	tok, err := Tokenizer(envs, []string{"calc", "search"})
	if err != nil {
		b.Fatal(err)
	}
	cfg := benchConfig()
	// Warm the tokenizer's word cache and the environment's shared state.
	if err := baseline(context.Background(), spec, tok, tasks(spec, 200), cfg); err != nil {
		b.Fatal(err)
	}
	return spec, tok, cfg
}
