package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/dist"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// WorkerOptions configures RunWorker, a rollout worker of the distributed data plane.
type WorkerOptions struct {
	Conn *dist.Conn
	Run  string // the run whose tasks to take
	ID   string // worker id in heartbeats and trajectory headers (default host-pid)
	Envs *env.Registry
	// Concurrency is how many episodes run at once; Slots how many sequences the engine decodes
	// together.
	Concurrency, Slots int
	// Grace is how long, once ctx ends, episodes in flight may take to finish before their tasks
	// are returned.
	Grace time.Duration
	// Dir keeps the downloaded weights ("": a temporary directory, removed at the end).
	Dir string
	// Log receives the worker's progress lines (nil: discarded).
	Log io.Writer
	// Live, when set, is called once the worker starts taking tasks, with functions that read
	// its counters and the policy version it runs while it runs (agentrl worker's /metrics).
	Live func(stats func() dist.WorkerStats, version func() int32)
	// Verbose adds a line per episode started to Log.
	Verbose bool
	// Wait is how long the worker waits for the learner to set the run up on the server (0: not
	// at all); it then takes tasks until ctx ends or the learner marks the run finished.
	Wait time.Duration
}

// RunWorker pulls the run's rollout settings and weights, then takes tasks and runs them with
// the rollout loop over a local engine, loading each new policy version as the learner publishes
// it, until ctx ends. It returns what the worker did.
func RunWorker(ctx context.Context, o WorkerOptions) (dist.WorkerStats, error) {
	var none dist.WorkerStats
	if o.Concurrency < 1 || o.Slots < 1 {
		return none, fmt.Errorf("worker: concurrency and slots must be positive")
	}
	logw := o.Log
	if logw == nil {
		logw = io.Discard
	}
	logf := func(f string, a ...any) { fmt.Fprintf(logw, "worker: "+f+"\n", a...) }
	conn := o.Conn
	dir := o.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "agentrl-worker-"); err != nil {
			return none, err
		}
		defer os.RemoveAll(dir)
	}
	if finished, err := waitForRun(ctx, conn, o, logf); err != nil || finished {
		return none, err
	}
	// The learner's end stops the worker, which says so.
	ctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var learnerDone atomic.Bool
	go func() {
		select {
		case <-conn.WatchFinished(ctx, o.Run, time.Second):
			logf("the learner finished run %s: stopping", o.Run)
			learnerDone.Store(true)
			stopRun()
		case <-ctx.Done():
		}
	}()
	ws := workerSettings{Config: rollout.DefaultConfig()}
	settings, err := conn.RolloutSettings(ctx, o.Run)
	if err != nil {
		return none, err
	}
	rc := &ws.Config
	if settings != nil {
		if err := json.Unmarshal(settings, &ws); err != nil {
			return none, fmt.Errorf("worker: rollout settings of run %s: %w", o.Run, err)
		}
	}
	if err := rc.Validate(); err != nil {
		return none, fmt.Errorf("worker: rollout settings of run %s: %w", o.Run, err)
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	pointers, err := conn.WatchPointer(wctx, o.Run)
	if err != nil {
		return none, err
	}
	logf("waiting for run %s's weights", o.Run)
	var p dist.Pointer
	select {
	case <-ctx.Done():
		return none, nil
	case p = <-pointers:
	}
	vdir := func(p dist.Pointer) string { return filepath.Join(dir, fmt.Sprintf("e%d-v%d", p.Epoch, p.Version)) }
	if err := conn.FetchWeights(ctx, p, vdir(p)); err != nil {
		return none, err
	}
	ck, err := checkpoint.Load(vdir(p))
	if err != nil {
		return none, err
	}
	rc.MaxContext = min(max(rc.MaxContext, 1), ck.Model.Cfg.MaxSeq)
	eng, err := local.NewEngine(ck.Model, p.Version, local.EngineConfig{Slots: o.Slots, MaxLen: rc.MaxContext})
	if err != nil {
		return none, err
	}
	defer eng.Close()
	// policy is the pointer whose weights the engine samples with.
	var policy atomic.Pointer[dist.Pointer]
	policy.Store(&p)
	logf("policy v%d (learner epoch %d) loaded", p.Version, p.Epoch)
	cr, toolFormat, err := workerChat(ws, ck.Tokenizer)
	if err != nil {
		return none, fmt.Errorf("worker: run %s: %w", o.Run, err)
	}
	if ws.Chat != nil || cr.Renderer != nil {
		logf("%s", cr.Describe)
	}
	runner := &rollout.Runner{Gen: eng, Tok: ck.Tokenizer, Cfg: *rc, SampleSeed: uint64(time.Now().UnixNano()), NewConversation: cr.NewConversation}
	w := &dist.Worker{Conn: conn, RunName: o.Run, ID: o.ID, Concurrency: o.Concurrency, Grace: o.Grace,
		// The worker runs a task only with the weights of the learner epoch that issued it, from
		// the version the learner admitted it at: that bounds how stale its tokens are when
		// trained.
		Policy: func() (uint32, int32) { p := policy.Load(); return p.Epoch, p.Version },
		Logf:   logf,
		OnStart: func(task dist.Task, attempt int) {
			if o.Verbose {
				logf("episode %s started (learner epoch %d, admitted at v%d, attempt %d)", task.Key(), task.Epoch, task.AdmitVersion, attempt)
			}
		},
		Episode: func(ctx context.Context, task dist.Task) (*traj.Trajectory, error) {
			e, err := workerEnv(o.Envs, task)
			if err != nil {
				return nil, err
			}
			if toolFormat != nil {
				env.SetToolFormat(e, toolFormat)
			}
			if cl, ok := e.(env.Closer); ok {
				defer cl.Close()
			}
			t, err := runner.Episode(ctx, e, rollout.Task{Env: task.Env, Seed: task.Seed, GroupID: task.GroupID, Index: task.Sample})
			if err == nil && ctx.Err() != nil {
				err = ctx.Err() // cut off by shutdown: the task goes back rather than a timeout trajectory
			}
			return t, err
		}}
	if o.Live != nil {
		o.Live(w.Stats, func() int32 { return policy.Load().Version })
	}
	follow := make(chan struct{})
	go func() { // follow the pointer
		defer close(follow)
		var next *dist.Pointer // a pointer to load, kept while loading it fails
		for {
			if next == nil {
				p, ok := <-pointers
				if !ok {
					return
				}
				next = &p
			}
			p := *next
			cur := policy.Load()
			if !p.After(*cur) {
				next = nil
				continue
			}
			err := conn.FetchWeights(wctx, p, vdir(p))
			var m *checkpoint.Checkpoint
			if err == nil {
				m, err = checkpoint.Load(vdir(p))
			}
			if err == nil && p.Epoch != cur.Epoch {
				// A new learner epoch (a resumed learner): the old epoch's episodes in flight
				// are cut off and its tasks given up before its successor's weights are loaded,
				// so that no episode mixes the two.
				w.Supersede(p.Epoch)
				logf("learner epoch %d: tasks of earlier epochs given up", p.Epoch)
			}
			var applied <-chan struct{}
			if err == nil {
				applied, err = eng.LoadWeights(m.Model, p.Version)
			}
			if err == nil {
				select { // tasks admitted at this version start once the engine samples with it
				case <-applied:
				case <-wctx.Done():
					err = wctx.Err()
				}
			}
			if err != nil {
				if wctx.Err() != nil {
					return
				}
				logf("policy v%d (learner epoch %d): %v; trying again", p.Version, p.Epoch, err)
				select { // a newer pointer replaces it; else the same one is tried again
				case q, ok := <-pointers:
					if !ok {
						return
					}
					next = &q
				case <-time.After(500 * time.Millisecond):
				}
				continue
			}
			next = nil
			policy.Store(&p)
			_ = os.RemoveAll(vdir(*cur))
			logf("policy v%d (learner epoch %d) loaded", p.Version, p.Epoch)
		}
	}()
	err = w.Run(ctx)
	stopWatch()
	<-follow // the pointer channel closes with wctx
	if learnerDone.Load() {
		err = nil
	}
	return w.Stats(), err
}
