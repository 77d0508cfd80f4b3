package dist

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentrl/agentrl/traj"
)

// Reasons a trajectory message is not handed out for training (Consumer.Drops).
const (
	DropStale     = "stale"     // its oldest policy token lags the learner by more than MaxStaleness
	DropFailed    = "failed"    // its status is a failure (env_error, timeout, …) and DropFailed is set
	DropDuplicate = "duplicate" // a trajectory of the same <run>/<group>/<sample> was handed out already
	DropFilter    = "filter"    // the consumer's Filter refused it
	DropCorrupt   = "corrupt"   // headers or payload do not decode
	// DropSuperseded: sampled with weights of another learner epoch that are not in this
	// learner's lineage (a crashed learner's versions after its last checkpoint): their version
	// numbers say nothing about how far they are from this learner's policy.
	DropSuperseded = "superseded"
)

// ConsumerConfig configures the learner's trajectory consumer.
type ConsumerConfig struct {
	Run string
	// Durable names the consumer on the server (default "learner"); its position survives
	// restarts of the server and of the learner.
	Durable string
	// AckWait is how long a message handed out may stay unacknowledged before the server
	// redelivers it, were the consumer to stop renewing it (default 30 s). The consumer renews
	// the messages it holds every third of it, so a live learner holds them as long as it needs;
	// a dead one's come back after AckWait.
	AckWait time.Duration
	// MaxAckPending bounds the messages held (handed out or dropped, not yet settled by a
	// checkpoint): at least the batch size × the steps between checkpoints (default 65536).
	MaxAckPending int
	// MaxStaleness η, when > 0 with Version set, drops a trajectory whose oldest policy token is
	// more than η versions behind Version() when it is taken.
	MaxStaleness int32
	Version      func() int32
	// DropFailed drops trajectories whose status is a failure.
	DropFailed bool
	// Filter, when set, returns a non-empty reason to drop a trajectory (counted under "filter").
	Filter func(*traj.Trajectory) string
	// Fetch is how many messages one pull asks for (default 64).
	Fetch int
	// Epoch is the learner's epoch (Pointer.Epoch), 0 when epochs are not used. With it, a
	// trajectory of another epoch is handed out only when every policy token of it was sampled
	// by weights in this learner's lineage (ConsumerState.Lineage), and dropped as superseded
	// otherwise.
	Epoch uint32
	// StartSeq, when > 0, recreates the durable consumer to deliver from this stream sequence,
	// forgetting the server's record of what was acknowledged: the learner's checkpoint
	// (ConsumerState, restored before the first Next) is then the record. A resumed learner
	// passes its state's FirstUnsettled, so that what its predecessor held unacknowledged comes
	// back at once rather than after AckWait, and what was settled is recognised.
	StartSeq uint64
	// SweepTasks is how often the consumer removes from the run's task queue the tasks that the
	// workers' consumer has settled but the server kept (Conn.SweepTasks; 0: every 10 s, < 0:
	// never). Their trajectories are stored; TasksSwept counts them.
	SweepTasks time.Duration
}

// Delivery is one trajectory handed out for training.
type Delivery struct {
	Traj    *traj.Trajectory
	Key     string // <run>/<group>/<sample>
	MsgID   string // Nats-Msg-Id: <key>/<epoch>.<attempt>
	Seq     uint64 // stream sequence in the trajectory stream
	Epoch   uint32 // learner epoch of the task
	Attempt int
	Worker  string
	Bytes   int // payload size in the traj binary form
	msg     jetstream.Msg
	step    int // the step that trained on it, -1 until Trained
}

