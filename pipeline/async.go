package pipeline

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/monitor"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/traj"
)

// asyncBatch is one step's sampling, made ahead of the learner.
type asyncBatch struct {
	step    int
	sampled []*traj.Trajectory
	groups  [][]*traj.Trajectory
	fill    reward.FillStats
	genTime time.Duration
	// genWait is how long the producer waited for admission before sampling this batch, because
	// it was η steps ahead of the learner.
	genWait time.Duration
	err     error
}

// asyncStats are what an asynchronous step adds to the metrics.
type asyncStats struct {
	droppedStale int     // trajectories past the staleness bound
	learnerWait  float64 // seconds the learner waited for the batch
	// partialStale: groups kept for training without some of their members, which were past the
	// staleness bound (dropStale keeps the others on purpose)
	partialStale int
	// genWait: seconds the producer waited on the staleness bound before this batch (overlap), or
	// during which no group was in flight since the step before (continuous)
	genWait float64
	ahead   int // overlap: batches sampled or sampling beyond this one when it was taken
	// continuous admission: groups in flight and finished-but-untaken when the batch was complete,
	// and episodes cancelled in flight after the update because they could no longer train
	continuous      bool
	inFlight, ready int
	cancelled       int
	// latencyBias (continuous admission, once a step trained): async/latency_bias, the mean
	// duration of the episodes sampled so far in the phase over that of those trained
	latencyBias   float64
	latencyBiasOK bool
}

// runRLAsync is runRL with generation running ahead of the learner: continuous admission
// (continuous.go), remote workers (distributed.go), or, in overlap mode, a producer that samples the steps'
// batches in order, each under the weights current while it runs; it may start step s only
// while s − (steps the learner has finished) ≤ η. The learner takes them in order, drops what
// lags more than η versions, trains, and loads the new weights into the engine (or publishes them
// to the servers) without waiting for the switch: episodes in flight continue under them.
//
// Sampling order depends on when weights change, so an asynchronous run is not reproducible to
// the bit; the staleness bound and the accounting of every drop are what hold.
func (r *Run) runRLAsync(ctx context.Context, pi int, p config.Phase, start int) error {
	c := p.RL
	eta := c.Async.MaxStaleness
	if eta > config.WarnStaleness {
		r.printf("warning: %s: rl.async.max_staleness %d trains on tokens up to %d versions old\n", p.Name, eta, eta)
	}
	if c.Async.Workers != nil {
		return r.runRLDist(ctx, pi, p, start)
	}
	if c.Async.Mode != config.ModeOverlap {
		return r.runRLContinuous(ctx, pi, p, start)
	}
	l, err := r.openRL(ctx, pi, p, start)
	if err != nil {
		return err
	}
	defer l.close()

	pctx, cancel := context.WithCancel(ctx)
	// admit holds one token per step sampled or sampling and not yet trained: η+1 of them let the
	// producer run η steps ahead of the step the learner trains.
	admit := make(chan struct{}, eta+1)
	batches := make(chan asyncBatch, eta+1)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() {
		defer close(batches)
		for s := start; s < p.Steps; s++ {
			a0 := r.now()
			select {
			case admit <- struct{}{}:
			case <-pctx.Done():
				return
			}
			t0 := r.now()
			sampled, groups, fill, err := r.sampleRL(pctx, l.smp.gen, p, s, r.stepRNG(pi, s, 3))
			b := asyncBatch{step: s, sampled: sampled, groups: groups, fill: fill, genTime: r.now().Sub(t0), genWait: t0.Sub(a0), err: err}
			select { // never blocks: the channel holds as many batches as admission lets start
			case batches <- b:
			case <-pctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	})

	for step := start; step < p.Steps; step++ {
		w0 := r.now()
		var b asyncBatch
		var ok bool
		select {
		case b, ok = <-batches:
		case <-ctx.Done():
			return ctx.Err()
		}
		if !ok {
			if err := ctx.Err(); err != nil {
				return err
			}
			return fmt.Errorf("step %d: sampling stopped", step)
		}
		if b.err != nil {
			return fmt.Errorf("step %d: sample: %w", step, b.err)
		}
		if b.step != step {
			return fmt.Errorf("step %d: sampler delivered step %d", step, b.step) // a programming error
		}
		st0 := r.now()
		as := &asyncStats{learnerWait: st0.Sub(w0).Seconds(), genWait: b.genWait.Seconds(), ahead: len(batches)}
		if err := r.record(p.Name, step+1, b.sampled); err != nil {
			return err
		}
		groups, dropped, partial := dropStale(b.groups, r.version, int32(eta))
		as.droppedStale, as.partialStale = dropped, partial
		st := &rlStep{phase: p.Name, step: step + 1, version: r.version, sample: monitor.Measure(b.sampled, groups), fill: b.fill, async: as, simLatency: simulatedLatency(p.Envs), rewards: rewardMetrics(b.sampled), samples: r.sampleMetrics(b.sampled)}
		if trajs := slices.Concat(groups...); len(trajs) > 0 {
			// The sampling RNG belongs to the producer; the learner shuffles with its own.
			rep, err := r.learnStep(l.upd, trajs, step, r.stepRNG(pi, step, 4))
			if err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			st.learn = rep
			if err := l.smp.publish(ctx, false, rep.Metrics); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
		}
		<-admit // this step is trained: the producer may start one more
		st.times = stepTimes{generateEnv: b.genTime.Seconds(), train: r.now().Sub(st0).Seconds(), step: r.now().Sub(w0).Seconds(), elapsed: r.now().Sub(r.start).Seconds()}
		if err := l.endStep(ctx, st, step); err != nil {
			return err
		}
	}
	_, err = l.smp.settle() // the last publish to servers, if one is in flight
	return err
}

// dropStale removes from groups every trajectory whose oldest policy token lags version by more
// than eta, and returns the groups left (empty ones removed), how many trajectories it dropped
// and how many of the groups left lost members. A group keeps its other members: their
// advantages are then estimated within the smaller group, and the step counts it
// (async/partial_stale). Members of one group can lag differently: an episode that waited for
// an engine slot, or a group that finished after groups admitted later and so was taken a step
// later, starts or is trained under other versions than its siblings.
func dropStale(groups [][]*traj.Trajectory, version, eta int32) (kept [][]*traj.Trajectory, dropped, partial int) {
	for _, g := range groups {
		var keep []*traj.Trajectory
		for _, t := range g {
			if isStale(t, version, eta) {
				dropped++
				continue
			}
			keep = append(keep, t)
		}
		if len(keep) > 0 {
			kept = append(kept, keep)
			if len(keep) < len(g) {
				partial++
			}
		}
	}
	return kept, dropped, partial
}

// isStale reports whether t's oldest policy token lags version by more than eta.
func isStale(t *traj.Trajectory, version, eta int32) bool {
	oldest, ok := monitor.OldestVersion(t)
	return ok && version-oldest > eta
}
