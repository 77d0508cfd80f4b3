package dist

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Item 23 of issue 29: a worker that stores a message under a genuine trajectory's message id
// before it (as that id was predictable) no longer makes JetStream drop the genuine one as a
// duplicate: the learner gets the genuine trajectory and counts the forged one.
func TestForgedMessageIDDoesNotDropTheGenuine(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	s := startServer(t)
	l := connect(t, s.URL(), s.LearnerToken())
	const run = "forge"
	if err := l.SetupRun(ctx, RunConfig{Run: run}); err != nil {
		t.Fatal(err)
	}
	task := testTask(run, 7, 1)
	forger := connect(t, s.URL(), s.WorkerToken())
	for attempt := range 2 {
		m := nats.NewMsg(TrajSubject(run, task.GroupID))
		m.Header.Set(HeaderMsgID, task.MsgID(attempt))
		m.Header.Set(HeaderGroup, strconv.FormatUint(task.GroupID, 10))
		m.Data = []byte("not a trajectory")
		if _, err := forger.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	genuine := connect(t, s.URL(), s.WorkerToken())
	ack, err := genuine.PublishTrajectory(ctx, task, 0, "w", synthTraj(task, 16, 0))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Duplicate {
		t.Fatal("the genuine trajectory was dropped by the stream as a duplicate of the forged message")
	}
	k, err := l.NewConsumer(ctx, ConsumerConfig{Run: run})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := k.Next(nctx)
	if err != nil {
		t.Fatalf("the genuine trajectory never came: %v (drops %v)", err, k.Drops())
	}
	if d.Key != task.Key() || d.Traj.Len() != 16 {
		t.Fatalf("delivery %s with %d tokens, want %s's 16", d.Key, d.Traj.Len(), task.Key())
	}
	if n := k.Drops()[DropCorrupt]; n != 2 {
		t.Fatalf("forged messages counted as corrupt: %d, want 2", n)
	}
}

// A worker on nats-server before 2.10 terminates a task with a plain +TERM (2.9 does not parse
// "+TERM <reason>" and redelivers the task forever); later servers get the reason.
func TestTermOnOldServers(t *testing.T) {
	for v, want := range map[string]bool{"2.9.10": false, "2.9.25": false, "2.10.0": true, "2.11.4": true, "3.0.0": true, "": false, "garbage": false} {
		if got := termReasonUnderstood(v); got != want {
			t.Errorf("termReasonUnderstood(%q) = %v, want %v", v, got, want)
		}
	}
	m := &termRecorder{}
	w := &Worker{Conn: &Conn{NC: &nats.Conn{}}}
	w.term(m, "bad task")
	if m.plain != 1 || m.reason != 0 {
		t.Fatalf("on a server of unknown version: %d plain +TERM, %d with a reason; want a plain one", m.plain, m.reason)
	}
}

// termRecorder is a message that records how it was terminated.
type termRecorder struct {
	jetstream.Msg
	plain, reason int
}

func (m *termRecorder) Term() error                 { m.plain++; return nil }
func (m *termRecorder) TermWithReason(string) error { m.reason++; return nil }
