package pipeline

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/monitor"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// The continuous controller (rl.async.mode: continuous) admits one group at a time, whenever the
// staleness bound lets one start, instead of sampling a step's batch at a time: a slow episode
// holds back only its own group, never the step. This is AReaL's admission rule: with B groups per
// step, the learner having trained t steps of the phase and η the bound, a new group may start
// while
//
//	admitted − discarded < (t + η + 1) · B
//
// where discarded counts the groups that will never be part of a trained batch (filtered by
// dynamic sampling, stale, or cancelled). A group admitted under version v is then trained at the
// latest η steps later, unless it finishes after groups admitted after it; the learner takes the
// earliest-admitted groups that have finished, drops every episode past the bound as it takes it
// (the hard guarantee; a group whose other members are within it trains with them and is counted,
// async/partial_stale), and at each new version cancels the groups in flight that can no longer
// train within the bound.
//
// Which finished groups the learner takes is rl.async.order. In finish order (above), the groups
// dropped as stale or cancelled are the slow ones, so the trained episodes are faster than the
// sampled ones: async/latency_bias measures it. Bounded order (admission.take) keeps every
// admitted group within its last step instead, so nothing is stale or cancelled; admission order
// takes them as they were admitted. rl.async.stale: keep trains the stale groups instead of
// dropping or cancelling them.

// asyncGroupKey is the trajectory meta key naming a group's place in the continuous admission
// stream, "START/K": the K-th group admitted by the producer that began at phase step START. Replay
// reads it to redraw the group's task.
const asyncGroupKey = "async_group"

// admitted is one group the continuous producer started.
type admitted struct {
	k       int   // admission index in this producer's stream
	version int32 // the published policy version when it was admitted
	cancel  context.CancelFunc
	trajs   []*traj.Trajectory // once finished
	started time.Time          // when it was admitted
}

