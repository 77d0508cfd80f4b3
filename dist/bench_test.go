package dist

import (
	"context"
	"sync"
	"testing"
	"time"
)

// BenchmarkTrajectoryThroughput publishes b.N trajectories of about 4 KiB (binary form) through
// the trajectory stream with deduplication on, from 16 concurrent publishers (workers publish one at a time and wait for the PubAck), while the learner's
// consumer takes them and acknowledges them in checkpoints of 256. It reports trajectories/s
// and payload bytes/s end to end (publish of the first to consumption of the last).
func BenchmarkTrajectoryThroughput(b *testing.B) {
	ctx := context.Background()
	s := startServer(b)
	l := connect(b, s.URL(), s.LearnerToken())
	const run = "bench"
	if err := l.SetupRun(ctx, RunConfig{Run: run}); err != nil {
		b.Fatal(err)
	}
	task := testTask(run, 0, 0)
	tr := synthTraj(task, 1700, 1) // ≈ 4 KiB in the binary form
	data, err := tr.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	k, err := l.NewConsumer(ctx, ConsumerConfig{Run: run, Fetch: 256})
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	const pubs = 16
	conns := make([]*Conn, pubs)
	for i := range conns {
		conns[i] = connect(b, s.URL(), s.WorkerToken())
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for p := range pubs {
		wg.Go(func() {
			for i := p; i < b.N; i += pubs {
				t := task
				t.GroupID, t.TaskID = uint64(i), "b"
				if _, err := conns[p].PublishTrajectory(ctx, t, 0, "bench", tr); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	var batch []*Delivery
	for n := 0; n < b.N; n++ {
		d, err := k.Next(ctx)
		if err != nil {
			b.Fatal(err)
		}
		batch = append(batch, d)
		if len(batch) == 256 || n == b.N-1 {
			k.Trained(n, batch...)
			if err := k.Checkpointed(ctx, n); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	b.ReportMetric(float64(b.N)/el, "traj/s")
	b.ReportMetric(float64(b.N)*float64(len(data))/el/(1<<20), "MiB/s")
}
