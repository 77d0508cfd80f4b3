package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentrl/agentrl/dist"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/traj"
)

// DistOptions configures the data-plane scale bench (`agentrl bench dist`).
type DistOptions struct {
	Envs        *env.Registry
	Env         string        // environment the episodes run (calc)
	Workers     int           // worker processes
	Episodes    int           // tasks published at once: all of them in flight
	Concurrency int           // episodes one worker runs at once
	Tokens      int           // tokens of the fake generator's completion
	Batch       int           // trajectories the learner trains on per step
	Update      time.Duration // simulated learner update per step in the second pass (0: no second pass)
	Checkpoint  int           // steps between the learner's checkpoints (acknowledgements)
	WeightsMiB  int           // weights published once and fetched by every worker (0: skip)
	// WorkerCommand is the argv that starts one worker process; it runs DistWorker with the
	// settings it finds in its environment (DistWorkerEnv).
	WorkerCommand []string
}

// Environment variables that carry a bench worker's settings from Dist to DistWorker.
const (
	distEnvURL         = "AGENTRL_BENCH_DIST_URL"
	distEnvToken       = "AGENTRL_BENCH_DIST_TOKEN"
	distEnvTok         = "AGENTRL_BENCH_DIST_TOKENIZER"
	distEnvConcurrency = "AGENTRL_BENCH_DIST_CONCURRENCY"
	distEnvTokens      = "AGENTRL_BENCH_DIST_TOKENS"
	distEnvID          = "AGENTRL_BENCH_DIST_ID"
)

// distRun names a pass's run on the wire.
func distRun(pass int) string { return "bench" + strconv.Itoa(pass) }

