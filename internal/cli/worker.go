package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentrl/agentrl/dist"
	"github.com/agentrl/agentrl/pipeline"
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
	conn, err := dist.Connect(c.Connect, c.Token, "agentrl-worker")
	if err != nil {
		return err
	}
	defer conn.Close()
	st, err := pipeline.RunWorker(g.Ctx, pipeline.WorkerOptions{Conn: conn, Run: c.RunName, ID: c.ID, Envs: g.Envs,
		Concurrency: c.Concurrency, Slots: c.Slots, Grace: c.Grace, Dir: c.Dir, Log: g.Stderr})
	fmt.Fprintf(g.Stderr, "worker: %d trajectories stored, %d tasks returned, %d terminated\n", st.Done, st.Nacked, st.Terminated)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