// admission is the state the producer and the learner share.
type admission struct {
	mu        sync.Mutex
	eta, B    int
	order     string // rl.async.order
	admitted  int    // groups started
	discarded int    // groups that will not be part of a trained batch
	trained   int    // steps the learner trained since the producer began
	version   int32
	inflight  map[int]*admitted
	ready     []*admitted // finished, in admission order
	err       error       // the first failure of a group (a broken policy), ends the phase
	// idle is how long no group was in flight since the last step (the bound held generation
	// back), idleSince when the current such stretch began (zero while groups are in flight).
	idle      time.Duration
	idleSince time.Time
	// toLearner and toProducer wake the other side (buffered: a wake-up is never lost).
	toLearner, toProducer chan struct{}
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// canAdmit reports whether the bound lets one more group start. Called with mu held.
func (a *admission) canAdmit() bool {
	return a.admitted-a.discarded < (a.trained+a.eta+1)*a.B
}

// remove takes group k out of the groups in flight at time now. Called with mu held.
func (a *admission) remove(k int, now time.Time) {
	delete(a.inflight, k)
	if len(a.inflight) == 0 {
		a.idleSince = now
	}
}

// finished moves group g, finished with trajs, from the groups in flight to the finished ones,
// which stay in admission order. Called with mu held.
func (a *admission) finished(g *admitted, trajs []*traj.Trajectory) {
	g.trajs = trajs
	i, _ := slices.BinarySearchFunc(a.ready, g.k, func(x *admitted, k int) int { return x.k - k })
	a.ready = slices.Insert(a.ready, i, g)
}

// cancelStale cancels and returns the groups in flight since a version more than η behind
// version, which can no longer train within the bound. Called with mu held.
func (a *admission) cancelStale(version int32, now time.Time) []*admitted {
	var out []*admitted
	for k, g := range a.inflight {
		if version-g.version > int32(a.eta) {
			g.cancel()
			a.remove(k, now)
			a.discarded++
			out = append(out, g)
		}
	}
	return out
}

// take removes and returns the finished group the learner trains next, if any, for a step under
// policy version that still has room for slots groups. Called with mu held.
//
// Finish order: the earliest-admitted finished group. Admission order: the earliest-admitted
// group, once it has finished. Bounded order: the earliest-admitted finished group whose taking
// leaves room, in this step and the next ones, for every group that must train by then: a group
// admitted under version v trains at the latest under version v + η, i.e. within
// d = v + η − version steps after this one, and the groups not yet trained, in admission order
// (which is the order of their last steps), must fit: the i-th (from 1) needs
// i ≤ slots + d·B. The earliest-admitted group always may be taken.
func (a *admission) take(version int32, slots int) *admitted {
	if len(a.ready) == 0 {
		return nil
	}
	first := a.ready[0].k
	for k := range a.inflight {
		first = min(first, k)
	}
	switch {
	case a.ready[0].k == first:
		return a.takeAt(0)
	case a.order == config.OrderAdmission:
		return nil
	case a.order == config.OrderFinish:
		return a.takeAt(0)
	}
	var pending []*admitted // every group not trained: in flight or finished
	for _, g := range a.inflight {
		pending = append(pending, g)
	}
	pending = append(pending, a.ready...)
	slices.SortFunc(pending, func(x, y *admitted) int { return x.k - y.k })
	for i, g := range a.ready {
		if a.fits(pending, g.k, version, slots-1) {
			return a.takeAt(i)
		}
	}
	return nil
}

// fits reports whether the groups in pending (in admission order) other than group skip still
// train within their last steps when the current step has room for slots more.
func (a *admission) fits(pending []*admitted, skip int, version int32, slots int) bool {
	n := 0
	for _, g := range pending {
		if g.k == skip {
			continue
		}
		n++
		if d := int(g.version) + a.eta - int(version); n > slots+d*a.B {
			return false
		}
	}
	return true
}

// takeAt removes and returns a.ready[i]. Called with mu held.
func (a *admission) takeAt(i int) *admitted {
	g := a.ready[i]
	a.ready = slices.Delete(a.ready, i, i+1)
	return g
}

// latencyBias accumulates over a phase the durations (rollout wall time, environment latency
// included) of the episodes trained and of the episodes that were candidates for training: the
// trained ones, those dropped as stale and those cancelled in flight (counted with the time they
// had run, a lower bound). Episodes dynamic sampling filtered are left out of both, as a
// synchronous step filters them too: the ratio measures the selection by time alone.
type latencyBias struct {
	trained, sampled   time.Duration
	nTrained, nSampled int
}

// ratio is async/latency_bias: the mean duration of the sampled episodes over that of the
// trained ones (1: no bias; above 1: the learner trains on faster episodes than it samples); ok
// is false before anything trained.
func (b *latencyBias) ratio() (float64, bool) {
	if b.nTrained == 0 || b.trained <= 0 {
		return 0, false
	}
	return (b.sampled.Seconds() / float64(b.nSampled)) / (b.trained.Seconds() / float64(b.nTrained)), true
}

// add counts a step's trained episodes, its episodes dropped as stale, and n episodes of groups
// cancelled after running for ran.
func (b *latencyBias) add(trained []*traj.Trajectory, stale time.Duration, nStale int) {
	for _, t := range trained {
		b.trained += t.Timings.Total
		b.sampled += t.Timings.Total
	}
	b.nTrained += len(trained)
	b.nSampled += len(trained) + nStale
	b.sampled += stale
}

// cancelled counts n episodes cancelled after running for ran.
func (b *latencyBias) cancelled(n int, ran time.Duration) {
	b.nSampled += n
	b.sampled += time.Duration(n) * ran
}

// stepFill is the learner's collection of one step's batch from the groups it takes, in order:
// it is what both the live controller and replay run, so that a replay rebuilds the same batch.
type stepFill struct {
	want, limit int // groups wanted; groups that may be taken (dynamic sampling's rounds × want)
	dynamic     bool
	version     int32
	eta         int32
	keep        bool // rl.async.stale: keep: nothing is dropped as stale

	taken    []*traj.Trajectory // every trajectory taken, in order (what the step records)
	groups   [][]*traj.Trajectory
	fill     reward.FillStats
	stale    int // episodes dropped as stale
	staleDur time.Duration
	partial  int // groups in the batch without their stale members
	discards int // groups taken that will not train
}

func newStepFill(p config.Phase, version int32) *stepFill {
	c := p.RL
	f := &stepFill{want: c.GroupsPerStep, limit: c.GroupsPerStep, version: version, eta: int32(c.Async.MaxStaleness), keep: c.Async.Stale == config.StaleKeep}
	if ds := c.DynamicSampling; ds != nil {
		f.dynamic, f.limit = true, ds.MaxRounds*c.GroupsPerStep
	}
	return f
}

// full reports whether the step needs no more groups.
func (f *stepFill) full() bool { return len(f.groups) >= f.want || f.fill.Sampled >= f.limit }

// slots is how many more groups the step trains at most.
func (f *stepFill) slots() int { return f.want - len(f.groups) }

// offer takes one finished group: stale episodes are dropped, then (with dynamic sampling) failed
// episodes and groups without reward variance, as sampleRL's filter does. It reports whether the
// group joined the batch (false: it is discarded). A group whose members lag differently joins
// without its stale ones, and is counted (partial).
func (f *stepFill) offer(g []*traj.Trajectory) bool {
	f.fill.Sampled++
	f.taken = append(f.taken, g...)
	kept, dropped, partial := [][]*traj.Trajectory{g}, 0, 0
	if !f.keep {
		kept, dropped, partial = dropStale(kept, f.version, f.eta)
		for _, t := range g {
			if isStale(t, f.version, f.eta) {
				f.staleDur += t.Timings.Total
			}
		}
	}
	f.stale += dropped
	if len(kept) == 0 {
		f.discards++
		return false
	}
	grp := kept[0]
	if f.dynamic {
		ok, failed := reward.DropFailed(grp)
		f.fill.FailedEps += failed
		if !reward.Informative(ok) {
			f.fill.ZeroVariance++
			f.discards++
			return false
		}
		grp = ok
	}
	f.partial += partial
	f.groups = append(f.groups, grp)
	return true
}

// done finishes the step's fill statistics.
func (f *stepFill) done() {
	f.fill.Rounds = (f.fill.Sampled + f.want - 1) / f.want
	f.fill.Partial = f.dynamic && len(f.groups) < f.want
}

// asyncStats is what the fill adds to the step's asynchronous metrics (the live loop adds its
// queue and timings).
func (f *stepFill) asyncStats() *asyncStats {
	return &asyncStats{droppedStale: f.stale, partialStale: f.partial, continuous: true}
}

// asyncTask is the task of the k-th group admitted by the producer that began at step start: a
// stream of its own, so that the tasks do not depend on when groups were admitted (unless the
// monitor's task sampler chooses them from what it has observed so far).
func (r *Run) asyncTask(pi int, p config.Phase, start, k int) (rollout.Task, error) {
	base := r.stepRNG(pi, start, 5).Uint64()
	rng := rand.New(rand.NewPCG(base, uint64(k)))
	return r.drawTask(rng, p, uint64(start)<<32|uint64(k))
}

// parseAsyncGroup reads a trajectory's asyncGroupKey.
func parseAsyncGroup(t *traj.Trajectory) (start, k int, ok bool) {
	for _, kv := range t.Meta {
		if kv.Key != asyncGroupKey {
			continue
		}
		a, b, found := strings.Cut(kv.Value, "/")
		s, err1 := strconv.Atoi(a)
		n, err2 := strconv.Atoi(b)
		if !found || err1 != nil || err2 != nil {
			return 0, 0, false
		}
		return s, n, true
	}
	return 0, 0, false
}

// runRLContinuous is an asynchronous RL phase with continuous admission (see the top of the file).
func (r *Run) runRLContinuous(ctx context.Context, pi int, p config.Phase, start int) error {
	c := p.RL
	eta := c.Async.MaxStaleness
	l, err := r.openRL(ctx, pi, p, start)
	if err != nil {
		return err
	}
	defer l.close()

	a := &admission{eta: eta, B: c.GroupsPerStep, order: c.Async.Order, version: r.version, inflight: map[int]*admitted{},
		toLearner: make(chan struct{}, 1), toProducer: make(chan struct{}, 1)}
	runner := &rollout.Runner{Gen: l.smp.gen, Tok: r.tok, Cfg: r.Cfg.Rollout.Config, SampleSeed: r.stepRNG(pi, start, 3).Uint64(), NewConversation: r.opts.NewConversation}
	envs := withLatency(r.phaseEnvs(p.Envs), p.Envs)
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	fail := func(err error) {
		a.mu.Lock()
		if a.err == nil {
			a.err = err
		}
		a.mu.Unlock()
		wake(a.toLearner)
	}
	// The producer: start a group whenever the bound allows one.
	wg.Go(func() {
		for k := 0; ; k++ {
			a.mu.Lock()
			for !a.canAdmit() {
				a.mu.Unlock()
				select {
				case <-a.toProducer:
				case <-pctx.Done():
					return
				}
				a.mu.Lock()
			}
			if !a.idleSince.IsZero() {
				a.idle += r.now().Sub(a.idleSince)
				a.idleSince = time.Time{}
			}
			task, err := r.asyncTask(pi, p, start, k)
			if err != nil {
				a.mu.Unlock()
				fail(err)
				return
			}
			gctx, gcancel := context.WithCancel(pctx)
			g := &admitted{k: k, version: a.version, cancel: gcancel, started: r.now()}
			a.admitted++
			a.inflight[k] = g
			a.mu.Unlock()
			meta := traj.KV{Key: asyncGroupKey, Value: fmt.Sprintf("%d/%d", start, k)}
			wg.Go(func() {
				defer gcancel()
				groups, err := runner.RunGroups(gctx, envs, []rollout.Task{task}, c.GroupSize, c.GroupSize)
				if err == nil {
					// Reward blocks score the group as it finishes, for the step the learner
					// is filling (progressive shaping's weight).
					a.mu.Lock()
					step := start + a.trained
					a.mu.Unlock()
					err = r.shapeRewards(gctx, l.smp.gen, p, step, groups[0].Trajs)
				}
				a.mu.Lock()
				defer a.mu.Unlock()
				if _, live := a.inflight[g.k]; !live {
					return // cancelled as stale: counted then
				}
				a.remove(g.k, r.now())
				if err != nil {
					if pctx.Err() == nil && a.err == nil {
						a.err = fmt.Errorf("group %s: %w", meta.Value, err)
					}
					wake(a.toLearner)
					return
				}
				for _, t := range groups[0].Trajs {
					t.Meta = append(t.Meta, meta)
				}
				a.finished(g, groups[0].Trajs)
				wake(a.toLearner)
			})
		}
	})

	var bias latencyBias
	for step := start; step < p.Steps; step++ {
		w0 := r.now()
		f := newStepFill(p, r.version)
		for !f.full() {
			a.mu.Lock()
			g, err := a.take(f.version, f.slots()), a.err
			a.mu.Unlock()
			if err != nil {
				return fmt.Errorf("step %d: sample: %w", step, err)
			}
			if g == nil {
				select {
				case <-a.toLearner:
				case <-ctx.Done():
					return ctx.Err()
				}
				continue
			}
			if !f.offer(g.trajs) {
				a.mu.Lock()
				a.discarded++
				a.mu.Unlock()
				wake(a.toProducer)
			}
		}
		f.done()
		st0 := r.now()
		a.mu.Lock()
		if !a.idleSince.IsZero() {
			a.idle += st0.Sub(a.idleSince)
			a.idleSince = st0
		}
		as := f.asyncStats()
		bias.add(slices.Concat(f.groups...), f.staleDur, f.stale)
		as.learnerWait, as.genWait = st0.Sub(w0).Seconds(), a.idle.Seconds()
		as.inFlight, as.ready = len(a.inflight), len(a.ready)
		a.idle = 0
		a.mu.Unlock()
		if err := r.record(p.Name, step+1, f.taken); err != nil {
			return err
		}
		st := &rlStep{phase: p.Name, step: step + 1, version: r.version, sample: monitor.Measure(f.taken, f.groups), fill: f.fill, async: as, simLatency: simulatedLatency(p.Envs), rewards: rewardMetrics(f.taken), samples: r.sampleMetrics(f.taken)}
		if trajs := slices.Concat(f.groups...); len(trajs) > 0 {
			rep, err := r.learnStep(l.upd, trajs, step, r.stepRNG(pi, step, 4))
			if err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			st.learn = rep
			if err := l.smp.publish(ctx, false, rep.Metrics); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
		}
		a.mu.Lock()
		a.trained++
		a.version = r.version
		// Groups in flight since a version more than η behind the next step's can never train
		// (unless stale ones are kept; in bounded and admission order none is).
		if c.Async.Stale != config.StaleKeep {
			now := r.now()
			for _, g := range a.cancelStale(r.version, now) {
				as.cancelled += c.GroupSize
				bias.cancelled(c.GroupSize, now.Sub(g.started))
			}
		}
		a.mu.Unlock()
		as.latencyBias, as.latencyBiasOK = bias.ratio()
		wake(a.toProducer)
		st.times = stepTimes{generateEnv: as.learnerWait, train: r.now().Sub(st0).Seconds(), step: r.now().Sub(w0).Seconds(), elapsed: r.now().Sub(r.start).Seconds()}
		if err := l.endStep(ctx, st, step); err != nil {
			return err
		}
	}
	_, err = l.smp.settle()
	return err
}
