package dist

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// finishedKey is the key of PolicyBucket under which a learner records that it finished run:
// its value is the time, RFC 3339.
func finishedKey(run string) string { return run + ".finished" }

// MarkFinished records that the learner finished run, so that its workers say so and stop.
func (c *Conn) MarkFinished(ctx context.Context, run string) error {
	err := retryLearner(ctx, func(ctx context.Context) error {
		kv, err := c.JS.KeyValue(ctx, PolicyBucket)
		if err == nil {
			_, err = kv.Put(ctx, finishedKey(run), []byte(time.Now().UTC().Format(time.RFC3339)))
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("dist: mark run %s finished: %w", run, err)
	}
	return nil
}

// ClearFinished removes MarkFinished's record: a learner (re)starting run.
func (c *Conn) ClearFinished(ctx context.Context, run string) error {
	err := retryLearner(ctx, func(ctx context.Context) error {
		kv, err := c.JS.KeyValue(ctx, PolicyBucket)
		if err == nil {
			err = kv.Purge(ctx, finishedKey(run))
		}
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			err = nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("dist: clear run %s's finished mark: %w", run, err)
	}
	return nil
}

// RunState is what a worker can learn of a run on the server before it takes tasks.
type RunState int

const (
	RunAbsent   RunState = iota // no learner has set the run up on this server
	RunReady                    // set up, and not finished
	RunFinished                 // its learner marked it finished
)

// Run reports the state of run on the server.
func (c *Conn) Run(ctx context.Context, run string) (RunState, error) {
	kv, err := c.JS.KeyValue(ctx, PolicyBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return RunAbsent, nil
	}
	if err != nil {
		return RunAbsent, fmt.Errorf("dist: policy bucket: %w", err)
	}
	if _, err := kv.Get(ctx, finishedKey(run)); err == nil {
		return RunFinished, nil
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return RunAbsent, fmt.Errorf("dist: run %s: %w", run, err)
	}
	if _, err := kv.Get(ctx, run+".rollout"); err == nil {
		return RunReady, nil
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return RunAbsent, fmt.Errorf("dist: run %s: %w", run, err)
	}
	return RunAbsent, nil
}

// WatchFinished returns a channel closed once run's learner marks it finished (checked every
// interval), or never when ctx ends first.
func (c *Conn) WatchFinished(ctx context.Context, run string, interval time.Duration) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if st, err := c.Run(ctx, run); err == nil && st == RunFinished {
				close(out)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// LogEvents is a Dial option that reports the connection's losses and recoveries to logf, so
// that an outage of the server is never silent.
func LogEvents(logf func(format string, a ...any)) nats.Option {
	return func(o *nats.Options) error {
		prev := o.ReconnectedCB
		o.ReconnectedCB = func(nc *nats.Conn) {
			if prev != nil {
				prev(nc)
			}
			logf("reconnected to %s", nc.ConnectedUrlRedacted())
		}
		o.DisconnectedErrCB = func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // closed by this client
			}
			if err == nil {
				err = errors.New("connection closed by the server")
			}
			logf("lost the connection to the server (%v): the learner may have stopped or finished, or the server restarts; reconnecting", err)
		}
		return nil
	}
}
