package dist

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// Conn is a connection to the data plane's NATS server, learner's or worker's.
type Conn struct {
	NC *nats.Conn
	JS jetstream.JetStream

	mu          sync.Mutex
	reconnected chan struct{} // closed at the next reconnect, then replaced
}

// nextReconnect returns a channel closed when the connection next reconnects: a server that
// restarted has forgotten the ephemeral consumers (watches) made before.
func (c *Conn) nextReconnect() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reconnected
}

func (c *Conn) signalReconnect() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.reconnected)
	c.reconnected = make(chan struct{})
}

// Connect connects to url (nats://host:port; credentials may be in the URL for a server that
// authenticates users) with token, when not empty. It reconnects forever, so a restarted server
// is found again; name identifies the client in the server's monitoring.
func Connect(url, token, name string) (*Conn, error) {
	return Dial(url, Auth{Token: token}, name)
}

// Auth is how a client authenticates: a token, or an NKey seed ("SU…") with which it signs the
// server's nonce (the seed never leaves the client). Neither: the server needs none, or the
// credentials are in the URL.
type Auth struct {
	Token    string
	NKeySeed string
}

// Dial is Connect with any credentials; extra options (tests: an error handler) come last.
func Dial(url string, a Auth, name string, extra ...nats.Option) (*Conn, error) {
	c := &Conn{reconnected: make(chan struct{})}
	opts := []nats.Option{
		nats.ReconnectHandler(func(*nats.Conn) { c.signalReconnect() }),
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(200 * time.Millisecond),
		nats.ReconnectBufSize(-1), // publishes during a reconnect fail rather than wait in a buffer
		nats.RetryOnFailedConnect(false),
		// Asynchronous errors (a permission refused to a library's clean-up call) are not
		// printed: every operation that matters returns its error to its caller.
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
	}
	switch {
	case a.Token != "" && a.NKeySeed != "":
		return nil, errors.New("dist: connect: a token or an nkey, not both")
	case a.Token != "":
		opts = append(opts, nats.Token(a.Token))
	case a.NKeySeed != "":
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(a.NKeySeed)))
		if err != nil {
			return nil, fmt.Errorf("dist: connect: nkey seed: %w", err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("dist: connect: nkey seed: %w", err)
		}
		opts = append(opts, nats.Nkey(pub, kp.Sign))
	}
	opts = append(opts, extra...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("dist: connect %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("dist: %w", err)
	}
	c.NC, c.JS = nc, js
	return c, nil
}

// Close closes the connection.
func (c *Conn) Close() { c.NC.Close() }

// RunConfig sizes the streams and buckets of one run (SetupRun).
type RunConfig struct {
	Run string
	// TaskAckWait is how long a worker may hold a task without acknowledging it or saying it is
	// in progress before it is redelivered to another worker (0: 30 s). Workers send "in
	// progress" every third of it while an episode runs, so this bounds how long a killed worker's
	// task waits, not how long an episode may take.
	TaskAckWait time.Duration
	// MaxDeliver bounds the deliveries of one task (0: unlimited).
	MaxDeliver int
	// DedupWindow is how long the trajectory stream remembers message ids (0: 10 min).
	DedupWindow time.Duration
	// HeartbeatTTL is how long a worker's heartbeat lives (0: 15 s).
	HeartbeatTTL time.Duration
	// TrajMaxBytes bounds the trajectory stream (0: unlimited); when full, publishing fails
	// rather than discarding stored trajectories.
	TrajMaxBytes int64
}

func (c RunConfig) withDefaults() RunConfig {
	if c.TaskAckWait == 0 {
		c.TaskAckWait = 30 * time.Second
	}
	if c.DedupWindow == 0 {
		c.DedupWindow = 10 * time.Minute
	}
	if c.HeartbeatTTL == 0 {
		c.HeartbeatTTL = 15 * time.Second
	}
	if c.TrajMaxBytes == 0 {
		c.TrajMaxBytes = -1
	}
	return c
}

// SetupRun creates (or updates) the run's streams, the workers' task consumer, and the shared
// buckets. It is the learner's; a worker's credentials may not create streams.
func (c *Conn) SetupRun(ctx context.Context, cfg RunConfig) error {
	if err := CheckRun(cfg.Run); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	run := cfg.Run
	if _, err := c.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        TasksStream(run),
		Description: "agentrl tasks of run " + run,
		Subjects:    []string{TaskSubject(run)},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardNew,
		Duplicates:  cfg.DedupWindow,
	}); err != nil {
		return fmt.Errorf("dist: tasks stream: %w", err)
	}
	maxDeliver := cfg.MaxDeliver
	if maxDeliver == 0 {
		maxDeliver = -1
	}
	if _, err := c.JS.CreateOrUpdateConsumer(ctx, TasksStream(run), jetstream.ConsumerConfig{
		Durable:       TasksConsumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.TaskAckWait,
		MaxDeliver:    maxDeliver,
		MaxAckPending: 1 << 16,
		MaxWaiting:    4096,
	}); err != nil {
		return fmt.Errorf("dist: tasks consumer: %w", err)
	}
	if _, err := c.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        TrajStream(run),
		Description: "agentrl trajectories of run " + run,
		Subjects:    []string{SubjectPrefix + "." + run + ".traj.>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardNew,
		MaxBytes:    cfg.TrajMaxBytes,
		Duplicates:  cfg.DedupWindow,
	}); err != nil {
		return fmt.Errorf("dist: trajectory stream: %w", err)
	}
	if _, err := c.JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: PolicyBucket, Description: "agentrl policy pointers", History: 4, Storage: jetstream.FileStorage,
	}); err != nil {
		return fmt.Errorf("dist: policy bucket: %w", err)
	}
	if _, err := c.JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: WorkersBucket, Description: "agentrl worker heartbeats", TTL: cfg.HeartbeatTTL, Storage: jetstream.MemoryStorage,
	}); err != nil {
		return fmt.Errorf("dist: workers bucket: %w", err)
	}
	for _, b := range []string{WeightsBucket, BlobsBucket} {
		if _, err := c.JS.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket: b, Storage: jetstream.FileStorage,
		}); err != nil {
			return fmt.Errorf("dist: object store %s: %w", b, err)
		}
	}
	return nil
}

