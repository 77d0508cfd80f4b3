package dist

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentrl/agentrl/traj"
)

// TestHelperWorkerProcess is the worker process of the chaos tests: it runs synthetic episodes
// (100–250 ms each) until SIGTERM, printing "start <key> <attempt>" as each one starts.
func TestHelperWorkerProcess(t *testing.T) {
	url := os.Getenv("AGENTRL_DIST_CHAOS_URL")
	if url == "" {
		t.Skip("run by the chaos tests")
	}
	conn, err := Connect(url, os.Getenv("AGENTRL_DIST_CHAOS_TOKEN"), "chaos-worker")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var mu sync.Mutex
	w := &Worker{Conn: conn, RunName: os.Getenv("AGENTRL_DIST_CHAOS_RUN"), ID: os.Getenv("AGENTRL_DIST_CHAOS_ID"),
		Concurrency: 2, Grace: 5 * time.Second,
		OnStart: func(task Task, attempt int) {
			mu.Lock()
			fmt.Printf("start %s %d\n", task.Key(), attempt)
			mu.Unlock()
		},
		Episode: func(ctx context.Context, task Task) (*traj.Trajectory, error) {
			d := time.Duration(100+(task.Seed*37+int64(task.Sample)*11)%150) * time.Millisecond
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return synthTraj(task, 200, task.AdmitVersion), nil
		}}
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	fmt.Printf("stats done=%d nacked=%d terminated=%d\n", st.Done, st.Nacked, st.Terminated)
}

// chaosWorker is a worker process of a chaos test.
type chaosWorker struct {
	cmd    *exec.Cmd
	starts chan string // "<key> <attempt>" per episode started
	done   chan struct{}
	out    strings.Builder
	mu     sync.Mutex
}

func startChaosWorker(t *testing.T, url, token, run, id string) *chaosWorker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWorkerProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "AGENTRL_DIST_CHAOS_URL="+url, "AGENTRL_DIST_CHAOS_TOKEN="+token,
		"AGENTRL_DIST_CHAOS_RUN="+run, "AGENTRL_DIST_CHAOS_ID="+id)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &chaosWorker{cmd: cmd, starts: make(chan string, 1024), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			w.mu.Lock()
			w.out.WriteString(line + "\n")
			w.mu.Unlock()
			if s, ok := strings.CutPrefix(line, "start "); ok {
				select {
				case w.starts <- s:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-w.done
		_ = cmd.Wait()
	})
	return w
}

func (w *chaosWorker) output() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.String()
}

// chaosServer is the NATS server under test: embedded or an external process.
type chaosServer struct {
	url                   string
	learnerTok, workerTok string // tokens, or "" when credentials are in the URLs
	workerURL             string
	restart               func(t *testing.T)
}

