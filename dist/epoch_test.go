package dist

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrl/agentrl/traj"
)

// TestNextEpoch: every learner start takes a larger epoch than any before it on the server and
// than the learner's own records; a resumed learner's pointer is newer than its predecessor's
// although its version is lower, and only its epoch's weights stay in the store.
func TestNextEpoch(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	s := startServer(t)
	l := connect(t, s.URL(), s.LearnerToken())
	const run = "ep"
	if err := l.SetupRun(ctx, RunConfig{Run: run}); err != nil {
		t.Fatal(err)
	}
	var got []uint32
	for _, atLeast := range []uint32{0, 0, 7, 0} {
		e, err := l.NextEpoch(ctx, run, atLeast)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	if want := []uint32{1, 2, 8, 9}; !equal(got, want) {
		t.Fatalf("epochs %v, want %v", got, want)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, WeightsFile), []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	for v := int32(3); v <= 6; v++ {
		if _, err := l.PublishWeights(ctx, run, 8, v, dir, 2); err != nil {
			t.Fatal(err)
		}
	}
	// Epoch 9 resumes from version 4: its pointer is the newer one.
	p, err := l.PublishWeights(ctx, run, 9, 4, dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	old := Pointer{Epoch: 8, Version: 6}
	if !p.After(old) || old.After(p) || p.After(p) {
		t.Fatalf("pointer (9, 4) not after (8, 6)")
	}
	if got, _, _ := l.Latest(ctx, run); got.Epoch != 9 || got.Version != 4 {
		t.Fatalf("latest %+v", got)
	}
	obs, err := l.JS.ObjectStore(ctx, WeightsBucket)
	if err != nil {
		t.Fatal(err)
	}
	list, err := obs.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range list {
		names = append(names, o.Name)
	}
	if len(names) != 1 || names[0] != run+"/e9/v4/"+WeightsFile {
		t.Fatalf("weights store holds %v, want only epoch 9's", names)
	}
	// A new epoch counts the pointer's too.
	if e, err := l.NextEpoch(ctx, run, 0); err != nil || e != 10 {
		t.Fatalf("next epoch %d, %v", e, err)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestConsumerLineage: a learner of epoch 3 that resumed from a checkpoint holding epoch 2's
// versions up to 5 takes epoch 2's trajectories sampled at versions up to 5, drops as superseded
// those sampled later by epoch 2 (weights it never had) and those of epochs its lineage does not
// name; and a consumer restarted at the first unsettled sequence gets back at once what its
// predecessor held unacknowledged, recognising what it had settled.
func TestConsumerLineage(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	s := startServer(t)
	l := connect(t, s.URL(), s.LearnerToken())
	const run = "lin"
	if err := l.SetupRun(ctx, RunConfig{Run: run}); err != nil {
		t.Fatal(err)
	}
	pub := func(g uint64, epoch uint32, v int32) {
		t.Helper()
		task := testTask(run, g, 0)
		task.Epoch = epoch
		if _, err := l.PublishTrajectory(ctx, task, 0, "x", synthTraj(task, 16, v)); err != nil {
			t.Fatal(err)
		}
	}
	// The first learner (epoch 2) takes seq 1 and 2, checkpoints after seq 1 at version 5, and dies
	// holding seq 2.
	pub(0, 2, 4) // seq 1
	pub(1, 2, 5) // seq 2
	k, err := l.NewConsumer(ctx, ConsumerConfig{Run: run, Epoch: 2, AckWait: 30 * time.Second, StartSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	d1, err := k.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Next(ctx); err != nil {
		t.Fatal(err)
	}
	k.Trained(0, d1)
	st := k.State(0, 5)
	if err := k.Checkpointed(ctx, 0); err != nil {
		t.Fatal(err)
	}
	k.Close() // seq 2 stays unacknowledged, for 30 s
	if st.Lineage[2] != 5 || st.FirstUnsettled(1) != 2 {
		t.Fatalf("state %+v", st)
	}

	pub(2, 2, 6) // seq 3: epoch 2 after its checkpoint
	pub(3, 1, 3) // seq 4: an epoch the lineage does not name
	pub(4, 3, 5) // seq 5: the resumed learner's own
	pub(5, 2, 5) // seq 6: epoch 2 within the lineage
	start := time.Now()
	k2, err := l.NewConsumer(ctx, ConsumerConfig{Run: run, Epoch: 3, AckWait: 30 * time.Second, StartSeq: st.FirstUnsettled(1)})
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Close()
	k2.Restore(st)
	var seqs []uint64
	for range 3 {
		d, err := k2.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, d.Seq)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("the held message came back after %v: the restarted consumer waited for the ack deadline", time.Since(start))
	}
	if want := []uint64{2, 5, 6}; !equal(seqs, want) {
		t.Fatalf("handed out seqs %v, want %v", seqs, want)
	}
	if got := k2.Drops(); got[DropSuperseded] != 2 || len(got) != 1 {
		t.Fatalf("drops %v, want 2 superseded", got)
	}
	for _, d := range k2.Decisions() {
		if (d.Seq == 3 || d.Seq == 4) != (d.Reason == DropSuperseded) {
			t.Fatalf("decision %+v", d)
		}
	}
	if k2.Redelivered() != 0 {
		t.Fatalf("redelivered %d: seq 1 was settled and should not be asked for again", k2.Redelivered())
	}
}

// TestWorkerEpochs: a task waits for its epoch's policy at its admit version; Supersede cuts off
// an older epoch's episode in flight and terminates it, and terminates that epoch's tasks taken
// later, without running them.
func TestWorkerEpochs(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	s := startServer(t)
	l := connect(t, s.URL(), s.LearnerToken())
	const run = "wep"
	if err := l.SetupRun(ctx, RunConfig{Run: run, TaskAckWait: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	type pol struct {
		e uint32
		v int32
	}
	var policy atomic.Pointer[pol]
	policy.Store(&pol{1, 0})
	var mu sync.Mutex
	ran := map[string]pol{} // task → the policy its episode started under
	started := make(chan string, 16)
	wc := connect(t, s.URL(), s.WorkerToken())
	w := &Worker{Conn: wc, RunName: run, ID: "w", Concurrency: 4,
		Policy: func() (uint32, int32) { p := policy.Load(); return p.e, p.v },
		Episode: func(ctx context.Context, task Task) (*traj.Trajectory, error) {
			mu.Lock()
			ran[task.TaskID] = *policy.Load()
			mu.Unlock()
			started <- task.TaskID
			if task.TaskID == "long" {
				<-ctx.Done() // runs until cut off
				return nil, ctx.Err()
			}
			return synthTraj(task, 16, policy.Load().v), nil
		}}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := w.Run(wctx); err != nil {
			t.Error(err)
		}
	})
	defer func() {
		stop()
		wg.Wait()
	}()
	publish := func(id string, g uint64, epoch uint32, admit int32) {
		t.Helper()
		task := testTask(run, g, 0)
		task.TaskID, task.Epoch, task.AdmitVersion = id, epoch, admit
		if err := l.PublishTask(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(id string) {
		t.Helper()
		select {
		case got := <-started:
			if got != id {
				t.Fatalf("task %s started, want %s", got, id)
			}
		case <-ctx.Done():
			t.Fatalf("task %s did not start", id)
		}
	}
	publish("long", 0, 1, 0)
	wait("long")
	publish("admit2", 1, 1, 2) // waits for version 2
	publish("epoch2", 2, 2, 0) // waits for epoch 2
	time.Sleep(300 * time.Millisecond)
	select {
	case id := <-started:
		t.Fatalf("task %s started before its policy", id)
	default:
	}
	policy.Store(&pol{1, 2})
	wait("admit2")
	// admit2's episode ends at once; it is stored before the epoch changes (an epoch-1 episode
	// still in flight then would be cut off too, as long is).
	for w.Stats().Done < 1 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	// The learner's epoch 2 arrives: epoch 1's episode in flight is cut off, then the new
	// weights are loaded.
	w.Supersede(2)
	policy.Store(&pol{2, 1})
	wait("epoch2")
	publish("late1", 3, 1, 0) // an epoch-1 task taken after: terminated, never run
	deadline := time.Now().Add(10 * time.Second)
	for (w.Stats().Terminated < 2 || w.Stats().Done < 2) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	st := w.Stats()
	if st.Terminated != 2 || st.Done != 2 || st.Nacked != 0 {
		t.Fatalf("worker stats %+v, want 2 done (admit2, epoch2) and 2 terminated (long, late1)", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ok := ran["late1"]; ok {
		t.Fatal("a superseded task ran")
	}
	if ran["admit2"] != (pol{1, 2}) || ran["epoch2"] != (pol{2, 1}) {
		t.Fatalf("episodes started under %+v", ran)
	}
	tq, err := l.JS.Stream(ctx, TasksStream(run))
	if err != nil {
		t.Fatal(err)
	}
	if n := tq.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("%d tasks left in the queue", n)
	}
	// The trajectories carry their epoch.
	ts, err := l.JS.Stream(ctx, TrajStream(run))
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= ts.CachedInfo().State.LastSeq; seq++ {
		m, err := ts.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		id := m.Header.Get(HeaderMsgID)
		_, e, _, err := parseMsgID(id, run)
		if err != nil || m.Header.Get(HeaderEpoch) != string(rune('0'+e)) || !strings.HasPrefix(m.Header.Get(HeaderTask), map[uint32]string{1: "admit2", 2: "epoch2"}[e]) {
			t.Fatalf("trajectory %s: epoch header %q, task %q (%v)", id, m.Header.Get(HeaderEpoch), m.Header.Get(HeaderTask), err)
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}
