package dist

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// strandTask queues task g of run (the first of the stream) and takes it until it is left as a
// server stopped while it handled the task's ack would leave it: the workers' consumer counts it
// as settled — not pending, never to be delivered again, and at or below its acknowledgement floor
// once the tasks delivered after it are settled — while the stream still stores it. A test cannot
// stop a server at that moment, so the state is made another way: with one delivery allowed, the
// task is taken and not acknowledged until it runs out of deliveries; then deliveries are allowed
// up to maxDeliver (0: without bound).
func strandTask(t *testing.T, ctx context.Context, l, w *Conn, run string, g uint64, maxDeliver int) {
	t.Helper()
	if err := l.SetupRun(ctx, RunConfig{Run: run, TaskAckWait: 100 * time.Millisecond, MaxDeliver: 1}); err != nil {
		t.Fatal(err)
	}
	if err := l.PublishTask(ctx, testTask(run, g, 0)); err != nil {
		t.Fatal(err)
	}
	wc, err := w.JS.Consumer(ctx, TasksStream(run), TasksConsumer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wc.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for {
		// The server gives the task up when it would deliver it again: ask for one.
		b, err := wc.Fetch(1, jetstream.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			t.Fatalf("task delivered again: %s", m.Reply())
		}
		info, err := wc.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 {
			break
		}
	}
	if err := l.SetupRun(ctx, RunConfig{Run: run, TaskAckWait: 30 * time.Second, MaxDeliver: maxDeliver}); err != nil {
		t.Fatal(err)
	}
}

func taskSeqs(t *testing.T, ctx context.Context, l *Conn, run string) []uint64 {
	t.Helper()
	st, err := l.JS.Stream(ctx, TasksStream(run))
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for seq := uint64(1); seq <= st.CachedInfo().State.LastSeq; seq++ {
		_, err := st.GetMsg(ctx, seq)
		switch {
		case err == nil:
			seqs = append(seqs, seq)
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			t.Fatal(err)
		}
	}
	return seqs
}

// takeSeq takes the next task of wc and returns it with its stream sequence.
func takeSeq(t *testing.T, wc jetstream.Consumer) (jetstream.Msg, uint64) {
	t.Helper()
	m, err := wc.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	return m, md.Sequence.Stream
}

// TestSweepTasks: a task the workers' consumer settled but the server kept is removed by the
// learner's consumer (and counted), and no other task is: not one delivered and not yet
// acknowledged, not one not yet delivered. Without the sweep it stays queued for good: the
// consumer never delivers it again.
func TestSweepTasks(t *testing.T) {
	s := startServer(t)
	ctx := ctxFor(t, 60*time.Second)
	const run = "sweep"
	l := connect(t, s.URL(), s.LearnerToken())
	w := connect(t, s.URL(), s.WorkerToken())
	strandTask(t, ctx, l, w, run, 0, 0) // seq 1: settled, kept
	publish := func(g uint64) {
		t.Helper()
		if err := l.PublishTask(ctx, testTask(run, g, 0)); err != nil {
			t.Fatal(err)
		}
	}
	wc, err := w.JS.Consumer(ctx, TasksStream(run), TasksConsumer)
	if err != nil {
		t.Fatal(err)
	}
	publish(1) // seq 2: run and acked; the acknowledgement floor passes seq 1
	m, seq := takeSeq(t, wc)
	if seq != 2 {
		t.Fatalf("took seq %d, want 2 (the settled task is not delivered again)", seq)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	publish(2) // seq 3: taken, not acked yet
	publish(3) // seq 4: not taken yet
	held, seq := takeSeq(t, wc)
	if seq != 3 {
		t.Fatalf("took seq %d, want 3", seq)
	}
	if got := taskSeqs(t, ctx, l, run); !slices.Equal(got, []uint64{1, 3, 4}) {
		t.Fatalf("tasks stored %v, want 1 (settled, kept), 3 (held) and 4 (queued)", got)
	}

	k, err := l.NewConsumer(ctx, ConsumerConfig{Run: run, SweepTasks: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	for k.TasksSwept() < 1 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // several sweeps more: nothing else goes
	if n := k.TasksSwept(); n != 1 {
		t.Fatalf("swept %d tasks, want 1", n)
	}
	if got := taskSeqs(t, ctx, l, run); !slices.Equal(got, []uint64{3, 4}) {
		t.Fatalf("tasks stored after the sweep %v, want 3 (held) and 4 (queued)", got)
	}
	if n, err := l.SweepTasks(ctx, run); n != 0 || err != nil {
		t.Fatalf("a second sweep removed %d (%v)", n, err)
	}

	// The rest go as they are acked: the queue empties.
	if err := held.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	m, seq = takeSeq(t, wc)
	if seq != 4 {
		t.Fatalf("took seq %d, want 4", seq)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if got := taskSeqs(t, ctx, l, run); len(got) != 0 {
		t.Fatalf("tasks stored at the end %v", got)
	}
}

// TestSweepTasksMaxDeliver: with bounded deliveries the queue keeps, by design, the tasks that ran
// out of them, which the acknowledgement floor passes too; they cannot be told from a settled
// task the server kept, so the sweep removes nothing.
func TestSweepTasksMaxDeliver(t *testing.T) {
	s := startServer(t)
	ctx := ctxFor(t, 30*time.Second)
	const run = "sweepmd"
	l := connect(t, s.URL(), s.LearnerToken())
	w := connect(t, s.URL(), s.WorkerToken())
	strandTask(t, ctx, l, w, run, 0, 3)
	if err := l.PublishTask(ctx, testTask(run, 1, 0)); err != nil {
		t.Fatal(err)
	}
	wc, err := w.JS.Consumer(ctx, TasksStream(run), TasksConsumer)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := takeSeq(t, wc)
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := wc.Info(ctx); err != nil || info.AckFloor.Stream < 1 {
		t.Fatalf("ack floor %+v (%v): the test wants it past the task kept", info.AckFloor, err)
	}
	if n, err := l.SweepTasks(ctx, run); n != 0 || err != nil {
		t.Fatalf("swept %d (%v) with MaxDeliver set", n, err)
	}
	if got := taskSeqs(t, ctx, l, run); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("tasks stored %v, want the one that ran out of deliveries", got)
	}
}
