package dist

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentrl/agentrl/traj"
)

// EpisodeFunc runs one episode of task and returns its trajectory. An error means the episode
// could not be run at all (not an environment failure, which is a trajectory status): the task
// is returned to the queue for another attempt.
type EpisodeFunc func(ctx context.Context, task Task) (*traj.Trajectory, error)

// Worker takes a run's tasks, runs them and stores their trajectories.
//
// Acknowledgement rule: a task is acked only after its trajectory's PubAck. A task whose
// episode failed to run, or was cut off by shutdown, is nak'ed (redelivered at once to any
// worker); a task past its deadline or undecodable is terminated with the reason. If the
// worker dies, its unacknowledged tasks are redelivered when their ack wait ends.
type Worker struct {
	Conn    *Conn
	RunName string
	// ID names the worker in heartbeats and trajectory headers (default host-pid).
	ID string
	// Episode runs one task.
	Episode EpisodeFunc
	// Concurrency is how many episodes run at once (default 1).
	Concurrency int
	// Grace is how long, once Run's context ends, episodes in flight may take to finish before
	// they are cut off and their tasks nak'ed (0: they are nak'ed at once).
	Grace time.Duration
	// Policy, when set, is the policy the worker generates with: learner epoch and version
	// (version -1 before any). A task then runs only with its own epoch's weights: the worker
	// keeps it, waiting, until Policy reaches the task's epoch at its admit version or later, and
	// terminates it ("superseded") once Policy or Supersede has moved past its epoch.
	Policy func() (epoch uint32, version int32)
	// OnStart, when set, is called as each episode starts.
	OnStart func(Task, int)
	// Logf, when set, receives one line per notable event.
	Logf func(format string, args ...any)

	running, done, nacked, termed atomic.Int64

	mu       sync.Mutex
	minEpoch uint32                // tasks of earlier epochs are terminated (Supersede)
	inflight map[*episode]struct{} // tasks taken and not yet done sampling
}

// episode is a task the worker holds, from its start to the end of its sampling.
type episode struct {
	epoch      uint32
	cancel     context.CancelFunc
	superseded bool          // cancelled by Supersede; under Worker.mu
	done       chan struct{} // closed when it samples no more
}

// Supersede makes the worker give up every task of a learner epoch before epoch: tasks taken
// from now on are terminated, and episodes in flight are cut off and their tasks terminated
// ("superseded"). It returns once none of them samples any more, so that the caller may then
// load the new epoch's weights without an old task sampling a token with them.
func (w *Worker) Supersede(epoch uint32) {
	w.mu.Lock()
	w.minEpoch = max(w.minEpoch, epoch)
	var wait []chan struct{}
	for ep := range w.inflight {
		if ep.epoch < epoch {
			ep.superseded = true
			ep.cancel()
			wait = append(wait, ep.done)
		}
	}
	w.mu.Unlock()
	for _, c := range wait {
		<-c
	}
}

// begin registers an episode of a task of epoch, unless the epoch is superseded.
func (w *Worker) begin(ctx context.Context, epoch uint32) (*episode, context.Context, bool) {
	ectx, cancel := context.WithCancel(ctx)
	ep := &episode{epoch: epoch, cancel: cancel, done: make(chan struct{})}
	w.mu.Lock()
	defer w.mu.Unlock()
	if epoch < w.minEpoch {
		cancel()
		return nil, nil, false
	}
	if w.inflight == nil {
		w.inflight = map[*episode]struct{}{}
	}
	w.inflight[ep] = struct{}{}
	return ep, ectx, true
}

// end unregisters ep, which samples no more, and reports whether Supersede cut it off.
func (w *Worker) end(ep *episode) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.inflight[ep]; ok {
		delete(w.inflight, ep)
		close(ep.done)
	}
	ep.cancel()
	return ep.superseded
}

// WorkerStats counts what a worker did.
type WorkerStats struct {
	Done, Nacked, Terminated int64
}

// Stats returns the worker's counters.
func (w *Worker) Stats() WorkerStats {
	return WorkerStats{Done: w.done.Load(), Nacked: w.nacked.Load(), Terminated: w.termed.Load()}
}

func (w *Worker) logf(format string, args ...any) {
	if w.Logf != nil {
		w.Logf(format, args...)
	}
}

// Run takes and runs tasks until ctx ends, then lets episodes in flight finish within Grace and
// returns. It returns an error only when it cannot work at all (the run's streams missing, no
// permission); a lost connection is waited out.
func (w *Worker) Run(ctx context.Context) error {
	if err := CheckRun(w.RunName); err != nil {
		return err
	}
	if w.ID == "" {
		host, _ := os.Hostname()
		w.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	n := max(w.Concurrency, 1)
	cons, err := w.Conn.JS.Consumer(ctx, TasksStream(w.RunName), TasksConsumer)
	if err != nil {
		return fmt.Errorf("dist: worker: tasks of run %s: %w", w.RunName, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("dist: worker: %w", err)
	}
	ackWait := info.Config.AckWait

	// hard ends Grace after ctx: episodes still running then are cut off.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	stopAfter := context.AfterFunc(ctx, func() {
		time.AfterFunc(w.Grace, cancelHard)
	})
	defer stopAfter()

	hbCtx, stopHB := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHB()
	go w.heartbeat(hbCtx, ctx)

	slots := make(chan struct{}, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		msg, err := w.next(ctx, cons)
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Go(func() {
			defer func() { <-slots }()
			w.handle(hard, msg, ackWait)
		})
	}
}