// Decision is what the consumer did with one stream sequence: handed it out (Reason "") or
// dropped it for Reason.
type Decision struct {
	Seq    uint64 `json:"seq"`
	MsgID  string `json:"msg_id"`
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// ConsumerState is what a learner checkpoint keeps of the consumer (State, Restore), so that a
// resumed learner neither trains twice on a trajectory whose acknowledgement was lost in the
// crash nor counts a drop twice.
type ConsumerState struct {
	// Trained maps each key trained in a checkpointed step to its stream sequence.
	Trained map[string]uint64 `json:"trained"`
	// Dropped maps each dropped stream sequence to its reason.
	Dropped map[uint64]string `json:"dropped"`
	// Lineage maps each learner epoch whose weights are ancestors of the checkpoint to the
	// newest version of that epoch among them: the policy of (epoch e, version v) is in the
	// checkpoint's lineage when v ≤ Lineage[e].
	Lineage map[uint32]int32 `json:"lineage,omitempty"`
}

// FirstUnsettled is the first stream sequence from base on that s neither trained nor dropped:
// where a resumed learner's consumer starts (ConsumerConfig.StartSeq).
func (s ConsumerState) FirstUnsettled(base uint64) uint64 {
	settled := make(map[uint64]bool, len(s.Trained)+len(s.Dropped))
	for _, q := range s.Trained {
		settled[q] = true
	}
	for q := range s.Dropped {
		settled[q] = true
	}
	q := max(base, 1)
	for settled[q] {
		q++
	}
	return q
}

// MaxSeq is the largest stream sequence s records (0 without one).
func (s ConsumerState) MaxSeq() uint64 {
	var m uint64
	for _, q := range s.Trained {
		m = max(m, q)
	}
	for q := range s.Dropped {
		m = max(m, q)
	}
	return m
}

// MaxEpoch is the largest epoch s's lineage names (0 without one).
func (s ConsumerState) MaxEpoch() uint32 {
	var e uint32
	for k := range s.Lineage {
		e = max(e, k)
	}
	return e
}

// Consumer hands out a run's trajectories to the learner, each <run>/<group>/<sample> once.
//
// Acknowledgement rule: a message is acknowledged only at Checkpointed(step) for a step at or
// after the one it was Trained in (and a dropped message at the first Checkpointed after its
// drop). Until then the consumer holds it, renewing its ack deadline, so the server redelivers
// it only if the learner dies; a resumed learner then gets back everything its last checkpoint
// did not include, and Restore(state) of that checkpoint turns any message already trained
// (an acknowledgement lost between checkpoint and ack) into a no-op rather than a second
// training. Handed out but never marked Trained, a message is not acknowledged.
type Consumer struct {
	conn *Conn
	cfg  ConsumerConfig
	cons jetstream.Consumer

	mu        sync.Mutex
	buf       []jetstream.Msg
	held      map[uint64]*Delivery // handed out or dropped, not yet acknowledged
	accepted  map[string]*Delivery // key → its delivery, for every key handed out
	state     ConsumerState        // restored from a checkpoint
	drops     map[string]int64
	decisions []Decision
	redeliver int64
	swept     int64 // tasks removed by the task sweep
	retried   int64 // trajectories that came from a task's later attempt

	stop   context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewConsumer creates (or binds to) the learner's durable consumer on run's trajectory stream.
func (c *Conn) NewConsumer(ctx context.Context, cfg ConsumerConfig) (*Consumer, error) {
	if err := CheckRun(cfg.Run); err != nil {
		return nil, err
	}
	if cfg.Durable == "" {
		cfg.Durable = "learner"
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.MaxAckPending == 0 {
		cfg.MaxAckPending = 1 << 16
	}
	if cfg.Fetch == 0 {
		cfg.Fetch = 64
	}
	if cfg.SweepTasks == 0 {
		cfg.SweepTasks = 10 * time.Second
	}
	ccfg := jetstream.ConsumerConfig{
		Durable:       cfg.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if cfg.StartSeq > 0 {
		err := c.JS.DeleteConsumer(ctx, TrajStream(cfg.Run), cfg.Durable)
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("dist: trajectory consumer: %w", err)
		}
		ccfg.DeliverPolicy, ccfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, cfg.StartSeq
	}
	cons, err := c.JS.CreateOrUpdateConsumer(ctx, TrajStream(cfg.Run), ccfg)
	if err != nil {
		return nil, fmt.Errorf("dist: trajectory consumer: %w", err)
	}
	k := &Consumer{conn: c, cfg: cfg, cons: cons, held: map[uint64]*Delivery{}, accepted: map[string]*Delivery{},
		drops: map[string]int64{}}
	k.state = ConsumerState{Trained: map[string]uint64{}, Dropped: map[uint64]string{}, Lineage: map[uint32]int32{}}
	k.stop, k.cancel = context.WithCancel(context.Background())
	k.wg.Go(func() { k.every(max(cfg.AckWait/3, 10*time.Millisecond), k.renew) })
	if cfg.SweepTasks > 0 {
		k.wg.Go(func() { k.every(cfg.SweepTasks, k.sweep) })
	}
	return k, nil
}

// Restore loads the state a checkpoint saved (State) before the first Next.
func (k *Consumer) Restore(s ConsumerState) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.state = ConsumerState{Trained: maps.Clone(s.Trained), Dropped: maps.Clone(s.Dropped), Lineage: maps.Clone(s.Lineage)}
	if k.state.Trained == nil {
		k.state.Trained = map[string]uint64{}
	}
	if k.state.Dropped == nil {
		k.state.Dropped = map[uint64]string{}
	}
	if k.state.Lineage == nil {
		k.state.Lineage = map[uint32]int32{}
	}
	for _, r := range s.Dropped {
		k.drops[r]++
	}
}

// Close stops renewing held messages; they are redelivered after AckWait unless acknowledged.
func (k *Consumer) Close() {
	k.cancel()
	k.wg.Wait()
}

// every calls f every d until Close.
func (k *Consumer) every(d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-k.stop.Done():
			return
		case <-t.C:
		}
		f()
	}
}