// PublishTask queues a task. Its task id is its message id, so publishing the same task twice
// within the dedup window stores it once.
func (c *Conn) PublishTask(ctx context.Context, t Task) error {
	if err := t.validate(t.Run); err != nil {
		return fmt.Errorf("dist: %w", err)
	}
	data, err := jsonMarshal(t)
	if err != nil {
		return err
	}
	err = retryLearner(ctx, func(ctx context.Context) error {
		_, err := c.JS.Publish(ctx, TaskSubject(t.Run), data, jetstream.WithMsgID(t.taskMsgID()))
		return err
	})
	if err != nil {
		return fmt.Errorf("dist: publish task %s: %w", t.TaskID, err)
	}
	return nil
}

// LearnerRetry bounds how long the learner's operations (publishing tasks and weights, taking an
// epoch) retry through a lost connection, a restarting server, before they fail.
var LearnerRetry = 2 * time.Minute

// retryLearner is retry for a learner's operation, bounded by LearnerRetry.
func retryLearner(ctx context.Context, f func(ctx context.Context) error) error {
	rctx, cancel := context.WithTimeout(ctx, LearnerRetry)
	defer cancel()
	return retry(rctx, func() error { return f(rctx) })
}

// retry calls f until it succeeds, ctx ends, or it fails with an error retry cannot help.
func retry(ctx context.Context, f func() error) error {
	wait := 50 * time.Millisecond
	for {
		err := f()
		if err == nil || ctx.Err() != nil || permanent(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// permanent reports errors a retry does not fix.
func permanent(err error) bool {
	return errors.Is(err, nats.ErrPermissionViolation) || errors.Is(err, nats.ErrAuthorization) ||
		errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, errPermanent)
}

var errPermanent = errors.New("permanent")

// PurgeTasks removes every task queued for run. A learner that takes a new epoch calls it before
// issuing its own tasks: its predecessor's are not worth running (workers would terminate them).
func (c *Conn) PurgeTasks(ctx context.Context, run string) error {
	err := retryLearner(ctx, func(ctx context.Context) error {
		st, err := c.JS.Stream(ctx, TasksStream(run))
		if err != nil {
			return err
		}
		return st.Purge(ctx)
	})
	if err != nil {
		return fmt.Errorf("dist: purge tasks: %w", err)
	}
	return nil
}

// SweepTasks removes from run's task queue every task that the workers' consumer has settled but
// the server still stores, and returns how many it removed.
//
// A task is settled once a worker acked (or terminated) it, and the work queue should then drop
// it. A server stopped while it handles the ack may record the ack in the consumer's state but
// not remove the message from the stream: when the stream stops before the consumer, the
// consumer still takes the ack and the stream refuses the removal. After the restart JetStream
// does not reconcile the two for a work queue (it does for interest retention), so the task stays
// stored for good: never delivered again (the consumer counts it as done) and never removed. A
// server killed at the wrong moment can leave the same. Such a task's trajectory is stored (the
// worker acks only after its PubAck), so removing it loses nothing; every task at or below the
// consumer's acknowledgement floor is settled, so the sweep removes the stored ones there, and a
// settled task above the floor is removed by a later sweep once the tasks before it are settled.
//
// With a bounded MaxDeliver the queue also keeps, by design, the tasks that ran out of
// deliveries, below the floor as well; the two cannot be told apart, so nothing is swept.
func (c *Conn) SweepTasks(ctx context.Context, run string) (int, error) {
	if err := CheckRun(run); err != nil {
		return 0, err
	}
	cons, err := c.JS.Consumer(ctx, TasksStream(run), TasksConsumer)
	if err != nil {
		return 0, fmt.Errorf("dist: sweep tasks: %w", err)
	}
	info := cons.CachedInfo()
	if info.Config.MaxDeliver > 0 {
		return 0, nil
	}
	// The floor only rises: whatever is at or below it now stays settled.
	floor := info.AckFloor.Stream
	st, err := c.JS.Stream(ctx, TasksStream(run))
	if err != nil {
		return 0, fmt.Errorf("dist: sweep tasks: %w", err)
	}
	n := 0
	for state := st.CachedInfo().State; state.Msgs > 0 && state.FirstSeq <= floor; {
		if err := st.DeleteMsg(ctx, state.FirstSeq); err == nil {
			n++
		} else if _, gerr := st.GetMsg(ctx, state.FirstSeq); !errors.Is(gerr, jetstream.ErrMsgNotFound) {
			// Not gone meanwhile (a purge, another sweep): a real failure.
			return n, fmt.Errorf("dist: sweep tasks: delete seq %d: %w", state.FirstSeq, err)
		}
		si, err := st.Info(ctx)
		if err != nil {
			return n, fmt.Errorf("dist: sweep tasks: %w", err)
		}
		state = si.State
	}
	return n, nil
}

// TrajLastSeq is the last sequence stored in run's trajectory stream (0 when empty).
func (c *Conn) TrajLastSeq(ctx context.Context, run string) (uint64, error) {
	var last uint64
	err := retryLearner(ctx, func(ctx context.Context) error {
		st, err := c.JS.Stream(ctx, TrajStream(run))
		if err == nil {
			last = st.CachedInfo().State.LastSeq
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("dist: trajectory stream: %w", err)
	}
	return last, nil
}
