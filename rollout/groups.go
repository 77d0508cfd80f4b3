package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/traj"
)

// Group is the episodes run for one task seed.
type Group struct {
	Task  Task // Index is unused
	Trajs []*traj.Trajectory
}

// EnvFactory makes a fresh environment for one episode of the named environment; a registry's
// (*env.Registry).New is one.
type EnvFactory func(name string) (env.Env, error)

// RunGroups runs groupSize episodes for each task with at most concurrency episodes in flight,
// each in a fresh environment from newEnv that is closed when its episode ends. Groups come
// back in task order and episodes in index order, whatever order they finished in. Failures of
// an environment (including failing to create one) are recorded in that trajectory's status;
// the error is non-nil only when ctx is cancelled or an episode met a broken policy
// (infer.ErrNonFinite), and then the other episodes are cancelled and no groups are returned.
func (r *Runner) RunGroups(ctx context.Context, newEnv EnvFactory, tasks []Task, groupSize, concurrency int) ([]Group, error) {
	if groupSize < 1 {
		return nil, fmt.Errorf("rollout: group size must be at least 1, got %d", groupSize)
	}
	if concurrency < 1 {
		return nil, fmt.Errorf("rollout: concurrency must be at least 1, got %d", concurrency)
	}
	if newEnv == nil {
		return nil, errors.New("rollout: RunGroups needs an environment factory")
	}
	if err := r.Cfg.Validate(); err != nil {
		return nil, err
	}
	total := len(tasks) * groupSize
	out := make([]*traj.Trajectory, total)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		next, started atomic.Int64
		wg            sync.WaitGroup
		errOnce       sync.Once
		firstErr      error
		work          func()
	)
	// Workers start one at a time: each starts the next as it takes its first episode. An
	// episode that blocks (on a generator batching requests, a slow tool) lets the next worker
	// run and start another, so episodes in flight still reach the concurrency when they wait;
	// episodes that never wait are run by a few goroutines instead of one goroutine each.
	workers := int64(min(concurrency, total))
	startWorker := func() {
		if started.Add(1) <= workers {
			wg.Add(1)
			go work()
		}
	}
	work = func() {
		defer wg.Done()
		for first := true; ; first = false {
			i := int(next.Add(1) - 1)
			if i >= total || ctx.Err() != nil {
				return
			}
			if first {
				startWorker()
			}
			task := tasks[i/groupSize]
			task.Index = i % groupSize
			tr, err := r.runOne(ctx, newEnv, task)
			if err != nil {
				errOnce.Do(func() { firstErr = err })
				cancel()
				return
			}
			out[i] = tr
			if r.OnEpisode != nil {
				r.OnEpisode()
			}
		}
	}
	startWorker()
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	groups := make([]Group, len(tasks))
	for g, t := range tasks {
		t.Index = 0
		groups[g] = Group{Task: t, Trajs: out[g*groupSize : (g+1)*groupSize : (g+1)*groupSize]}
	}
	return groups, nil
}

// runOne creates, runs and closes one episode's environment.
func (r *Runner) runOne(ctx context.Context, newEnv EnvFactory, t Task) (*traj.Trajectory, error) {
	e, err := newEnv(t.Env)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return &traj.Trajectory{
			ID: t.id(), Env: t.Env,
			TaskSeed: t.Seed, GroupID: t.GroupID, Status: traj.StatusEnvError,
			Error: fmt.Sprintf("create environment: %v", err),
		}, nil
	}
	tr, err := r.Episode(ctx, e, t)
	if c, ok := e.(env.Closer); ok {
		if cerr := c.Close(); cerr != nil && err == nil && tr.Status == traj.StatusOK {
			// The episode finished but the environment could not release its resources: the
			// result stands, the failure is recorded.
			tr.Error = fmt.Sprintf("close environment: %v", cerr)
		}
	}
	if err != nil {
		return nil, err
	}
	return tr, nil
}
