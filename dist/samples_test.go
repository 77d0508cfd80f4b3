package dist

import (
	"testing"
	"time"

	"github.com/agentrl/agentrl/traj"
)

// twoSamples makes synthTraj an episode of two training samples: the second starts with a
// re-rendered context of user tokens and has its own turn.
func twoSamples(task Task, n int) *traj.Trajectory {
	t := synthTraj(task, n, 2)
	t.AppendSamples(synthTraj(task, n, 3))
	return t
}

// An episode of several samples is one trajectory message (or one blob): it arrives whole, its
// samples intact, inline and by reference.
func TestMultiSampleTrajectory(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	const run = "samples"
	l, w := smallPayloadRun(t, ctx, run)
	k, err := l.NewConsumer(ctx, ConsumerConfig{Run: run})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	for i, n := range []int{64, 60_000} {
		task := testTask(run, uint64(i), 0)
		ep := twoSamples(task, n)
		if _, err := w.PublishTrajectory(ctx, task, 0, "w", ep); err != nil {
			t.Fatal(err)
		}
		d, err := k.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ep.ID = d.Traj.ID
		if !traj.Equal(ep, d.Traj) || d.Traj.NumSamples() != 2 {
			t.Fatalf("%d tokens: the episode arrived with samples %v, want %v", n, d.Traj.Samples, ep.Samples)
		}
		if blob := d.msg.Headers().Get(HeaderBlob) != ""; blob != (n > 1000) {
			t.Fatalf("%d tokens: sent by reference %v", n, blob)
		}
		lo, hi := d.Traj.Sample(1)
		if lo != n || hi != 2*n {
			t.Fatalf("second sample %d..%d, want %d..%d", lo, hi, n, 2*n)
		}
	}
}
