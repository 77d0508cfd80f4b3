package pipeline

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/dist"
	"github.com/agentrl/agentrl/env/all"
)

// distSets run the tiny asynchronous phase's episodes on workers through a server the learner
// embeds; a killed worker's tasks come back after 2 s.
var distSets = append(append([]string{}, asyncSets...),
	"phases.rl.rl.async.max_staleness=2",
	"phases.rl.rl.async.workers.listen=127.0.0.1:0", "phases.rl.rl.async.workers.task_ack_wait=2s", "phases.rl.rl.async.workers.group_timeout=15s")

// waitDistServer waits for the run's embedded server to write its URL and the workers' token.
func waitDistServer(t *testing.T, ctx context.Context, dir string) (url, token string) {
	t.Helper()
	for ctx.Err() == nil {
		u, err1 := os.ReadFile(filepath.Join(dir, distDir, "url"))
		k, err2 := os.ReadFile(filepath.Join(dir, distDir, "worker.token"))
		if err1 == nil && err2 == nil {
			return strings.TrimSpace(string(u)), strings.TrimSpace(string(k))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the learner did not start its server")
	return "", ""
}

// checkDistRun checks a finished distributed run: every RL step trained on whole groups within
// the staleness bound and reported the drops by reason, and the consumer handed out exactly one
// trajectory per episode, every other decision a counted drop.
func checkDistRun(t *testing.T, dir string, decisions []dist.Decision, drops map[string]int64) {
	t.Helper()
	rl := 0
	for _, m := range metricLines(t, dir) {
		if m["phase"] != "rl" {
			continue
		}
		rl++
		if m["signal/effective_batch"] == nil {
			t.Fatalf("step %v did not train: %v", m["step"], m)
		}
		if lag := m["shift/version_lag_max"].(float64); lag > 2 {
			t.Fatalf("step %v trained on tokens %v versions old, bound 2", m["step"], lag)
		}
		for _, k := range []string{"dist/dropped_stale", "dist/dropped_duplicate", "dist/dropped_filter", "dist/partial_groups"} {
			if _, ok := m[k]; !ok {
				t.Fatalf("step %v lacks %s", m["step"], k)
			}
		}
		if m["dist/partial_groups"].(float64) != 0 {
			t.Fatalf("step %v trained partial groups", m["step"])
		}
	}
	if rl != 6 {
		t.Fatalf("%d RL steps logged, want 6", rl)
	}
	accepted := map[string]bool{}
	dropped := map[string]int64{}
	for _, d := range decisions {
		if d.Reason != "" {
			dropped[d.Reason]++
			continue
		}
		key := d.MsgID[:strings.LastIndexByte(d.MsgID, '/')]
		if accepted[key] {
			t.Fatalf("episode %s handed out twice", key)
		}
		accepted[key] = true
	}
	if want := 6 * 2 * 4; len(accepted) != want {
		t.Fatalf("%d episodes handed out, want %d (6 steps × 2 groups × 4)", len(accepted), want)
	}
	for r, n := range dropped {
		if drops[r] != n {
			t.Fatalf("drops %v do not count the decisions' %v", drops, dropped)
		}
	}
	t.Logf("%d episodes trained; drops %v", len(accepted), drops)
}

// A distributed phase run by two in-process workers trains every step within the bound; one
// worker signs in with the token, the other with an NKey the config lists.
func TestDistributedPhase(t *testing.T) {
	seed, pub, err := dist.NewNKey()
	if err != nil {
		t.Fatal(err)
	}
	// A reward block rescores what the workers return, and the workers draw the tasks' difficulty
	// levels (item 2 of issue 29).
	c := tinyConfig(t, t.TempDir(), append(slices.Clone(distSets), "phases.rl.rl.async.workers.worker_nkeys=["+pub+"]",
		"phases.rl.envs=[{name: calc, weight: 1, difficulty: {levels: [1, 4], weights: [1, 3]}, reward: {outcome: 2, format: {pattern: '<tool_call>', weight: 0.5}}}]")...)
	run, err := NewRun(c, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	var decisions []dist.Decision
	var drops map[string]int64
	var mu sync.Mutex
	done := map[int]int64{} // trajectories stored, by worker
	run.onDistClose = func(k *dist.Consumer) { decisions, drops = k.Decisions(), k.Drops() }
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wctx, stopWorkers := context.WithCancel(ctx)
	wg.Go(func() {
		url, tok := waitDistServer(t, wctx, run.Dir)
		var inner sync.WaitGroup
		for i := range 2 {
			inner.Go(func() {
				auth := dist.Auth{Token: tok}
				if i == 1 {
					auth = dist.Auth{NKeySeed: seed}
				}
				conn, err := dist.Dial(url, auth, "test-worker")
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close()
				// The URL is written before the learner sets up the run's streams: a worker that
				// comes too early finds no bucket and tries again, as a restarted one would.
				for wctx.Err() == nil {
					var st dist.WorkerStats
					st, err = RunWorker(wctx, WorkerOptions{Conn: conn, Run: "tiny", ID: "w" + string(rune('0'+i)), Envs: all.Builtins(), Concurrency: 4, Slots: 8})
					mu.Lock()
					done[i] += st.Done
					mu.Unlock()
					if err == nil {
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			})
		}
		inner.Wait()
	})
	_, err = run.Train(ctx)
	stopWorkers()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	checkDistRun(t, run.Dir, decisions, drops)
	checkDistReplay(t, run.Dir, 6)
	shaped, levels := false, map[string]bool{}
	for _, m := range metricLines(t, run.Dir) {
		for k := range m {
			shaped = shaped || strings.HasPrefix(k, "reward/calc/")
			if strings.HasPrefix(k, "reward/success/calc/level") && m["eval"] == nil {
				levels[k] = true
			}
		}
		if n, _ := m["dist/filtered_no_level"].(float64); n > 0 {
			t.Fatalf("step %v: %v trajectories without their level", m["step"], n)
		}
	}
	if !shaped {
		t.Fatal("no step logged the reward block's parts: the workers' episodes were not rescored")
	}
	if !levels["reward/success/calc/level1"] || !levels["reward/success/calc/level4"] {
		t.Fatalf("the workers' episodes did not run at the phase's levels 1 and 4: %v", levels)
	}
	if done[1] == 0 {
		t.Fatalf("the worker signed in by NKey stored nothing (by worker: %v)", done)
	}
}

// TestHelperDistWorker is the worker process of TestDistributedWorkerKilled and
// TestDistributedResume, authenticated by token or NKey.
func TestHelperDistWorker(t *testing.T) {
	url := os.Getenv("AGENTRL_TEST_DIST_URL")
	if url == "" {
		t.Skip("run by TestDistributedWorkerKilled")
	}
	conn, err := dist.Dial(url, dist.Auth{Token: os.Getenv("AGENTRL_TEST_DIST_TOKEN"), NKeySeed: os.Getenv("AGENTRL_TEST_DIST_NKEY")}, "test-worker")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // the test's end closes stdin
		_, _ = os.Stdin.Read(make([]byte, 1))
		cancel()
	}()
	// A worker that comes before the learner has set up the run finds no bucket and tries again.
	for ctx.Err() == nil {
		_, err = RunWorker(ctx, WorkerOptions{Conn: conn, Run: "tiny", ID: os.Getenv("AGENTRL_TEST_DIST_ID"), Envs: all.Builtins(),
			Concurrency: 4, Slots: 8, Log: os.Stderr, Verbose: true})
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Two worker processes run the episodes; one is killed with SIGKILL mid-run. The run completes,
// every episode trained once, the killed worker's tasks run again by the other, and the metrics
// count them (dist/tasks_retried).
func TestDistributedWorkerKilled(t *testing.T) {
	c := tinyConfig(t, t.TempDir(), distSets...)
	run, err := NewRun(c, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	var decisions []dist.Decision
	var drops map[string]int64
	run.onDistClose = func(k *dist.Consumer) { decisions, drops = k.Decisions(), k.Drops() }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type proc struct {
		cmd   *exec.Cmd
		stdin interface{ Close() error }
		log   *bytes.Buffer
	}
	var mu, logMu sync.Mutex
	var procs []proc
	started := make(chan struct{})
	go func() {
		defer close(started)
		url, tok := waitDistServer(t, ctx, run.Dir)
		for i := range 2 {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperDistWorker$", "-test.count=1")
			cmd.Env = append(os.Environ(), "AGENTRL_TEST_DIST_URL="+url, "AGENTRL_TEST_DIST_TOKEN="+tok, "AGENTRL_TEST_DIST_ID=p"+string(rune('0'+i)))
			var log bytes.Buffer
			lw := lockedWriter{b: &log, mu: &logMu}
			cmd.Stderr, cmd.Stdout = lw, lw
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Error(err)
				return
			}
			if err := cmd.Start(); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			procs = append(procs, proc{cmd, in, &log})
			mu.Unlock()
		}
	}()
	killed := make(chan struct{})
	// Kill worker 0 right after the learner logged its second step: it has just published the
	// next step's tasks, which wait in the workers for the new weights.
	run.onDistStep = func(_ *distSession, step int) {
		if step != 1 {
			return
		}
		<-started
		mu.Lock()
		if len(procs) == 2 {
			// The worker that has run more episodes: one that took none holds none to lose.
			logMu.Lock()
			count := func(i int) int { return strings.Count(procs[i].log.String(), "started (learner epoch") }
			if count(1) > count(0) {
				procs[0], procs[1] = procs[1], procs[0]
			}
			logMu.Unlock()
			_ = procs[0].cmd.Process.Signal(syscall.SIGKILL)
		}
		mu.Unlock()
		close(killed)
	}
	_, err = run.Train(ctx)
	<-killed
	mu.Lock()
	for i, p := range procs {
		_ = p.stdin.Close()
		werr := p.cmd.Wait()
		if i == 1 && werr != nil {
			logMu.Lock()
			t.Errorf("worker 1: %v\n%s", werr, p.log)
			logMu.Unlock()
		}
	}
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	checkDistRun(t, run.Dir, decisions, drops)
	checkKilledWorkerCounted(t, run.Dir)
}

// countRLLines counts the RL steps in a run's metrics so far.
func countRLLines(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		return 0
	}
	return strings.Count(string(b), `"phase":"rl"`)
}

// The workers' credentials are checked at load: NKey seeds only by ${NAME}, public keys that are
// keys, each where it applies.
func TestDistributedCredentialConfig(t *testing.T) {
	base := []string{"phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.dynamic_sampling=null"}
	_, pub, err := dist.NewNKey()
	if err != nil {
		t.Fatal(err)
	}
	seed, _, err := dist.NewNKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sets []string
		want string // "" = loads
	}{
		{[]string{"phases.rl.rl.async.workers.listen=127.0.0.1:0", "phases.rl.rl.async.workers.worker_nkeys=[" + pub + "]"}, ""},
		{[]string{"phases.rl.rl.async.workers.url=nats://h:1", "phases.rl.rl.async.workers.nkey=${SEED}"}, ""},
		{[]string{"phases.rl.rl.async.workers.listen=127.0.0.1:0", "phases.rl.rl.async.workers.worker_nkeys=[" + seed + "]"}, "never put a seed"},
		{[]string{"phases.rl.rl.async.workers.listen=127.0.0.1:0", "phases.rl.rl.async.workers.worker_nkeys=[Unope]"}, "not a public user NKey"},
		{[]string{"phases.rl.rl.async.workers.url=nats://h:1", "phases.rl.rl.async.workers.worker_nkeys=[" + pub + "]"}, "embeds (listen)"},
		{[]string{"phases.rl.rl.async.workers.url=nats://h:1", "phases.rl.rl.async.workers.nkey=" + seed}, "${NAME}"},
		{[]string{"phases.rl.rl.async.workers.listen=127.0.0.1:0", "phases.rl.rl.async.workers.nkey=${SEED}"}, "server at url"},
		{[]string{"phases.rl.rl.async.workers.url=nats://h:1", "phases.rl.rl.async.workers.nkey=${SEED}", "phases.rl.rl.async.workers.token=${TOK}"}, "instead of token"},
	} {
		_, err := config.Load(all.Builtins(), "", "", append(slices.Clone(base), tc.sets...))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: error %v, want %q", tc.sets, err, tc.want)
		}
	}
}
