package bench

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env/all"
)

// TestHelperDistWorker is a worker process of TestDistBench.
func TestHelperDistWorker(t *testing.T) {
	if os.Getenv(distEnvURL) == "" {
		t.Skip("run by TestDistBench")
	}
	if err := DistWorker(context.Background(), all.Builtins()); err != nil {
		t.Fatal(err)
	}
}

// The data-plane bench runs end to end, small: two worker processes, both passes, the weights.
func TestDistBench(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := Dist(ctx, &out, DistOptions{Envs: all.Builtins(), Env: "calc", Workers: 2, Episodes: 300, Concurrency: 8, Tokens: 64,
		Batch: 64, Update: 10 * time.Millisecond, Checkpoint: 2, WeightsMiB: 2,
		WorkerCommand: []string{os.Args[0], "-test.run=^TestHelperDistWorker$", "-test.count=1"}})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"ZERO-LATENCY GENERATOR", "capacity", "all 300 taken, trained and acknowledged", "simulated update of 10ms", "learner wait for its batch", "weights fan-out: 2 MiB"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("the report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "drops:") {
		t.Fatalf("trajectories were dropped:\n%s", out.String())
	}
	t.Log(out.String())
}
