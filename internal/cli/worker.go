package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/agentrl/agentrl/dist"
	"github.com/agentrl/agentrl/internal/httpserve"
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
	Metrics     string        `help:"Serve Prometheus metrics (tasks stored, returned and terminated, the policy version, the process) on this address's /metrics, e.g. 127.0.0.1:9464." placeholder:"ADDR"`
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
	opts := pipeline.WorkerOptions{Conn: conn, Run: c.RunName, ID: c.ID, Envs: g.Envs,
		Concurrency: c.Concurrency, Slots: c.Slots, Grace: c.Grace, Dir: c.Dir, Log: g.Stderr}
	if c.Metrics != "" {
		m := &workerMetrics{run: c.RunName}
		ln, err := net.Listen("tcp", c.Metrics)
		if err != nil {
			return fmt.Errorf("worker: --metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", m.handler())
		mctx, stop := context.WithCancel(g.Ctx)
		served := make(chan error, 1)
		go func() {
			served <- httpserve.Run(mctx, &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln, time.Second)
		}()
		defer func() { // the metrics are served until the worker returns
			stop()
			<-served
		}()
		fmt.Fprintf(g.Stderr, "worker: Prometheus metrics on http://%s/metrics\n", ln.Addr())
		opts.Live = m.live
	}
	st, err := pipeline.RunWorker(g.Ctx, opts)
	fmt.Fprintf(g.Stderr, "worker: %d trajectories stored, %d tasks returned, %d terminated\n", st.Done, st.Nacked, st.Terminated)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
