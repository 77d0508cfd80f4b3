package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/agentrl/agentrl/dist"
	"github.com/agentrl/agentrl/internal/httpserve"
	"github.com/agentrl/agentrl/pipeline"
)

// WorkerCmd is `agentrl worker`: a rollout worker of the distributed data plane (docs/wire.md).
type WorkerCmd struct {
	Connect     string        `help:"NATS URL of the learner's server (credentials may be in the URL)." required:"" placeholder:"URL"`
	Token       string        `help:"Worker token." env:"AGENTRL_WORKER_TOKEN"`
	NKey        string        `name:"nkey" help:"File holding the worker's NKey seed (SU…), instead of a token: the worker signs the server's nonce with it; the learner lists its public key in rl.async.workers.worker_nkeys (agentrl nkey makes a pair)." env:"AGENTRL_WORKER_NKEY" placeholder:"FILE" type:"existingfile"`
	RunName     string        `name:"run" help:"Run whose tasks to take." required:""`
	ID          string        `help:"Worker id in heartbeats and trajectory headers (default host-pid)."`
	Concurrency int           `help:"Episodes run at once." default:"8"`
	Slots       int           `help:"Sequences the local engine decodes together." default:"16"`
	Grace       time.Duration `help:"On SIGTERM, how long episodes in flight may take to finish before their tasks are returned." default:"30s"`
	Dir         string        `help:"Where to keep downloaded weights (default: a temporary directory)." placeholder:"DIR"`
	Metrics     string        `help:"Serve Prometheus metrics (tasks stored, returned and terminated, the policy version, the process) on this address's /metrics, e.g. 127.0.0.1:9464." placeholder:"ADDR"`
	Verbose     bool          `short:"v" help:"Print a line per episode started."`
	Wait        time.Duration `help:"How long to wait for the learner's server to answer and for it to set up the run, retrying with a backoff of up to 30s (a worker may start before its learner)." default:"24h"`
	Config      string        `help:"Run configuration (YAML) whose remote environment entries the worker opens, so it can run their episodes (their servers must be reachable from the worker); its other settings are not used." type:"existingfile" placeholder:"FILE"`
}

// Run pulls the run's weights, then takes tasks and runs them with the rollout loop over a local
// engine, loading each new policy version as the learner publishes it, until SIGTERM.
func (c *WorkerCmd) Run(g *Globals) error {
	if c.Concurrency < 1 || c.Slots < 1 {
		return fmt.Errorf("worker: --concurrency and --slots must be positive")
	}
	auth := dist.Auth{Token: c.Token}
	if c.NKey != "" {
		if c.Token != "" {
			return fmt.Errorf("worker: --token (or AGENTRL_WORKER_TOKEN) and --nkey: give one")
		}
		seed, err := os.ReadFile(c.NKey)
		if err != nil {
			return fmt.Errorf("worker: --nkey: %w", err)
		}
		auth.NKeySeed = string(seed)
	}
	if err := dist.CheckRun(c.RunName); err != nil {
		return fmt.Errorf("worker: --run: %w", err)
	}
	g, user, err := withConfiguredEnvs(g, "worker", c.Config) // userenvs.go
	if err != nil {
		return err
	}
	defer user.Close()
	conn, err := dialLearner(g.Ctx, c.Connect, auth, c.Wait, g.Stderr)
	if err != nil {
		return err
	}
	defer conn.Close()
	opts := pipeline.WorkerOptions{Conn: conn, Run: c.RunName, ID: c.ID, Envs: g.Envs,
		Concurrency: c.Concurrency, Slots: c.Slots, Grace: c.Grace, Dir: c.Dir, Log: g.Stderr, Verbose: c.Verbose, Wait: c.Wait}
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

// NKeyCmd is `agentrl nkey`: a new NKey user key pair for a worker (or for a learner on an
// external server).
type NKeyCmd struct {
	Out string `arg:"" help:"File to write the seed (secret) to; it must not exist." placeholder:"SEEDFILE"`
}

// Run writes the seed to Out (mode 0600) and prints the public key.
func (c *NKeyCmd) Run(g *Globals) error {
	seed, pub, err := dist.NewNKey()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(c.Out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("nkey: %w", err)
	}
	_, err = f.WriteString(seed + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(c.Out)
		return fmt.Errorf("nkey: %w", err)
	}
	fmt.Fprintln(g.Stdout, pub)
	fmt.Fprintf(g.Stderr, "nkey: seed written to %s; give the public key above to the learner (rl.async.workers.worker_nkeys) and the seed file to the worker (--nkey)\n", c.Out)
	return nil
}