// renew tells the server the held messages are still being worked on.
func (k *Consumer) renew() {
	k.mu.Lock()
	ms := make([]jetstream.Msg, 0, len(k.held))
	for _, d := range k.held {
		ms = append(ms, d.msg)
	}
	k.mu.Unlock()
	for _, m := range ms {
		_ = m.InProgress()
	}
}

// sweep removes the tasks the workers have settled and the server kept (Conn.SweepTasks). A
// sweep that fails (a restarting server) is tried again at the next.
func (k *Consumer) sweep() {
	ctx, cancel := context.WithTimeout(k.stop, max(k.cfg.SweepTasks, 10*time.Second))
	n, _ := k.conn.SweepTasks(ctx, k.cfg.Run)
	cancel()
	if n > 0 {
		k.mu.Lock()
		k.swept += int64(n)
		k.mu.Unlock()
	}
}

// Next returns the next trajectory to train on, waiting for one until ctx ends. Messages it
// drops on the way are counted by reason (Drops) and settled at the next checkpoint.
func (k *Consumer) Next(ctx context.Context) (*Delivery, error) {
	for {
		m, err := k.fetch(ctx)
		if err != nil {
			return nil, err
		}
		if d := k.decide(ctx, m); d != nil {
			return d, nil
		}
	}
}

func (k *Consumer) fetch(ctx context.Context) (jetstream.Msg, error) {
	for {
		k.mu.Lock()
		if len(k.buf) > 0 {
			m := k.buf[0]
			k.buf = k.buf[1:]
			k.mu.Unlock()
			return m, nil
		}
		k.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		wait := time.Second
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, max(time.Until(dl), 10*time.Millisecond))
		}
		// What is there now, up to Fetch messages; when nothing is, wait for the first one.
		batch, err := k.cons.FetchNoWait(k.cfg.Fetch)
		if err == nil {
			var got []jetstream.Msg
			for m := range batch.Messages() {
				got = append(got, m)
			}
			if len(got) > 0 {
				k.mu.Lock()
				k.buf = append(k.buf, got...)
				k.mu.Unlock()
				continue
			}
			batch, err = k.cons.Fetch(1, jetstream.FetchMaxWait(wait))
		}
		if err != nil {
			if permanent(err) {
				return nil, fmt.Errorf("dist: consume: %w", err)
			}
			select { // a restarting server: wait and pull again
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		var got []jetstream.Msg
		for m := range batch.Messages() {
			got = append(got, m)
		}
		k.mu.Lock()
		k.buf = append(k.buf, got...)
		k.mu.Unlock()
	}
}