func embeddedChaosServer(t *testing.T) *chaosServer {
	s, err := StartServer(ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cs := &chaosServer{url: s.URL(), workerURL: s.URL(), learnerTok: s.LearnerToken(), workerTok: s.WorkerToken()}
	cs.restart = func(t *testing.T) {
		cfg := s.Config()
		s.Shutdown()
		var err error
		if s, err = StartServer(cfg); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { s.Shutdown() })
	return cs
}

func TestChaosEmbedded(t *testing.T) {
	runChaos(t, embeddedChaosServer(t))
}

// runChaos: a learner-side consumer and two worker processes over loopback. One worker is
// killed with SIGKILL mid-episode; the server is restarted; the learner "crashes" (its
// consumer is dropped without acknowledging its last, uncheckpointed step) and resumes from its
// checkpointed state. Counted by stream sequence afterwards: no trajectory lost, none trained
// twice, every drop with its reason.
func runChaos(t *testing.T, cs *chaosServer) {
	ctx := ctxFor(t, 90*time.Second)
	const run = "chaos"
	const groups, samples = 20, 3
	const n = groups * samples
	const batch = 6
	l := connect(t, cs.url, cs.learnerTok)
	if err := l.SetupRun(ctx, RunConfig{Run: run, TaskAckWait: time.Second}); err != nil {
		t.Fatal(err)
	}
	for g := range uint64(groups) {
		for i := range samples {
			task := testTask(run, g, i)
			task.AdmitVersion = int32(g / 4)
			if err := l.PublishTask(ctx, task); err != nil {
				t.Fatal(err)
			}
		}
	}
	a := startChaosWorker(t, cs.workerURL, cs.workerTok, run, "a")
	b := startChaosWorker(t, cs.workerURL, cs.workerTok, run, "b")

	// Kill worker a mid-episode: right after its fourth episode started (each lasts ≥ 100 ms).
	var killedKey string
	for i := range 4 {
		select {
		case s := <-a.starts:
			if i == 3 {
				killedKey = strings.Fields(s)[0]
			}
		case <-ctx.Done():
			t.Fatalf("worker a started %d episodes; output:\n%s", i, a.output())
		}
	}
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
	_ = a.cmd.Wait()
	t.Logf("killed worker a in the episode of %s", killedKey)

	cfg := ConsumerConfig{Run: run, AckWait: time.Second, Fetch: 4, SweepTasks: time.Second}
	k, err := l.NewConsumer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var (
		step          int
		pending       []*Delivery
		checkpointed  ConsumerState      // the learner's last durable checkpoint
		trainedInCkpt = map[string]int{} // key → times trained in a checkpointed step
		restarted     bool
		crashed       bool
		swept         int64 // settled tasks the server kept, removed by the consumers' sweeps
	)
	checkpoint := func() {
		k.Trained(step, pending...)
		checkpointed = k.State(step, 0) // "saved with the checkpoint"
		if err := k.Checkpointed(ctx, step); err != nil {
			t.Fatalf("checkpoint %d: %v", step, err)
		}
		for _, d := range pending {
			trainedInCkpt[d.Key]++
		}
		pending = nil
		step++
	}
	for len(checkpointed.Trained) < n {
		if ctx.Err() != nil {
			t.Fatalf("timed out with %d of %d trained; worker b:\n%s", len(checkpointed.Trained), n, b.output())
		}
		nctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		d, err := k.Next(nctx)
		cancel()
		if err != nil {
			if len(pending) > 0 {
				checkpoint()
			}
			continue
		}
		pending = append(pending, d)
		total := len(checkpointed.Trained) + len(pending)
		switch {
		case !restarted && total >= n/3:
			restarted = true
			t.Log("restarting the server")
			cs.restart(t)
		case !crashed && total >= 2*n/3:
			// The learner dies mid-step: the step in progress is lost, nothing of it acked.
			crashed = true
			k.Trained(step, pending...)
			lost := len(pending)
			k.Close()
			swept += k.TasksSwept()
			pending = nil
			k, err = l.NewConsumer(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			k.Restore(checkpointed)
			t.Logf("learner crashed with %d trajectories of step %d untrained; resumed from step %d", lost, step, step-1)
		case len(pending) == batch:
			checkpoint()
		}
	}
	// Every task is acked once its trajectory is stored; a server killed with SIGKILL may forget
	// some acks (JetStream does not sync them), and those tasks run again: wait for the queue to
	// empty, the learner drops their trajectories as duplicates. A server stopped while it handles
	// an ack may instead keep the acked task for good; the consumer's sweep removes it.
	for {
		// Its own deadline, so that the test's running out is reported with what is left.
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		tq, err := l.JS.Stream(qctx, TasksStream(run))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if tq.CachedInfo().State.Msgs == 0 {
			cancel()
			break
		}
		if ctx.Err() != nil {
			detail := ""
			if c, err := l.JS.Consumer(qctx, TasksStream(run), TasksConsumer); err == nil {
				ci := c.CachedInfo()
				detail = fmt.Sprintf(": stream %+v; workers' consumer delivered %+v, ack floor %+v, %d pending, %d ack pending",
					tq.CachedInfo().State, ci.Delivered, ci.AckFloor, ci.NumPending, ci.NumAckPending)
			}
			cancel()
			t.Fatalf("%d tasks never acknowledged%s", tq.CachedInfo().State.Msgs, detail)
		}
		cancel()
		time.Sleep(100 * time.Millisecond)
	}
	// Stop worker b gracefully, then take anything left on the stream (late duplicates).
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		t.Fatal("worker b did not stop on SIGTERM")
	}
	if err := b.cmd.Wait(); err != nil {
		t.Fatalf("worker b: %v\n%s", err, b.output())
	}
	for {
		nctx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond) // > AckWait: redeliveries too
		d, err := k.Next(nctx)
		cancel()
		if err != nil {
			break
		}
		t.Errorf("a trajectory handed out after every key was trained: %s (seq %d)", d.MsgID, d.Seq)
	}

	checkpoint()
	k.Close()
	swept += k.TasksSwept()

	// Count by stream sequence.
	st, err := l.JS.Stream(ctx, TrajStream(run))
	if err != nil {
		t.Fatal(err)
	}
	last := st.CachedInfo().State.LastSeq
	final := checkpointed
	for seq := uint64(1); seq <= last; seq++ {
		var trainedAs []string
		for key, s := range final.Trained {
			if s == seq {
				trainedAs = append(trainedAs, key)
			}
		}
		reason, dropped := final.Dropped[seq]
		switch {
		case len(trainedAs) == 1 && !dropped:
		case len(trainedAs) == 0 && dropped && reason != "":
		default:
			t.Errorf("seq %d: trained as %v, dropped %v (%q): want exactly one of them", seq, trainedAs, dropped, reason)
		}
	}
	for g := range uint64(groups) {
		for i := range samples {
			key := testTask(run, g, i).Key()
			if _, ok := final.Trained[key]; !ok {
				t.Errorf("trajectory %s lost", key)
			}
			if trainedInCkpt[key] != 1 {
				t.Errorf("%s trained %d times in checkpointed steps", key, trainedInCkpt[key])
			}
		}
	}
	drops := map[string]int{}
	for _, r := range final.Dropped {
		drops[r]++
	}
	if drops[DropStale]+drops[DropFailed]+drops[DropFilter]+drops[DropCorrupt] != 0 {
		t.Errorf("drops %v: only duplicates were possible here", drops)
	}
	// The killed worker's episode ran again, as a later attempt.
	if s, ok := final.Trained[killedKey]; ok {
		m, err := st.GetMsg(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if a, _ := strconv.Atoi(m.Header.Get(HeaderAttempt)); a < 1 || m.Header.Get(HeaderWorker) != "b" {
			t.Errorf("the killed episode %s was trained from attempt %d by worker %q, want a redelivery to b", killedKey, a, m.Header.Get(HeaderWorker))
		}
	}
	tq, err := l.JS.Stream(ctx, TasksStream(run))
	if err != nil {
		t.Fatal(err)
	}
	if left := tq.CachedInfo().State.Msgs; left != 0 {
		t.Errorf("%d tasks left unacknowledged", left)
	}
	t.Logf("%d trajectories stored for %d episodes; drops %v; %d settled tasks swept; worker b: %s", last, n, drops, swept,
		strings.TrimSpace(b.output()[strings.LastIndex(b.output(), "stats"):]))
}
