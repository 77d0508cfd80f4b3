package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/agentrl/agentrl/dist"
)

// Backoff of a worker waiting for its run: from workerBackoffMin, doubling, at most
// workerBackoffMax between checks.
const (
	workerBackoffMin = time.Second
	workerBackoffMax = 30 * time.Second
)

// waitForRun waits until the learner has set up run o.Run on the server, checking with a bounded
// backoff and saying that it waits and how long it has; it gives up after o.Wait (0: it does not
// wait). finished is true when the run's learner has already finished it.
func waitForRun(ctx context.Context, conn *dist.Conn, o WorkerOptions, logf func(string, ...any)) (finished bool, err error) {
	start := time.Now()
	wait := workerBackoffMin
	for {
		st, err := conn.Run(ctx, o.Run)
		if err != nil {
			return false, err
		}
		switch st {
		case dist.RunReady:
			if time.Since(start) > time.Second {
				logf("run %s is set up: taking its tasks", o.Run)
			}
			return false, nil
		case dist.RunFinished:
			logf("run %s's learner has finished it: nothing to do", o.Run)
			return true, nil
		}
		waited := time.Since(start)
		if waited+wait > o.Wait {
			return false, fmt.Errorf("worker: run %q is not set up on this server after %v: is its learner running (it sets the run up when its first phase with rl.async.workers starts), and is --run the name it printed (rl.async.workers.run, default its run directory's name)?",
				o.Run, waited.Round(time.Second))
		}
		logf("run %s is not set up on this server yet (waited %v): waiting for its learner, next check in %v (up to %v); check --run if the learner is running",
			o.Run, waited.Round(time.Second), wait, o.Wait)
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, workerBackoffMax)
	}
}