// decide hands m out or drops it; nil when dropped (or a redelivery of a message it holds).
func (k *Consumer) decide(ctx context.Context, m jetstream.Msg) *Delivery {
	md, err := m.Metadata()
	if err != nil {
		return nil // not a JetStream message: cannot be acknowledged or counted by sequence
	}
	seq := md.Sequence.Stream
	h := m.Headers()
	id := h.Get(HeaderMsgID)
	k.mu.Lock()
	if _, ok := k.held[seq]; ok {
		// Redelivered while held (the renewal missed a server restart): it is the same message.
		k.redeliver++
		k.mu.Unlock()
		return nil
	}
	if _, ok := k.state.Dropped[seq]; ok {
		k.redeliver++ // dropped before the last checkpoint; its ack was lost
		k.mu.Unlock()
		_ = m.Ack()
		return nil
	}
	k.mu.Unlock()

	d := &Delivery{MsgID: id, Seq: seq, Worker: h.Get(HeaderWorker), msg: m, step: -1}
	key, epoch, attempt, kerr := parseMsgID(id, k.cfg.Run)
	d.Key, d.Epoch, d.Attempt = key, epoch, attempt
	if kerr != nil {
		return k.drop(d, DropCorrupt, kerr.Error())
	}
	k.mu.Lock()
	if s, ok := k.state.Trained[key]; ok && s == seq {
		k.redeliver++ // trained in a checkpointed step; its ack was lost
		k.mu.Unlock()
		_ = m.Ack()
		return nil
	}
	_, seen := k.accepted[key]
	_, trained := k.state.Trained[key]
	k.mu.Unlock()
	if attempt > 0 {
		k.mu.Lock()
		k.retried++
		k.mu.Unlock()
	}
	if seen || trained {
		return k.drop(d, DropDuplicate, "")
	}
	data, err := k.conn.payload(ctx, m)
	if err != nil && !errors.Is(err, errPermanent) {
		// The blob could not be read now (a restarting server): leave the message for later.
		_ = m.NakWithDelay(time.Second)
		return nil
	}
	t := new(traj.Trajectory)
	if err == nil {
		err = t.UnmarshalBinary(data)
	}
	if err != nil {
		return k.drop(d, DropCorrupt, err.Error())
	}
	d.Traj, d.Bytes = t, len(data)
	if k.cfg.DropFailed && t.Status.Failed() {
		return k.drop(d, DropFailed, t.Status.String())
	}
	if k.cfg.Epoch > 0 && epoch != k.cfg.Epoch {
		if _, hi, ok := versionSpan(t); ok {
			k.mu.Lock()
			upto, in := k.state.Lineage[epoch]
			k.mu.Unlock()
			if !in || hi > upto {
				return k.drop(d, DropSuperseded, fmt.Sprintf("epoch %d version %d, not in the lineage of epoch %d", epoch, hi, k.cfg.Epoch))
			}
		}
	}
	if k.cfg.MaxStaleness > 0 && k.cfg.Version != nil {
		if lo, _, ok := versionSpan(t); ok {
			if v := k.cfg.Version(); v-lo > k.cfg.MaxStaleness {
				return k.drop(d, DropStale, fmt.Sprintf("oldest token v%d, learner v%d", lo, v))
			}
		}
	}
	if k.cfg.Filter != nil {
		if r := k.cfg.Filter(t); r != "" {
			return k.drop(d, DropFilter, r)
		}
	}
	k.mu.Lock()
	k.held[seq] = d
	k.accepted[key] = d
	k.decisions = append(k.decisions, Decision{Seq: seq, MsgID: id})
	k.mu.Unlock()
	return d
}

func (k *Consumer) drop(d *Delivery, reason, detail string) *Delivery {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.drops[reason]++
	k.held[d.Seq] = d
	d.step = -2 // settled at the next checkpoint
	k.decisions = append(k.decisions, Decision{Seq: d.Seq, MsgID: d.MsgID, Reason: reason, Detail: detail})
	k.state.Dropped[d.Seq] = reason
	return nil
}

// Trained records that step trained on ds; they are acknowledged at Checkpointed(s) for s ≥ step.
func (k *Consumer) Trained(step int, ds ...*Delivery) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, d := range ds {
		d.step = step
	}
}

// State is what a checkpoint of the given step, holding policy version, must keep: the keys
// trained in steps up to it, every drop so far, and the lineage of its weights (this epoch's
// versions up to version, and the restored lineage). Save it with the checkpoint, then call
// Checkpointed.
func (k *Consumer) State(step int, version int32) ConsumerState {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := ConsumerState{Trained: maps.Clone(k.state.Trained), Dropped: maps.Clone(k.state.Dropped), Lineage: maps.Clone(k.state.Lineage)}
	if k.cfg.Epoch > 0 {
		s.Lineage[k.cfg.Epoch] = version
	}
	for key, d := range k.accepted {
		if d.step >= 0 && d.step <= step {
			s.Trained[key] = d.Seq
		}
	}
	return s
}