// Dist measures the distributed data plane: an embedded NATS server, o.Workers worker processes
// (each a dist.Worker running the rollout loop with a zero-latency fake generator that returns a
// fixed completion at once, so that generation costs nothing and the data plane is what is
// measured), o.Episodes tasks published at once, and a learner that takes the trajectories in
// steps of o.Batch and acknowledges them at checkpoints. The first pass trains instantly (the
// data plane's capacity); the second, when o.Update > 0, spends o.Update per step and reports how
// long the learner waited for its batches. Then o.WeightsMiB of weights go out through the object
// store to every worker.
func Dist(ctx context.Context, w io.Writer, o DistOptions) error {
	switch {
	case o.Workers < 1 || o.Episodes < 1 || o.Concurrency < 1 || o.Batch < 1 || o.Checkpoint < 1 || o.Tokens < 1:
		return errors.New("bench dist: workers, episodes, concurrency, batch, checkpoint and tokens must be positive")
	case len(o.WorkerCommand) == 0:
		return errors.New("bench dist: no worker command")
	}
	dir, err := os.MkdirTemp("", "agentrl-bench-dist-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tok, err := Tokenizer(o.Envs, []string{o.Env})
	if err != nil {
		return err
	}
	tokDir := filepath.Join(dir, "tokenizer")
	if err := tok.Save(tokDir); err != nil {
		return err
	}
	srv, err := dist.StartServer(dist.ServerConfig{StoreDir: filepath.Join(dir, "store")})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	l, err := dist.Connect(srv.URL(), srv.LearnerToken(), "bench-learner")
	if err != nil {
		return err
	}
	defer l.Close()
	passes := []time.Duration{0}
	if o.Update > 0 {
		passes = append(passes, o.Update)
	}
	for i := range passes {
		if err := l.SetupRun(ctx, dist.RunConfig{Run: distRun(i)}); err != nil {
			return err
		}
	}

	fmt.Fprintf(w, "agentrl bench dist: %d episodes of %s published at once (all in flight) to %d worker processes × %d concurrent episodes, one embedded NATS JetStream server, on %s (GOMAXPROCS %d, shared by every process; load average %s before the bench).\n",
		o.Episodes, o.Env, o.Workers, o.Concurrency, cpuLabel(), runtime.GOMAXPROCS(0), loadAvg())
	fmt.Fprintf(w, "ZERO-LATENCY GENERATOR: each turn a fake infer.Generator returns a fixed %d-token completion at once, so episodes cost only the rollout loop and the environment; the data plane (tasks, trajectories, acknowledgements, weights) is what is measured, not generation.\n", o.Tokens)

	workers, err := startDistWorkers(ctx, o, srv, tokDir)
	if err != nil {
		return err
	}
	defer func() {
		for _, p := range workers {
			p.kill()
		}
	}()
	for i, update := range passes {
		if err := distPass(ctx, w, o, l, distRun(i), update, workers); err != nil {
			return err
		}
	}
	if o.WeightsMiB > 0 {
		if err := distFanOut(ctx, w, o, l, dir, workers); err != nil {
			return err
		}
	}
	var cpu time.Duration
	for _, p := range workers {
		st, err := p.stop()
		if err != nil {
			return err
		}
		cpu += st.CPU
	}
	fmt.Fprintf(w, "worker processes used %.1f s of CPU in all; this process (server and learner) %.1f s\n", cpu.Seconds(), cpuTime().Seconds())
	return nil
}

// distPass publishes the episodes of one run and trains on them.
func distPass(ctx context.Context, w io.Writer, o DistOptions, l *dist.Conn, run string, update time.Duration, workers []*distProc) error {
	for _, p := range workers {
		p.send("run " + run)
	}
	k, err := l.NewConsumer(ctx, dist.ConsumerConfig{Run: run, Fetch: 256, MaxAckPending: 2*o.Episodes + 1024, StartSeq: 1})
	if err != nil {
		return err
	}
	defer k.Close()
	spec, err := o.Envs.Lookup(o.Env)
	if err != nil {
		return err
	}
	start := time.Now()
	// The tasks go out while the learner already takes trajectories.
	pubErr := make(chan error, 1)
	var pubTime time.Duration
	go func() {
		for i := range o.Episodes {
			t := dist.Task{Run: run, TaskID: strconv.Itoa(i), Env: o.Env, Seed: spec.Train.Lo + int64(i)%spec.Train.Len(),
				GroupID: uint64(i / 8), Sample: i % 8, Epoch: 1}
			if err := l.PublishTask(ctx, t); err != nil {
				pubErr <- err
				return
			}
		}
		pubTime = time.Since(start)
		pubErr <- nil
	}()
	// The stream's own clock: when the last trajectory was stored.
	storedAt := make(chan time.Duration, 1)
	go func() {
		for ctx.Err() == nil {
			if n, err := l.TrajLastSeq(ctx, run); err == nil && n >= uint64(o.Episodes) {
				storedAt <- time.Since(start)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		storedAt <- 0
	}()
	// A receiver takes trajectories continuously, as the learner's does (pipeline.runRLDist),
	// while the learner trains.
	rctx, stopRecv := context.WithCancel(ctx)
	defer stopRecv()
	deliveries := make(chan *dist.Delivery, 256)
	recvErr := make(chan error, 1)
	go func() {
		for {
			d, err := k.Next(rctx)
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case deliveries <- d:
			case <-rctx.Done():
				recvErr <- rctx.Err()
				return
			}
		}
	}()
	var (
		waits              []time.Duration
		ackTime            time.Duration
		bytes, tokens, got int64
		batch              []*dist.Delivery
	)
	for step := 0; got < int64(o.Episodes); step++ {
		w0 := time.Now()
		for len(batch) < o.Batch && got+int64(len(batch)) < int64(o.Episodes) {
			select {
			case d := <-deliveries:
				batch = append(batch, d)
				bytes += int64(d.Bytes)
				tokens += int64(d.Traj.Len())
			case err := <-recvErr:
				return err
			}
		}
		waits = append(waits, time.Since(w0))
		time.Sleep(update)
		got += int64(len(batch))
		k.Trained(step, batch...)
		batch = batch[:0]
		if (step+1)%o.Checkpoint == 0 || got == int64(o.Episodes) {
			a0 := time.Now()
			_ = k.State(step, 0)
			if err := k.Checkpointed(ctx, step); err != nil {
				return err
			}
			ackTime += time.Since(a0)
		}
	}
	stopRecv()
	wall := time.Since(start)
	if err := <-pubErr; err != nil {
		return err
	}
	stored := <-storedAt
	info, err := l.JS.Stream(ctx, dist.TrajStream(run))
	if err != nil {
		return err
	}
	streamBytes := info.CachedInfo().State.Bytes
	n := float64(o.Episodes)
	if update == 0 {
		fmt.Fprintf(w, "\ncapacity (the learner trains instantly):\n")
	} else {
		fmt.Fprintf(w, "\nlearner with a simulated update of %v per step of %d (it asks for up to %.0f trajectories/s):\n", update, o.Batch, float64(o.Batch)/update.Seconds())
	}
	fmt.Fprintf(w, "  tasks: %d published in %.2f s (%.0f tasks/s, each acknowledged by the stream)\n", o.Episodes, pubTime.Seconds(), n/pubTime.Seconds())
	fmt.Fprintf(w, "  trajectories stored: all %d after %.2f s: %.0f trajectories/s, %.1f MiB/s into the stream (%.1f MiB with headers; payloads %.0f bytes, %.0f tokens on average)\n",
		o.Episodes, stored.Seconds(), n/stored.Seconds(), float64(streamBytes)/(1<<20)/stored.Seconds(), float64(streamBytes)/(1<<20), float64(bytes)/n, float64(tokens)/n)
	fmt.Fprintf(w, "  learner: all %d taken, trained and acknowledged after %.2f s: %.0f trajectories/s, %.1f MiB/s of payload; %d steps, acknowledgements every %d steps took %.2f s in all\n",
		o.Episodes, wall.Seconds(), n/wall.Seconds(), float64(bytes)/(1<<20)/wall.Seconds(), len(waits), o.Checkpoint, ackTime.Seconds())
	var total time.Duration
	for _, d := range waits {
		total += d
	}
	rest := slices.Clone(waits[1:])
	slices.Sort(rest)
	q := func(p float64) time.Duration {
		if len(rest) == 0 {
			return 0
		}
		return rest[min(len(rest)-1, int(p*float64(len(rest))))]
	}
	starved := 0
	for _, d := range rest {
		if d > time.Millisecond {
			starved++
		}
	}
	fmt.Fprintf(w, "  learner wait for its batch: %.2f s in all (%.0f%% of the pass); first step %v; later steps p50 %v, p99 %v, max %v; %d of %d later steps waited more than 1 ms\n",
		total.Seconds(), 100*total.Seconds()/wall.Seconds(), waits[0].Round(time.Microsecond), q(0.5).Round(time.Microsecond), q(0.99).Round(time.Microsecond), q(1).Round(time.Microsecond), starved, len(rest))
	if drops := k.Drops(); len(drops) > 0 {
		fmt.Fprintf(w, "  drops: %v\n", drops)
	}
	return nil
}

// distFanOut publishes o.WeightsMiB of weights and waits until every worker has fetched them.
func distFanOut(ctx context.Context, w io.Writer, o DistOptions, l *dist.Conn, dir string, workers []*distProc) error {
	wdir := filepath.Join(dir, "weights")
	if err := os.MkdirAll(wdir, 0o755); err != nil {
		return err
	}
	buf := make([]byte, o.WeightsMiB<<20)
	_, _ = rand.Read(buf) // incompressible, as weights are
	if err := os.WriteFile(filepath.Join(wdir, dist.WeightsFile), buf, 0o644); err != nil {
		return err
	}
	buf = nil
	for _, p := range workers {
		p.send("fetch")
	}
	start := time.Now()
	if _, err := l.PublishWeights(ctx, distRun(0), 1, 1, wdir, 1); err != nil {
		return err
	}
	published := time.Since(start)
	for _, p := range workers {
		select {
		case <-p.fetched:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	last := time.Since(start)
	total := float64(len(workers)*o.WeightsMiB) / last.Seconds()
	fmt.Fprintf(w, "\nweights fan-out: %d MiB written to the object store in %.2f s (%.0f MiB/s); all %d workers had fetched and checked them %.2f s after the write began: %.0f MiB/s out of the server in all\n",
		o.WeightsMiB, published.Seconds(), float64(o.WeightsMiB)/published.Seconds(), len(workers), last.Seconds(), total)
	return nil
}

// distProc is a worker process of the bench: commands on its stdin ("run NAME": take NAME's
// tasks; "fetch": fetch the next weights published; closing it: stop), reports on its stdout.
type distProc struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	fetched chan time.Duration
	stats   chan distWorkerStats
	done    chan error
}

type distWorkerStats struct {
	Done int64         `json:"done"`
	CPU  time.Duration `json:"cpu"`
}

func startDistWorkers(ctx context.Context, o DistOptions, srv *dist.Server, tokDir string) ([]*distProc, error) {
	var procs []*distProc
	for i := range o.Workers {
		cmd := exec.CommandContext(ctx, o.WorkerCommand[0], o.WorkerCommand[1:]...)
		cmd.Env = append(os.Environ(), distEnvURL+"="+srv.URL(), distEnvToken+"="+srv.WorkerToken(), distEnvTok+"="+tokDir,
			distEnvConcurrency+"="+strconv.Itoa(o.Concurrency), distEnvTokens+"="+strconv.Itoa(o.Tokens), distEnvID+"=w"+strconv.Itoa(i))
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return procs, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return procs, err
		}
		if err := cmd.Start(); err != nil {
			return procs, fmt.Errorf("bench dist: start worker: %w", err)
		}
		p := &distProc{cmd: cmd, in: in, fetched: make(chan time.Duration, 1), stats: make(chan distWorkerStats, 1), done: make(chan error, 1)}
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				line := sc.Text()
				if v, ok := strings.CutPrefix(line, "fetched "); ok {
					d, _ := time.ParseDuration(v)
					p.fetched <- d
				} else if v, ok := strings.CutPrefix(line, "stats "); ok {
					var st distWorkerStats
					_ = json.Unmarshal([]byte(v), &st)
					p.stats <- st
				}
			}
			p.done <- cmd.Wait()
		}()
		procs = append(procs, p)
	}
	return procs, nil
}

