package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/agentrl/agentrl/config"
)

// maxEmptyWaits is how many group timeouts in a row a distributed step may wait with no group it
// could train before the run stops with an error.
const maxEmptyWaits = 3

// noDistData handles a distributed step whose group timeout passed (for the waits-th time) with
// no group that could train: the step is not trained on nothing and logged as reward 0, it waits
// again and says so; after maxEmptyWaits timeouts the run stops with the data plane's counters.
func (r *Run) noDistData(s *distSession, p config.Phase, step, waits int, timeout time.Duration) error {
	m := s.metrics()
	counters := fmt.Sprintf("delivered late %v, dropped as duplicate %v, corrupt %v, failed %v, superseded %v",
		m["dist/filtered_late"], m["dist/dropped_duplicate"], m["dist/dropped_corrupt"], m["dist/dropped_failed"], m["dist/dropped_superseded"])
	if waits >= maxEmptyWaits {
		return fmt.Errorf("step %d: no group of the step received a trajectory it could train in %d waits of rl.async.workers.group_timeout (%v): no worker is returning run %s's episodes (%s); start workers with `agentrl worker --run %s`, then resume the run",
			step+1, waits, timeout, s.run, counters, s.run)
	}
	r.printf("warning: phase %s step %d: no group could train after group_timeout %v (wait %d of %d): a step with no data is not trained; waiting again for workers of run %s (%s)\n",
		p.Name, step+1, timeout, waits, maxEmptyWaits, s.run, counters)
	return nil
}

// finish tells the run's workers that the learner finished the run: they say so and stop.
func (s *distSession) finish(ctx context.Context) {
	if s == nil {
		return
	}
	if err := s.conn.MarkFinished(ctx, s.run); err != nil {
		s.logf("warning: %v; the workers keep waiting for tasks until stopped\n", err)
	}
}
