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
	// Version, when set, reports the policy version the worker generates with (heartbeats).
	Version func() int32
	// OnStart, when set, is called as each episode starts.
	OnStart func(Task, int)
	// Logf, when set, receives one line per notable event.
	Logf func(format string, args ...any)

	running, done, nacked, termed atomic.Int64
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
	if w.OnStart != nil {
		w.OnStart(task, attempt)
	}
	// Keep the task ours while the episode runs.
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
	t, err := w.Episode(ctx, task)
	if err != nil {
		stopKeep()
		w.nak(m, task, err)
		return
	}
	if t.ID == "" {
		t.ID = task.MsgID(attempt)
	}
	_, err = w.Conn.PublishTrajectory(ctx, task, attempt, w.ID, t)
	stopKeep()
	if err != nil {
		w.nak(m, task, err)
		return
	}
	// The trajectory is stored: now the task may go. If this ack is lost the task is run again
	// and the learner drops the second trajectory as a duplicate.
	err = retry(ctx, func() error {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
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
	_ = m.TermWithReason(reason)
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
		v := int32(-1)
		if w.Version != nil {
			v = w.Version()
		}
		b := Heartbeat{Worker: w.ID, Host: host, PID: os.Getpid(), Version: v, Running: int(w.running.Load()),
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