func (p *distProc) send(line string) { _, _ = io.WriteString(p.in, line+"\n") }

func (p *distProc) stop() (distWorkerStats, error) {
	_ = p.in.Close()
	select {
	case st := <-p.stats:
		<-p.done
		return st, nil
	case err := <-p.done:
		return distWorkerStats{}, fmt.Errorf("bench dist: a worker stopped without its stats: %v", err)
	}
}

func (p *distProc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
	}
}

// DistWorker is a worker process of Dist: it runs the tasks of the run its stdin names with the
// rollout loop over a fixed-completion generator, fetches weights when told to, and prints its
// stats when its stdin closes.
func DistWorker(ctx context.Context, reg *env.Registry) error {
	conc, _ := strconv.Atoi(os.Getenv(distEnvConcurrency))
	ntok, _ := strconv.Atoi(os.Getenv(distEnvTokens))
	tok, err := tokenizer.Load(os.Getenv(distEnvTok))
	if err != nil {
		return err
	}
	conn, err := dist.Connect(os.Getenv(distEnvURL), os.Getenv(distEnvToken), "bench-worker")
	if err != nil {
		return err
	}
	defer conn.Close()
	gen := newFixedGen(tok, ntok)
	cfg := rollout.DefaultConfig()
	cfg.MaxContext, cfg.MaxTokensPerTurn, cfg.MaxTurns = 8192, ntok+1, 2
	runner := &rollout.Runner{Gen: gen, Tok: tok, Cfg: cfg}
	var (
		mu      sync.Mutex
		cancel  context.CancelFunc = func() {}
		running sync.WaitGroup
		done    int64
	)
	startRun := func(run string) {
		mu.Lock()
		defer mu.Unlock()
		cancel()
		rctx, c := context.WithCancel(ctx)
		cancel = c
		wk := &dist.Worker{Conn: conn, RunName: run, ID: os.Getenv(distEnvID), Concurrency: conc,
			Episode: func(ctx context.Context, task dist.Task) (*traj.Trajectory, error) {
				e, err := reg.New(task.Env)
				if err != nil {
					return nil, err
				}
				if cl, ok := e.(env.Closer); ok {
					defer cl.Close()
				}
				return runner.Episode(ctx, e, rollout.Task{Env: task.Env, Seed: task.Seed, GroupID: task.GroupID, Index: task.Sample})
			}}
		running.Go(func() {
			if err := wk.Run(rctx); err != nil {
				fmt.Fprintln(os.Stderr, "bench worker:", err)
			}
			mu.Lock()
			done += wk.Stats().Done
			mu.Unlock()
		})
	}
	fetch := func() {
		wctx, stop := context.WithTimeout(ctx, 5*time.Minute)
		defer stop()
		ptrs, err := conn.WatchPointer(wctx, distRun(0))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench worker:", err)
			return
		}
		dir, err := os.MkdirTemp("", "agentrl-bench-weights-")
		if err != nil {
			return
		}
		defer os.RemoveAll(dir)
		p := <-ptrs
		t0 := time.Now()
		if err := conn.FetchWeights(wctx, p, dir); err != nil {
			fmt.Fprintln(os.Stderr, "bench worker:", err)
			return
		}
		fmt.Printf("fetched %v\n", time.Since(t0))
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch line := sc.Text(); {
		case strings.HasPrefix(line, "run "):
			startRun(strings.TrimPrefix(line, "run "))
		case line == "fetch":
			go fetch()
		}
	}
	mu.Lock()
	cancel()
	mu.Unlock()
	running.Wait()
	b, _ := json.Marshal(distWorkerStats{Done: done, CPU: cpuTime()})
	fmt.Printf("stats %s\n", b)
	return nil
}

