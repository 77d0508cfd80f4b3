package dist

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrl/agentrl/traj"
)

// TestRoundTrip: tasks out, trajectories back through a worker, each handed out once, acked at
// the checkpoint, with the headers the protocol names.
func TestRoundTrip(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	s := startServer(t)
	l := connect(t, s.URL(), s.LearnerToken())
	const run = "rt"
	if err := l.SetupRun(ctx, RunConfig{Run: run, TaskAckWait: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	const groups, samples = 4, 3
	for g := range uint64(groups) {
		for i := range samples {
			if err := l.PublishTask(ctx, testTask(run, g, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A republished task is stored once (its task id is its message id).
	if err := l.PublishTask(ctx, testTask(run, 0, 0)); err != nil {
		t.Fatal(err)
	}
	wc := connect(t, s.URL(), s.WorkerToken())
	w := &Worker{Conn: wc, RunName: run, ID: "w1", Concurrency: 3, Episode: func(ctx context.Context, task Task) (*traj.Trajectory, error) {
		return synthTraj(task, 64, 0), nil
	}}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := w.Run(wctx); err != nil {
			t.Error(err)
		}
	})
	k, err := l.NewConsumer(ctx, ConsumerConfig{Run: run, AckWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	seen := map[string]bool{}
	var ds []*Delivery
	for range groups * samples {
		d, err := k.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen[d.Key] {
			t.Fatalf("key %s handed out twice", d.Key)
		}
		seen[d.Key] = true
		if d.Worker != "w1" || d.Attempt != 0 || d.Traj.Len() != 64 {
			t.Fatalf("delivery %+v", d)
		}
		want := synthTraj(testTask(run, d.Traj.GroupID, int(d.Traj.Reward)), 64, 0)
		want.ID = d.MsgID[:strings.LastIndexByte(d.MsgID, '.')] // the message id is the trajectory's and a nonce
		if !traj.Equal(want, d.Traj) {
			t.Fatalf("trajectory %s differs from what the worker wrote", d.MsgID)
		}
		ds = append(ds, d)
	}
	stop()
	wg.Wait()
	if st := w.Stats(); st.Done != groups*samples {
		t.Fatalf("worker stats %+v", st)
	}
	// Nothing is acked before the checkpoint.
	info, err := k.cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != groups*samples {
		t.Fatalf("ack pending %d before the checkpoint, want %d", info.NumAckPending, groups*samples)
	}
	k.Trained(0, ds[:6]...)
	k.Trained(1, ds[6:]...)
	if st := k.State(0, 0); len(st.Trained) != 6 {
		t.Fatalf("state of step 0 has %d keys, want 6", len(st.Trained))
	}
	if err := k.Checkpointed(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if k.Held() != groups*samples-6 {
		t.Fatalf("held %d after checkpoint 0", k.Held())
	}
	if err := k.Checkpointed(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// The acks reached the server (Checkpointed flushed them); the consumer applies them on its
	// own goroutine, so its count catches up shortly after.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		info, _ = k.cons.Info(ctx)
		if info.NumAckPending == 0 && k.Held() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after checkpoint 1: ack pending %d, held %d", info.NumAckPending, k.Held())
		}
	}
	// The task queue is empty: every task was acked after its trajectory was stored.
	tinfo, err := l.JS.Stream(ctx, TasksStream(run))
	if err != nil {
		t.Fatal(err)
	}
	if n := tinfo.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("%d tasks left in the work queue", n)
	}
	// Headers, read back raw from the stream.
	raw, err := l.JS.Stream(ctx, TrajStream(run))
	if err != nil {
		t.Fatal(err)
	}
	m, err := raw.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{HeaderMsgID, HeaderCodec, HeaderRun, HeaderTask, HeaderGroup, HeaderSample, HeaderAttempt, HeaderStatus, HeaderMinVersion, HeaderMaxVersion, HeaderWorker} {
		if m.Header.Get(h) == "" {
			t.Errorf("header %s missing", h)
		}
	}
}

// TestConsumerDrops: every drop has a reason and a counter, and a duplicate of a trained key
// is dropped after a restore.
func TestConsumerDrops(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	s := startServer(t)
	l := connect(t, s.URL(), s.LearnerToken())
	const run = "drops"
	if err := l.SetupRun(ctx, RunConfig{Run: run}); err != nil {
		t.Fatal(err)
	}
	pub := func(g uint64, sample, attempt int, tr *traj.Trajectory) {
		t.Helper()
		if _, err := l.PublishTrajectory(ctx, testTask(run, g, sample), attempt, "x", tr); err != nil {
			t.Fatal(err)
		}
	}
	pub(0, 0, 0, synthTraj(testTask(run, 0, 0), 16, 10)) // ok
	pub(0, 0, 1, synthTraj(testTask(run, 0, 0), 16, 10)) // duplicate key, other attempt
	pub(0, 0, 1, synthTraj(testTask(run, 0, 0), 16, 10)) // the same attempt again: a fresh message id, another duplicate
	pub(1, 0, 0, synthTraj(testTask(run, 1, 0), 16, 5))  // stale at v10, η 2
	failed := synthTraj(testTask(run, 2, 0), 16, 10)
	failed.Status = traj.StatusEnvError
	failed.Error = "boom"
	pub(2, 0, 0, failed)
	pub(3, 0, 0, synthTraj(testTask(run, 3, 0), 16, 10)) // filtered: reward 0 sample... see filter
	pub(4, 1, 0, synthTraj(testTask(run, 4, 1), 16, 9))  // ok
	k, err := l.NewConsumer(ctx, ConsumerConfig{Run: run, MaxStaleness: 2, Version: func() int32 { return 10 }, DropFailed: true,
		Filter: func(tr *traj.Trajectory) string {
			if tr.GroupID == 3 {
				return "group 3 filtered"
			}
			return ""
		}})
	if err != nil {
		t.Fatal(err)
	}
	var got []*Delivery
	for range 2 {
		d, err := k.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if d, err := k.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third delivery %+v, %v", d, err)
	}
	want := map[string]int64{DropDuplicate: 2, DropStale: 1, DropFailed: 1, DropFilter: 1}
	if got := k.Drops(); !mapsEqual(got, want) {
		t.Fatalf("drops %v, want %v", got, want)
	}
	dec := k.Decisions()
	if len(dec) != 7 {
		t.Fatalf("decisions %+v, want one per stored sequence (7)", dec)
	}
	for i, d := range dec {
		if d.Seq != uint64(i+1) {
			t.Fatalf("decision %d is for seq %d", i, d.Seq)
		}
	}
	k.Trained(0, got...)
	st := k.State(0, 0)
	if err := k.Checkpointed(ctx, 0); err != nil {
		t.Fatal(err)
	}
	k.Close()

	// A new attempt of a trained key, after the learner restarted from that checkpoint.
	pub(4, 1, 2, synthTraj(testTask(run, 4, 1), 16, 10))
	k2, err := l.NewConsumer(ctx, ConsumerConfig{Run: run})
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Close()
	k2.Restore(st)
	short2, cancel2 := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel2()
	if d, err := k2.Next(short2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after restore: delivery %+v, %v", d, err)
	}
	if n := k2.Drops()[DropDuplicate]; n != 3 {
		t.Fatalf("duplicates after restore %d, want 3 (2 restored + 1 new)", n)
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestLargeTrajectory: a trajectory larger than a message goes through the blobs store.
func TestLargeTrajectory(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	const run = "big"
	l, w := smallPayloadRun(t, ctx, run)
	task := testTask(run, 7, 0)
	big := synthTraj(task, 100_000, 3)
	if _, err := w.PublishTrajectory(ctx, task, 0, "w", big); err != nil {
		t.Fatal(err)
	}
	k, err := l.NewConsumer(ctx, ConsumerConfig{Run: run})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	d, err := k.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.msg.Headers().Get(HeaderBlob) == "" || len(d.msg.Data()) != 0 {
		t.Fatal("a large trajectory was not sent by reference")
	}
	if !traj.Equal(big, d.Traj) {
		t.Fatal("large trajectory differs after the blobs store")
	}
}