// next fetches one task message, waiting out empty queues and reconnects.
func (w *Worker) next(ctx context.Context, cons jetstream.Consumer) (jetstream.Msg, error) {
	for ctx.Err() == nil {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if permanent(err) {
				return nil, fmt.Errorf("dist: worker: %w", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		for m := range batch.Messages() {
			// Fetch(1) yields at most one message.
			if ctx.Err() != nil {
				_ = m.Nak()
				return nil, ctx.Err()
			}
			return m, nil
		}
	}
	return nil, ctx.Err()
}

// storeTimeout bounds how long a worker shutting down still spends storing a finished episode's
// trajectory and acknowledging its task.
const storeTimeout = 30 * time.Second

func (w *Worker) handle(ctx context.Context, m jetstream.Msg, ackWait time.Duration) {
	w.running.Add(1)
	defer w.running.Add(-1)
	task, err := decodeTask(m.Data())
	if err == nil {
		err = task.validate(w.RunName)
	}
	if err != nil {
		w.term(m, "bad task: "+err.Error())
		return
	}
	if !task.Deadline.IsZero() && time.Now().After(task.Deadline) {
		w.term(m, "deadline")
		return
	}
	attempt := task.Attempt
	if md, err := m.Metadata(); err == nil {
		attempt += int(md.NumDelivered) - 1
	}
	ep, ectx, ok := w.begin(ctx, task.Epoch)
	if !ok {
		w.term(m, "superseded")
		return
	}
	// Keep the task ours while it waits for its policy and while the episode runs.
	keep, stopKeep := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(max(ackWait/3, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-keep.Done():
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	var t *traj.Trajectory
	err = w.awaitPolicy(ectx, task)
	if err == nil {
		if w.OnStart != nil {
			w.OnStart(task, attempt)
		}
		t, err = w.Episode(ectx, task)
	}
	if w.end(ep) || errors.Is(err, errSuperseded) {
		stopKeep()
		w.term(m, "superseded")
		return
	}
	if err != nil {
		stopKeep()
		w.nak(m, task, err)
		return
	}
	if t.ID == "" {
		t.ID = task.MsgID(attempt)
	}
	// The episode is done: storing it and acknowledging the task are not cut short by a
	// shutdown (that would waste the episode and run it again), only bounded.
	sctx, cancelStore := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancelStore()
	_, err = w.Conn.PublishTrajectory(sctx, task, attempt, w.ID, t)
	stopKeep()
	if err != nil {
		w.nak(m, task, err)
		return
	}
	// The trajectory is stored: now the task may go. If this ack is lost the task is run again
	// and the learner drops the second trajectory as a duplicate.
	err = retry(sctx, func() error {
		actx, cancel := context.WithTimeout(sctx, 5*time.Second)
		defer cancel()
		return m.DoubleAck(actx)
	})
	if err != nil {
		w.logf("task %s: ack after store: %v (it will run again; the learner drops the duplicate)", task.TaskID, err)
	}
	w.done.Add(1)
}

func (w *Worker) nak(m jetstream.Msg, task Task, cause error) {
	w.nacked.Add(1)
	if errors.Is(cause, context.Canceled) {
		w.logf("task %s: returned to the queue at shutdown", task.TaskID)
	} else {
		w.logf("task %s: returned to the queue: %v", task.TaskID, cause)
	}
	_ = m.Nak()
}

func (w *Worker) term(m jetstream.Msg, reason string) {
	w.termed.Add(1)
	w.logf("task terminated: %s", reason)
	if w.Conn != nil && !termReasonUnderstood(w.Conn.NC.ConnectedServerVersion()) {
		// nats-server before 2.10 does not parse "+TERM <reason>" and redelivers the message
		// forever: terminate it plainly (the reason is in the worker's log).
		_ = m.Term()
		return
	}
	_ = m.TermWithReason(reason)
}

var errSuperseded = errors.New("superseded")

// awaitPolicy waits until the worker's policy may run task: its epoch at its admit version or
// later. It returns errSuperseded once the policy has moved past the task's epoch.
func (w *Worker) awaitPolicy(ctx context.Context, task Task) error {
	if w.Policy == nil {
		return nil
	}
	for {
		e, v := w.Policy()
		switch {
		case e > task.Epoch:
			return errSuperseded
		case e == task.Epoch && v >= task.AdmitVersion:
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// heartbeat puts the worker's heartbeat every few seconds until hb ends; draining is set once
// work ends.
func (w *Worker) heartbeat(hb, work context.Context) {
	kv, err := w.Conn.JS.KeyValue(hb, WorkersBucket)
	if err != nil {
		w.logf("heartbeat: %v", err)
		return
	}
	host, _ := os.Hostname()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		e, v := uint32(0), int32(-1)
		if w.Policy != nil {
			e, v = w.Policy()
		}
		b := Heartbeat{Worker: w.ID, Host: host, PID: os.Getpid(), Epoch: e, Version: v, Running: int(w.running.Load()),
			Done: w.done.Load(), Time: time.Now().UTC(), Draining: work.Err() != nil}
		if data, err := jsonMarshal(b); err == nil {
			pctx, cancel := context.WithTimeout(hb, 2*time.Second)
			_, _ = kv.Put(pctx, w.RunName+"."+w.ID, data)
			cancel()
		}
		select {
		case <-hb.Done():
			return
		case <-t.C:
		}
	}
}
