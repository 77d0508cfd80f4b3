package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/all"
)

// A phase environment's latency block is read from YAML, checked by env's Validate, rejected
// with unknown keys or in an sft phase, and a run with it says in its metrics that the latency is
// simulated.
func TestSimulatedLatencyConfig(t *testing.T) {
	c := tinyConfig(t, t.TempDir(), "phases.rl.steps=2", `phases.rl.envs=[{name: calc, weight: 1, latency: {dist: lognormal, median: 1ms, p99_over_p50: 20}}]`)
	lat := c.Phases[1].Envs[0].Latency
	if lat == nil || lat.Median != time.Millisecond || lat.P99OverP50 != 20 || lat.Dist != "lognormal" {
		t.Fatalf("latency read as %+v", lat)
	}
	data, err := config.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "p99_over_p50: 20") {
		t.Fatalf("encoded config lacks the latency block:\n%s", data)
	}
	for _, tc := range []struct{ set, want string }{
		{`phases.rl.envs=[{name: calc, weight: 1, latency: {dist: lognormal, median: 1ms, p99_over_p50: 20, tail: 3}}]`, "tail"},
		{`phases.rl.envs=[{name: calc, weight: 1, latency: {dist: gamma, median: 1ms, p99_over_p50: 20}}]`, "latency.dist"},
		{`phases.rl.envs=[{name: calc, weight: 1, latency: {dist: pareto, median: 1ms, p99_over_p50: 50}}]`, "latency.max"},
		{`phases.sft.envs=[{name: calc, weight: 1, latency: {dist: lognormal, median: 1ms, p99_over_p50: 2}}]`, "sft phase"},
	} {
		_, err := config.Load(all.Builtins(), "", "", []string{tc.set})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.set, err, tc.want)
		}
	}
	var out strings.Builder
	run, err := NewRun(c, Options{Envs: all.Builtins(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "SIMULATED latency") {
		t.Fatalf("the run does not say its latency is simulated:\n%s", out.String())
	}
	n := 0
	for _, m := range metricLines(t, run.Dir) {
		if m["phase"] == "rl" {
			n++
			if s, _ := m["sim/latency"].(string); !strings.Contains(s, "simulated lognormal latency") {
				t.Fatalf("step %v: sim/latency = %q", m["step"], s)
			}
		}
	}
	if n != 2 {
		t.Fatalf("%d RL steps logged, want 2", n)
	}
	// Each step logs what the latency costs an episode (metricLines leaves timings out).
	data, err = os.ReadFile(filepath.Join(run.Dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), `"time/episode_s":`); n != 2 {
		t.Fatalf("%d lines with time/episode_s, want one a step", n)
	}
}
