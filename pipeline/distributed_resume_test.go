package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentrl/agentrl/dist"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/traj"
)

// distResumeSets: eight distributed RL steps, η = 2, a checkpoint every second step (tinyConfig).
// A group waits for its members as long as a loaded machine may take to restart a server and
// redeliver a killed worker's tasks: a partial group here would be a fault, not a timeout.
var distResumeSets = append(append([]string{}, distSets...), "phases.rl.steps=8", "phases.rl.rl.async.workers.group_timeout=2m")

const (
	distResumeSteps = 8
	distResumeEta   = 2
	distRLPhase     = 1 // the RL phase's index in tinyConfig
)

// restartServer shuts the embedded server down and starts it again on the same port and store,
// under the live learner.
func (s *distSession) restartServer() error {
	cfg := s.srv.Config()
	s.srv.Shutdown()
	srv, err := dist.StartServer(cfg)
	if err != nil {
		return err
	}
	s.srv = srv
	return nil
}

// TestHelperDistLearner is the learner process of TestDistributedResume: it trains a fresh run
// until it is killed.
func TestHelperDistLearner(t *testing.T) {
	runs := os.Getenv("AGENTRL_TEST_DIST_LEARNER_RUNS")
	if runs == "" {
		t.Skip("run by TestDistributedResume")
	}
	run, err := NewRun(tinyConfig(t, runs, strings.Split(os.Getenv("AGENTRL_TEST_DIST_LEARNER_SETS"), "|")...), Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// distProc is a child process of a test: a worker or a learner.
type distProc struct {
	cmd   *exec.Cmd
	stdin interface{ Close() error }
	log   *bytes.Buffer
	mu    *sync.Mutex
	done  chan error
}

func startDistProc(t *testing.T, test string, env ...string) *distProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	p := &distProc{cmd: cmd, log: new(bytes.Buffer), mu: new(sync.Mutex), done: make(chan error, 1)}
	w := lockedWriter{p.log, p.mu}
	cmd.Stdout, cmd.Stderr = w, w
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = in
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		p.done <- nil
	})
	return p
}

