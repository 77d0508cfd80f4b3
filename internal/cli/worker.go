package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// WorkerCmd is `agentrl worker`: a rollout worker of the distributed data plane (docs/wire.md).
type WorkerCmd struct {
	Connect     string        `help:"NATS URL of the learner's server (credentials may be in the URL)." required:"" placeholder:"URL"`
	Token       string        `help:"Worker token." env:"AGENTRL_WORKER_TOKEN"`
	RunName     string        `name:"run" help:"Run whose tasks to take." required:""`
	ID          string        `help:"Worker id in heartbeats and trajectory headers (default host-pid)."`
	Concurrency int           `help:"Episodes run at once." default:"8"`
	Slots       int           `help:"Sequences the local engine decodes together." default:"16"`
	Grace       time.Duration `help:"On SIGTERM, how long episodes in flight may take to finish before their tasks are returned." default:"30s"`
	Dir         string        `help:"Where to keep downloaded weights (default: a temporary directory)." placeholder:"DIR"`
}

// Run pulls the run's weights, then takes tasks and runs them with the rollout loop over a local
// engine, loading each new policy version as the learner publishes it, until SIGTERM.
func (c *WorkerCmd) Run(g *Globals) error {
	if c.Concurrency < 1 || c.Slots < 1 {
		return fmt.Errorf("worker: --concurrency and --slots must be positive")
	}
	ctx := g.Ctx
	conn, err := dist.Connect(c.Connect, c.Token, "agentrl-worker")
	if err != nil {
		return err
	}
	defer conn.Close()
	dir := c.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "agentrl-worker-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	rc := rollout.DefaultConfig()
	settings, err := conn.RolloutSettings(ctx, c.RunName)
	if err != nil {
		return err
	}
	if settings != nil {
		if err := json.Unmarshal(settings, &rc); err != nil {
			return fmt.Errorf("worker: rollout settings of run %s: %w", c.RunName, err)
		}
	}
	if err := rc.Validate(); err != nil {
		return fmt.Errorf("worker: rollout settings of run %s: %w", c.RunName, err)
	}
	pointers, err := conn.WatchPointer(ctx, c.RunName)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.Stderr, "worker: waiting for run %s's weights\n", c.RunName)
	var p dist.Pointer
	select {
	case <-ctx.Done():
		return nil
	case p = <-pointers:
	}
	vdir := filepath.Join(dir, fmt.Sprintf("v%d", p.Version))
	if err := conn.FetchWeights(ctx, p, vdir); err != nil {
		return err
	}
	ck, err := checkpoint.Load(vdir)
	if err != nil {
		return err
	}
	rc.MaxContext = min(max(rc.MaxContext, 1), ck.Model.Cfg.MaxSeq)
	eng, err := local.NewEngine(ck.Model, p.Version, local.EngineConfig{Slots: c.Slots, MaxLen: rc.MaxContext})
	if err != nil {
		return err
	}
	defer eng.Close()
	var version atomic.Int32
	version.Store(p.Version)
	fmt.Fprintf(g.Stderr, "worker: policy v%d loaded\n", p.Version)
	go func() { // follow the pointer
		for p := range pointers {
			if p.Version <= version.Load() {
				continue
			}
			vdir := filepath.Join(dir, fmt.Sprintf("v%d", p.Version))
			err := conn.FetchWeights(ctx, p, vdir)
			var m *checkpoint.Checkpoint
			if err == nil {
				m, err = checkpoint.Load(vdir)
			}
			if err == nil {
				_, err = eng.LoadWeights(m.Model, p.Version)
			}
			if err != nil {
				fmt.Fprintf(g.Stderr, "worker: policy v%d: %v\n", p.Version, err)
				continue
			}
			old := filepath.Join(dir, fmt.Sprintf("v%d", version.Swap(p.Version)))
			_ = os.RemoveAll(old)
			fmt.Fprintf(g.Stderr, "worker: policy v%d loaded\n", p.Version)
		}
	}()
	runner := &rollout.Runner{Gen: eng, Tok: ck.Tokenizer, Cfg: rc, SampleSeed: uint64(time.Now().UnixNano())}
	w := &dist.Worker{Conn: conn, RunName: c.RunName, ID: c.ID, Concurrency: c.Concurrency, Grace: c.Grace,
		Version: version.Load,
		Logf:    func(f string, a ...any) { fmt.Fprintf(g.Stderr, "worker: "+f+"\n", a...) },
		Episode: func(ctx context.Context, task dist.Task) (*traj.Trajectory, error) {
			e, err := g.Envs.New(task.Env)
			if err != nil {
				return nil, err
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
	err = w.Run(ctx)
	st := w.Stats()
	fmt.Fprintf(g.Stderr, "worker: %d trajectories stored, %d tasks returned, %d terminated\n", st.Done, st.Nacked, st.Terminated)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