// Checkpointed acknowledges every message trained in a step up to step, and every drop: the
// checkpoint of step is durable, so none of them may come back. It returns the first failed
// acknowledgement; the messages not acknowledged stay held and are tried at the next call.
func (k *Consumer) Checkpointed(ctx context.Context, step int) error {
	k.mu.Lock()
	var due []*Delivery
	for _, d := range k.held {
		if d.step == -2 || d.step >= 0 && d.step <= step {
			due = append(due, d)
		}
	}
	k.mu.Unlock()
	slices.SortFunc(due, func(a, b *Delivery) int { return cmp.Compare(a.Seq, b.Seq) })
	// Plain acks then one flush: the server has them all once the flush returns (it handles a
	// connection's messages in order). An ack lost anyway (a server restart in between) makes the
	// message come back; State, saved with the checkpoint, recognises it.
	var first error
	var sent []*Delivery
	for _, d := range due {
		if err := d.msg.Ack(); err != nil {
			if first == nil {
				first = fmt.Errorf("dist: ack seq %d: %w", d.Seq, err)
			}
			continue
		}
		sent = append(sent, d)
	}
	if len(sent) > 0 {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := k.conn.NC.FlushWithContext(fctx)
		cancel()
		if err != nil {
			return fmt.Errorf("dist: acks of checkpoint %d not confirmed: %w", step, err)
		}
	}
	k.mu.Lock()
	for _, d := range sent {
		delete(k.held, d.Seq)
		if d.step >= 0 {
			k.state.Trained[d.Key] = d.Seq
		}
	}
	k.mu.Unlock()
	return first
}

// Drops returns the number of messages dropped, by reason (restored ones included).
func (k *Consumer) Drops() map[string]int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.drops)
}

// Decisions returns, in order, what this consumer did with each stream sequence it decided on.
func (k *Consumer) Decisions() []Decision {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.decisions)
}

// Redelivered counts messages that came back after being decided on (a renewal or an
// acknowledgement lost to a restart) and were recognised rather than decided on again.
func (k *Consumer) Redelivered() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.redeliver
}

// TasksRetried counts the trajectories that came from a later attempt of their task (handed out
// or dropped, a redelivery of the same message aside): an earlier worker took the task and did not
// finish it (killed, stalled past the task's ack wait, or returned it at shutdown or on an error).
// When that worker had stored its trajectory, the retry's is also a duplicate.
func (k *Consumer) TasksRetried() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.retried
}

// TasksSwept counts the settled tasks the server kept in the task queue and the consumer
// removed (ConsumerConfig.SweepTasks).
func (k *Consumer) TasksSwept() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.swept
}

// Held is the number of messages handed out or dropped and not yet acknowledged.
func (k *Consumer) Held() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.held)
}

// parseMsgID splits <run>/<group>/<sample>/<epoch>.<attempt>[.<nonce>] into its key, epoch and
// attempt.
func parseMsgID(id, run string) (key string, epoch uint32, attempt int, err error) {
	bad := func(why string) (string, uint32, int, error) {
		return "", 0, 0, fmt.Errorf("message id %q: %s", id, why)
	}
	var parts [4]string
	rest := id
	for i := range 3 {
		j := strings.IndexByte(rest, '/')
		if j < 0 {
			return bad("want <run>/<group>/<sample>/<epoch>.<attempt>")
		}
		parts[i], rest = rest[:j], rest[j+1:]
	}
	parts[3] = rest
	if parts[0] != run {
		return bad(fmt.Sprintf("not of run %q", run))
	}
	if _, err := strconv.ParseUint(parts[1], 10, 64); err != nil {
		return bad("bad group")
	}
	if s, err := strconv.Atoi(parts[2]); err != nil || s < 0 {
		return bad("bad sample")
	}
	es, as, ok := strings.Cut(parts[3], ".")
	if !ok {
		return bad("want <epoch>.<attempt> after the sample")
	}
	if a, nonce, ok := strings.Cut(as, "."); ok {
		if !nonceRE.MatchString(nonce) {
			return bad("bad nonce")
		}
		as = a
	}
	e, err := strconv.ParseUint(es, 10, 32)
	if err != nil {
		return bad("bad epoch")
	}
	a, err := strconv.Atoi(as)
	if err != nil || a < 0 {
		return bad("bad attempt")
	}
	return id[:len(id)-len(parts[3])-1], uint32(e), a, nil
}

// nonceRE is a trajectory message id's nonce (nuid: 22 base-62 characters).
var nonceRE = regexp.MustCompile(`^[0-9A-Za-z]{1,64}$`)