func (p *distProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// stop closes the worker's stdin, which makes it stop, and waits for it.
func (p *distProc) stop(t *testing.T, name string) {
	t.Helper()
	_ = p.stdin.Close()
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Errorf("%s: %v\n%s", name, err, p.output())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop\n%s", name, p.output())
	}
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// distResumeServer is where the data plane of a resume test lives: the learner's embedded server,
// or an external nats-server process.
type distResumeServer struct {
	external  bool
	url       string                        // the external server's
	sets      []string                      // the learner's config
	workerEnv func() []string               // the worker processes' credentials
	learner   func(t *testing.T) *dist.Conn // an auditor's connection, after the run
	restart   func(t *testing.T)            // the external server's (SIGTERM, start again)
}

// externalNATS starts Debian's nats-server (scripts/setup installs it) configured by
// dist.NATSServerConfig: the learner and the workers authenticate by NKey.
func externalNATS(t *testing.T) *distResumeServer {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/nats-server"); err != nil {
			t.Skip("no nats-server (Debian package nats-server; scripts/setup installs it)")
		}
	}
	lseed, lpub, err := dist.NewNKey()
	if err != nil {
		t.Fatal(err)
	}
	wseed, wpub, err := dist.NewNKey()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AGENTRL_TEST_LEARNER_NKEY", lseed) // the learner's config names it; child processes inherit it
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(dist.NATSServerConfig(addr, filepath.Join(dir, "js"), dist.NATSUser{NKey: lpub}, dist.NATSUser{NKey: wpub})), 0o600); err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	start := func() {
		cmd = exec.Command(bin, "-c", conf)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for i := 0; ; i++ {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				return
			}
			if i > 200 {
				t.Fatalf("nats-server did not listen: %v", err)
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
	start()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	url := "nats://" + addr
	return &distResumeServer{external: true, url: url,
		sets: []string{"phases.rl.rl.async.workers.listen=", "phases.rl.rl.async.workers.url=" + url,
			"phases.rl.rl.async.workers.nkey=${AGENTRL_TEST_LEARNER_NKEY}"},
		workerEnv: func() []string {
			return []string{"AGENTRL_TEST_DIST_URL=" + url, "AGENTRL_TEST_DIST_NKEY=" + wseed}
		},
		learner: func(t *testing.T) *dist.Conn {
			c, err := dist.Dial(url, dist.Auth{NKeySeed: lseed}, "auditor")
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		restart: func(t *testing.T) {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
			start()
		}}
}

// embeddedNATS is the learner's own server; the auditor opens its store after the run.
func embeddedNATS(t *testing.T, dir string) *distResumeServer {
	return &distResumeServer{
		workerEnv: func() []string {
			url, tok := waitDistServer(t, context.Background(), dir)
			return []string{"AGENTRL_TEST_DIST_URL=" + url, "AGENTRL_TEST_DIST_TOKEN=" + tok}
		},
		learner: func(t *testing.T) *dist.Conn {
			s, err := dist.StartServer(dist.ServerConfig{StoreDir: filepath.Join(dir, distDir, "store")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Shutdown)
			c, err := dist.Connect(s.URL(), s.LearnerToken(), "auditor")
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
	}
}

// A learner and two worker processes over loopback. The learner is killed with SIGKILL in the
// middle of a step after it published weights newer than its last checkpoint (its embedded server
// dies with it), and resumed; under the resumed learner the server is restarted, then a worker is
// killed with SIGKILL with episodes in flight. Afterwards,
// counted by stream sequence: no trajectory lost, none trained twice, every drop with its reason,
// and no trained token newer than its step's policy or older than the bound.
func TestDistributedResume(t *testing.T) {
	testDistResume(t, false)
}

// The same with an external nats-server process (restarted with SIGTERM under the resumed
// learner), the learner and the workers authenticated by NKey.
func TestDistributedResumeExternalServer(t *testing.T) {
	testDistResume(t, true)
}

func testDistResume(t *testing.T, external bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	runs := t.TempDir()
	dir := filepath.Join(runs, "tiny")
	srv := embeddedNATS(t, dir)
	if external {
		srv = externalNATS(t)
	}
	sets := append(slices.Clone(distResumeSets), srv.sets...)
	learner := startDistProc(t, "TestHelperDistLearner", "AGENTRL_TEST_DIST_LEARNER_RUNS="+runs, "AGENTRL_TEST_DIST_LEARNER_SETS="+strings.Join(sets, "|"))
	env := srv.workerEnv()
	workers := []*distProc{
		startDistProc(t, "TestHelperDistWorker", append(env, "AGENTRL_TEST_DIST_ID=p0")...),
		startDistProc(t, "TestHelperDistWorker", append(env, "AGENTRL_TEST_DIST_ID=p1")...),
	}
	// Kill the learner once it has trained three steps: it checkpointed after the second and has
	// published the weights of the third, which its successor never has.
	for countRLLines(dir) < 3 {
		select {
		case err := <-learner.done:
			t.Fatalf("the learner exited before it could be killed: %v\n%s", err, learner.output())
		case <-ctx.Done():
			t.Fatalf("the learner did not train 3 steps\n%s", learner.output())
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := learner.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-learner.done
	learner.done <- nil
	killedAt := countRLLines(dir)

	run, err := Resume(dir, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("learner killed after %d RL steps; resuming at step %d, policy version %d", killedAt, run.state.Step, run.version)
	var decisions []dist.Decision
	run.onDistClose = func(k *dist.Consumer) { decisions = k.Decisions() }
	restarted, killed := false, false
	run.onDistStep = func(s *distSession, step int) {
		switch {
		case !restarted:
			restarted = true
			if external {
				srv.restart(t)
			} else if err := s.restartServer(); err != nil {
				t.Error(err)
			}
		case !killed:
			// Worker p0 dies as soon as it starts an episode; p1 gets its tasks after
			// task_ack_wait.
			killed = true
			seen := strings.Count(workers[0].output(), "started (learner epoch")
			for i := 0; i < 5000 && strings.Count(workers[0].output(), "started (learner epoch") == seen; i++ {
				time.Sleep(time.Millisecond)
			}
			if err := workers[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := run.Train(ctx); err != nil {
		t.Fatalf("resumed run: %v\nworker p0:\n%s", err, workers[0].output())
	}
	workers[1].stop(t, "worker p1")
	if !restarted || !killed {
		t.Fatalf("under the resumed learner: server restarted %v, worker killed %v", restarted, killed)
	}
	auditDistResume(t, dir, srv.learner(t), decisions)
	if log := workers[0].output() + workers[1].output(); !strings.Contains(log, "learner epoch 2") {
		t.Errorf("no worker reports the resumed learner's epoch:\n%s", log)
	}
}

// A learner with two workers in one process (so that it runs under -race): the learner's server
// is restarted under it, it is stopped in the middle of a step after publishing weights newer than
// its last checkpoint, and resumed. The same accounting holds.
func TestDistributedResumeInProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := tinyConfig(t, t.TempDir(), distResumeSets...)
	run, err := NewRun(c, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	dir := run.Dir
	var wg sync.WaitGroup
	wctx, stopWorkers := context.WithCancel(ctx)
	defer func() {
		stopWorkers()
		wg.Wait()
	}()
	for i := range 2 {
		wg.Go(func() {
			url, tok := waitDistServer(t, wctx, dir)
			conn, err := dist.Connect(url, tok, "test-worker")
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			for wctx.Err() == nil {
				_, err = RunWorker(wctx, WorkerOptions{Conn: conn, Run: "tiny", ID: "w" + strconv.Itoa(i), Envs: all.Builtins(), Concurrency: 4, Slots: 8})
				if err == nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	crash, crashNow := context.WithCancel(ctx)
	defer crashNow()
	run.onDistStep = func(s *distSession, step int) {
		switch step {
		case 0:
			if err := s.restartServer(); err != nil {
				t.Error(err)
			}
		case 2:
			crashNow() // in the middle of the fourth step: waiting for its groups or training
		}
	}
	if _, err := run.Train(crash); !errors.Is(err, context.Canceled) {
		t.Fatalf("the stopped run returned %v, want context.Canceled", err)
	}
	// Resumed against a server that lost the stream (its store replaced), the learner refuses to
	// go on rather than take other trajectories for the ones its checkpoint recorded.
	store := filepath.Join(dir, distDir, "store")
	if err := os.Rename(store, store+".aside"); err != nil {
		t.Fatal(err)
	}
	lost, err := Resume(dir, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lost.Train(ctx); err == nil || !strings.Contains(err.Error(), "the server lost trajectories") {
		t.Fatalf("resumed on an empty store: %v", err)
	}
	if err := os.RemoveAll(store); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(store+".aside", store); err != nil {
		t.Fatal(err)
	}
	res, err := Resume(dir, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("learner stopped after 3 RL steps; resuming at step %d, policy version %d", res.state.Step, res.version)
	var decisions []dist.Decision
	res.onDistClose = func(k *dist.Consumer) { decisions = k.Decisions() }
	if _, err := res.Train(ctx); err != nil {
		t.Fatal(err)
	}
	stopWorkers()
	wg.Wait()
	auditDistResume(t, dir, embeddedNATS(t, dir).learner(t), decisions)
}

// auditDistResume checks a finished distributed run that was resumed:
//   - every RL step was logged once and trained whole groups, and no trajectory it recorded has a
//     policy token newer than the step's policy version or older than the staleness bound;
//   - every episode was recorded (and so trained) exactly once;
//   - counted by stream sequence, every trajectory stored is exactly one of: trained (the final
//     checkpoint's consumer state), dropped for a reason there, or, if it came after the last
//     checkpoint, dropped as a duplicate by a consumer restored from it (what a next learner
//     would do); none is left to train.
func auditDistResume(t *testing.T, dir string, conn *dist.Conn, decisions []dist.Decision) {
	t.Helper()
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	versions := map[int]int32{}
	for _, m := range metricLines(t, dir) {
		if m["phase"] != "rl" {
			continue
		}
		step := int(m["step"].(float64))
		if _, ok := versions[step]; ok {
			t.Fatalf("RL step %d logged twice", step)
		}
		versions[step] = int32(m["version"].(float64))
		if m["signal/effective_batch"] == nil {
			t.Fatalf("step %d did not train: %v", step, m)
		}
		if lag := m["shift/version_lag_max"].(float64); lag > distResumeEta || lag < 0 {
			t.Fatalf("step %d trained on tokens %v versions behind, bound [0, %d]", step, lag, distResumeEta)
		}
		if m["dist/partial_groups"].(float64) != 0 || m["dist/dropped_stale"].(float64) != 0 {
			t.Fatalf("step %d: partial groups %v, stale drops %v", step, m["dist/partial_groups"], m["dist/dropped_stale"])
		}
		if _, ok := m["dist/dropped_superseded"]; !ok {
			t.Fatalf("step %d lacks dist/dropped_superseded", step)
		}
	}
	if len(versions) != distResumeSteps {
		t.Fatalf("%d RL steps logged, want %d", len(versions), distResumeSteps)
	}

	recorded := map[string]bool{}
	for _, tr := range readTrajs(t, dir) {
		var phase, stepStr string
		for _, kv := range tr.Meta {
			switch kv.Key {
			case "phase":
				phase = kv.Value
			case "step":
				stepStr = kv.Value
			}
		}
		if phase != "rl" {
			continue
		}
		step, _ := strconv.Atoi(stepStr)
		v, ok := versions[step]
		if !ok {
			t.Fatalf("trajectory %s of RL step %d, which the metrics lack", tr.ID, step)
		}
		for i, tv := range tr.Versions {
			if tr.LossMask[i] && tv != traj.NoVersion && (tv > v || v-tv > distResumeEta) {
				t.Fatalf("trajectory %s of step %d (policy v%d) has a token sampled at v%d", tr.ID, step, v, tv)
			}
		}
		if recorded[tr.ID] {
			t.Fatalf("episode %s recorded twice", tr.ID)
		}
		recorded[tr.ID] = true
	}
	if want := distResumeSteps * 2 * 4; len(recorded) != want {
		t.Fatalf("%d RL episodes recorded, want %d", len(recorded), want)
	}

	// The final checkpoint's record of the trajectory stream.
	latest, err := os.ReadFile(filepath.Join(dir, checkpointsDir, latestFile))
	if err != nil {
		t.Fatal(err)
	}
	var ts struct {
		Extra progressState `json:"extra"`
	}
	b, err := os.ReadFile(filepath.Join(dir, checkpointsDir, strings.TrimSpace(string(latest)), "trainer_state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ts); err != nil {
		t.Fatal(err)
	}
	final := ts.Extra.Dist
	if final == nil {
		t.Fatal("the final checkpoint has no consumer state")
	}
	var inc distIncarnation
	if b, err := os.ReadFile(filepath.Join(dir, distDir, "epoch.json")); err != nil || json.Unmarshal(b, &inc) != nil {
		t.Fatalf("dist/epoch.json: %v %s", err, b)
	}
	if inc.Epoch < 2 || final.Lineage[inc.Epoch] == 0 || len(final.Lineage) < 2 {
		t.Fatalf("epoch %d, lineage %v: want the resumed learner's epoch and its predecessor's", inc.Epoch, final.Lineage)
	}
	want := map[string]bool{}
	for step := range distResumeSteps {
		for g := range 2 {
			for k := range 4 {
				want[fmt.Sprintf("tiny/%d/%d", distGroupID(distRLPhase, step, g), k)] = true
			}
		}
	}
	trainedAt := map[uint64]string{}
	for key, seq := range final.Trained {
		if !want[key] {
			t.Errorf("trained %s, which no step issued", key)
		}
		if other, ok := trainedAt[seq]; ok {
			t.Errorf("seq %d trained as %s and %s", seq, key, other)
		}
		trainedAt[seq] = key
	}
	for key := range want {
		if _, ok := final.Trained[key]; !ok {
			t.Errorf("episode %s lost: not trained", key)
		}
	}

	// What came after the last checkpoint: a consumer restored from it decides it.
	audit, err := conn.NewConsumer(ctx, dist.ConsumerConfig{Run: "tiny", Durable: "audit", Epoch: inc.Epoch,
		StartSeq: final.FirstUnsettled(inc.Base)})
	if err != nil {
		t.Fatal(err)
	}
	audit.Restore(*final)
	for {
		nctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		d, err := audit.Next(nctx)
		cancel()
		if err != nil {
			break
		}
		t.Errorf("trajectory %s (seq %d) is left to train after the run", d.MsgID, d.Seq)
	}
	audit.Close()
	after := map[uint64]string{}
	for _, d := range audit.Decisions() {
		after[d.Seq] = d.Reason
	}

	last, err := conn.TrajLastSeq(ctx, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	st, err := conn.JS.Stream(ctx, dist.TrajStream("tiny"))
	if err != nil {
		t.Fatal(err)
	}
	drops := map[string]int{}
	epochs := map[string]int{} // "<epoch> <fate>"
	retried := 0               // trajectories of a task's later delivery (a killed worker's)
	for seq := inc.Base; seq <= last; seq++ {
		key, trained := trainedAt[seq]
		reason, dropped := final.Dropped[seq]
		late, afterwards := after[seq]
		n := 0
		for _, b := range []bool{trained, dropped, afterwards} {
			if b {
				n++
			}
		}
		switch {
		case n != 1:
			t.Errorf("seq %d: trained %v (%s), dropped %v (%q), dropped after the run %v (%q): want exactly one", seq, trained, key, dropped, reason, afterwards, late)
			continue
		case dropped && reason == "", afterwards && late == "":
			t.Errorf("seq %d dropped without a reason", seq)
		case afterwards && late != dist.DropDuplicate:
			t.Errorf("seq %d, after the last checkpoint, dropped as %q, want a duplicate of a trained episode", seq, late)
		}
		fate := "trained"
		switch {
		case dropped:
			fate, drops[reason] = reason, drops[reason]+1
		case afterwards:
			fate, drops[late] = late, drops[late]+1
		}
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		epochs[m.Header.Get(dist.HeaderEpoch)+" "+fate]++
		if a, _ := strconv.Atoi(m.Header.Get(dist.HeaderAttempt)); a > 0 {
			retried++
		}
		// A trained trajectory of an earlier epoch was sampled within the lineage.
		if trained && m.Header.Get(dist.HeaderEpoch) != strconv.Itoa(int(inc.Epoch)) {
			e, _ := strconv.Atoi(m.Header.Get(dist.HeaderEpoch))
			hi, _ := strconv.Atoi(m.Header.Get(dist.HeaderMaxVersion))
			if upto, ok := final.Lineage[uint32(e)]; !ok || int32(hi) > upto {
				t.Errorf("seq %d (%s) of epoch %d sampled at v%d trained; lineage %v", seq, key, e, hi, final.Lineage)
			}
		}
	}
	// The resumed learner's decisions agree with its last checkpoint: what it dropped is dropped
	// there for the same reason, what it handed out is trained there, each sequence once.
	seen := map[uint64]bool{}
	for _, d := range decisions {
		if seen[d.Seq] {
			t.Errorf("the resumed learner decided seq %d twice", d.Seq)
		}
		seen[d.Seq] = true
		if r, ok := final.Dropped[d.Seq]; ok && r != d.Reason {
			t.Errorf("seq %d: dropped as %q, checkpointed as %q", d.Seq, d.Reason, r)
		}
		if _, ok := trainedAt[d.Seq]; ok && d.Reason != "" {
			t.Errorf("seq %d: dropped as %q, checkpointed as trained", d.Seq, d.Reason)
		}
	}
	for reason := range drops {
		if !slices.Contains([]string{dist.DropDuplicate, dist.DropSuperseded, dist.DropFilter}, reason) {
			t.Errorf("drops %v: %q was not possible here", drops, reason)
		}
	}
	t.Logf("stream seqs %d..%d: %d trained, drops %v; by epoch and fate %v; %d from a task's later delivery; the resumed learner decided %d", inc.Base, last, len(trainedAt), drops, epochs, retried, len(decisions))
}