// fixedGen is the zero-latency generator of the bench: every turn it returns the same
// completion of n tokens (ending with the end of turn) at once.
type fixedGen struct{ toks []int32 }

func newFixedGen(tok *tokenizer.Tokenizer, n int) *fixedGen {
	text := strings.Repeat("The answer is 42 because six times seven is forty-two. ", 1+n/8)
	toks := tok.Encode(text)
	for len(toks) < n-1 {
		toks = append(toks, toks...)
	}
	return &fixedGen{toks: append(slices.Clone(toks[:n-1]), tok.EndOfTurn())}
}

func (g *fixedGen) Generate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	if err := ctx.Err(); err != nil {
		return infer.Completion{}, err
	}
	n := min(len(g.toks), req.MaxTokens)
	c := infer.Completion{Tokens: slices.Clone(g.toks[:n]), Logprobs: make([]float32, n), Versions: make([]int32, n), Finish: infer.FinishStop}
	for i := range c.Logprobs {
		c.Logprobs[i] = -0.7
	}
	if n < len(g.toks) {
		c.Finish = infer.FinishLength
	}
	return c, nil
}

// loadAvg is the machine's 1-minute load average ("?" when unknown).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// cpuLabel names the machine's processor and its logical CPUs.
func cpuLabel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	model := "unknown CPU"
	if err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%s × %d logical CPUs", model, runtime.NumCPU())
}
