package pipeline

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/infer/remote"
	"github.com/agentrl/agentrl/infer/serve"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// testKeyVar is the environment variable the tests' generator configs name for the servers' key.
const testKeyVar = "AGENTRL_TEST_SERVE_KEY"

// generatorConfig is a rollout.generator block over agentrl servers at urls.
func generatorConfig(urls ...string) *remote.Config {
	g := &remote.Config{Timeout: time.Minute}
	for i, u := range urls {
		g.Servers = append(g.Servers, remote.ServerConfig{Server: remote.Server{Name: fmt.Sprintf("s%d", i), URL: u, Dialect: remote.Agentrl}, Key: "${" + testKeyVar + "}"})
	}
	return g
}

func TestGeneratorConfig(t *testing.T) {
	c := tinyConfig(t, t.TempDir())
	c.Rollout.Generator = generatorConfig("http://127.0.0.1:1", "http://127.0.0.1:2")
	if err := c.Validate(all.Builtins()); err != nil {
		t.Fatal(err)
	}
	data, err := config.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "api_key: ${"+testKeyVar+"}") {
		t.Fatalf("saved config lacks the key reference:\n%s", data)
	}
	back, err := config.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Rollout.Generator, c.Rollout.Generator) {
		t.Fatalf("round trip: %+v, want %+v", back.Rollout.Generator, c.Rollout.Generator)
	}
	// Unknown keys are errors.
	if _, err := config.Decode([]byte(strings.Replace(string(data), "dialect: agentrl", "dialect: agentrl\n          colour: red", 1))); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Fatalf("unknown key: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(c *config.Config)
		want string
	}{
		{"literal key", func(c *config.Config) { c.Rollout.Generator.Servers[0].Key = "sk-123" }, "servers[0].api_key must name an environment variable"},
		{"no key to publish", func(c *config.Config) { c.Rollout.Generator.Servers[1].Key = "" }, "servers[1].api_key: agentrl serve accepts weights only with its API key"},
		{"vllm in RL", func(c *config.Config) {
			c.Rollout.Generator.Servers[0].Dialect, c.Rollout.Generator.Servers[0].Model = remote.VLLM, "m"
		}, "vLLM has no stock route"},
		{"sglang without a shared disk", func(c *config.Config) { c.Rollout.Generator.Servers[0].Dialect = remote.SGLang }, "set shared_disk: true"},
		{"no servers", func(c *config.Config) { c.Rollout.Generator.Servers = nil }, "rollout.generator.servers: at least one"},
		{"same name", func(c *config.Config) { c.Rollout.Generator.Servers[1].Name = "s0" }, `servers[1].name "s0" is used twice`},
		{"bad url", func(c *config.Config) { c.Rollout.Generator.Servers[0].URL = "127.0.0.1:1" }, "must start with http://"},
		{"attempts", func(c *config.Config) { c.Rollout.Generator.Attempts = 3 }, "rollout.generator.attempts must be in [0, 2]"},
		{"no RL phase", func(c *config.Config) { c.Phases = c.Phases[:1] }, "rollout.generator does nothing without an rl phase"},
		{"precision of an agentrl server", func(c *config.Config) { c.Rollout.Generator.Servers[0].Precision = "bfloat16" }, "servers[0].precision does nothing for an agentrl server"},
		{"unknown precision", func(c *config.Config) {
			c.Rollout.Generator.Servers[0].Dialect, c.Rollout.Generator.Servers[0].SharedDisk = remote.SGLang, true
			c.Rollout.Generator.Servers[0].Precision = "fp8"
		}, `servers[0].precision must be float32 or bfloat16, got "fp8"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tinyConfig(t, t.TempDir())
			c.Rollout.Generator = generatorConfig("http://127.0.0.1:1", "http://127.0.0.1:2")
			tc.edit(&c)
			err := c.Validate(all.Builtins())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// SGLang on a shared disk is a server the trainer can publish to.
	c.Rollout.Generator.Servers[0].Dialect, c.Rollout.Generator.Servers[0].SharedDisk = remote.SGLang, true
	if err := c.Validate(all.Builtins()); err != nil {
		t.Fatal(err)
	}
	// The key is read when the run connects: an unset variable is an error then.
	t.Setenv(testKeyVar, "")
	if _, err := generatorConfig("http://127.0.0.1:1").Options(); err == nil || !strings.Contains(err.Error(), testKeyVar+" is not set") {
		t.Fatalf("unset key: %v", err)
	}
}

// updateSets make every RL step of the tiny run an update (it solves nothing, so dynamic sampling
// would keep no group; an entropy bonus gives the update a gradient).
var updateSets = []string{"phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.loss.entropy_coef=0.01"}

// trainTiny trains a tinyConfig run with gen (nil: in-process), updating at every RL step, and
// returns its directory.
func trainTiny(t *testing.T, runs string, gen *remote.Config, extra ...string) string {
	t.Helper()
	c := tinyConfig(t, runs, append(slices.Clone(updateSets), extra...)...)
	c.Rollout.Generator = gen
	run, err := NewRun(c, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	return run.Dir
}

// readTrajs reads a run's trajectories with their timings zeroed.
func readTrajs(t *testing.T, dir string) []*traj.Trajectory {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "trajectories.atrs"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := traj.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []*traj.Trajectory
	for tr, err := range rd.All() {
		if err != nil {
			t.Fatal(err)
		}
		tr.Timings = traj.Timings{}
		out = append(out, tr)
	}
	return out
}

// sameRun fails unless the runs in dirs a and b recorded the same trajectories (timings aside,
// bit for bit) and the same metrics (timings aside).
func sameRun(t *testing.T, a, b string) {
	t.Helper()
	ta, tb := readTrajs(t, a), readTrajs(t, b)
	if len(ta) != len(tb) {
		t.Fatalf("%d trajectories, want %d", len(tb), len(ta))
	}
	for i := range ta {
		if !traj.Equal(ta[i], tb[i]) {
			t.Fatalf("trajectory %d (%s) differs:\nover HTTP  %v %q tokens %v\nin-process %v %q tokens %v", i, ta[i].ID, tb[i].Status, tb[i].Error, tb[i].Tokens, ta[i].Status, ta[i].Error, ta[i].Tokens)
		}
	}
	ma, mb := metricLines(t, a), metricLines(t, b)
	if len(ma) != len(mb) {
		t.Fatalf("%d metric lines, want %d", len(mb), len(ma))
	}
	// The runs on servers check every sync with the probe: the figures of the servers' sync
	// are theirs alone, and each server scored the probe as the learner did.
	for i := range mb {
		if d, ok := mb[i]["sync/server_probe_max_abs_diff"].(float64); ok && d > 1e-3 {
			t.Fatalf("metric line %d: the servers' probe differs by %v", i+1, d)
		}
		delete(mb[i], "sync/server_probe_max_abs_diff")
		delete(mb[i], "sync/server_probe_mean_abs_diff")
	}
	for i := range ma {
		if !reflect.DeepEqual(ma[i], mb[i]) {
			t.Fatalf("metric line %d differs:\nover HTTP  %v\nin-process %v", i+1, mb[i], ma[i])
		}
	}
}

// startServer serves the checkpoint dir on a loopback port in this process and returns its URL.
func startServer(t *testing.T, dir, key string) string {
	t.Helper()
	srv, err := serve.Open(dir, serve.Options{APIKey: key, Slots: 8})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done; srv.Close() })
	return "http://" + ln.Addr().String()
}

// initialCheckpoint is a checkpoint of a run, for the servers to start with at version 0: the
// run publishes its own weights to them when its RL phase starts.
func initialCheckpoint(t *testing.T, dir string) string {
	t.Helper()
	return filepath.Join(dir, "checkpoints", bestName)
}

// A run that generates over HTTP on two agentrl server processes records what the in-process
// run records.
func TestRemoteGenerationIsDeterministic(t *testing.T) {
	ref := trainTiny(t, t.TempDir(), nil)
	t.Setenv(testKeyVar, "k")
	ck := initialCheckpoint(t, ref)
	a, _ := startChild(t, ck)
	b, _ := startChild(t, ck)
	got := trainTiny(t, t.TempDir(), generatorConfig(a, b))
	sameRun(t, ref, got)
	// Only the latest published version is kept.
	entries, err := os.ReadDir(filepath.Join(got, publishedDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "v10" {
		t.Fatalf("published/ holds %v, want v10 alone", entries)
	}
	// The servers serve the run's last policy.
	for _, u := range []string{a, b} {
		if v := serverVersion(t, u, "k"); v != 10 {
			t.Fatalf("%s serves version %d, want 10", u, v)
		}
	}
}

func serverVersion(t *testing.T, url, key string) int32 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/agentrl/v1/version", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Version int32 }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Version
}

// TestHelperServeProcess is a child of TestRemoteServerKilled: it serves a checkpoint until killed.
func TestHelperServeProcess(t *testing.T) {
	dir := os.Getenv("AGENTRL_TEST_SERVE_CKPT")
	if dir == "" {
		t.Skip("run by TestRemoteServerKilled")
	}
	srv, err := serve.Open(dir, serve.Options{APIKey: os.Getenv(testKeyVar), Slots: 8})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("SERVING http://%s\n", ln.Addr())
	srv.Serve(context.Background(), ln)
}

// startChild serves the checkpoint dir from a child process and returns its URL and process.
func startChild(t *testing.T, dir string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServeProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "AGENTRL_TEST_SERVE_CKPT="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "SERVING "); ok {
			go io.Copy(io.Discard, out)
			return u, cmd
		}
	}
	t.Fatalf("the server process did not start: %v", sc.Err())
	return "", nil
}

// kill -9 of one of two servers in the middle of an RL step: its generations are resubmitted to
// the other (an agentrl server reproduces them from their seeds), the run completes and records
// exactly what the in-process run records, so nothing cut short is recorded as ok.
//
// The trainer reaches the victim through a proxy that sees every call, so the kill happens at a
// chosen point rather than when a poll happens to catch one: once the victim has taken the first
// RL update (version 7), at the first generation the proxy forwards to it, while that generation
// is in flight.
func TestRemoteServerKilled(t *testing.T) {
	ref := trainTiny(t, t.TempDir(), nil)
	t.Setenv(testKeyVar, "k")
	ck := initialCheckpoint(t, ref)
	victimURL, victim := startChild(t, ck)
	b, _ := startChild(t, ck)
	target, err := url.Parse(victimURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var updated, killed atomic.Bool
	var inFlight, atKill atomic.Int32
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/agentrl/v1/weights":
			if v, _ := strconv.Atoi(r.URL.Query().Get("version")); v >= 7 {
				defer updated.Store(true)
			}
		case "/agentrl/v1/generate":
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			if updated.Load() && !killed.Swap(true) {
				// Forwarded and then cut: the generation is in flight when its server dies.
				atKill.Store(n)
				go func() {
					time.Sleep(time.Millisecond)
					victim.Process.Signal(syscall.SIGKILL)
				}()
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	defer a.Close()
	got := trainTiny(t, t.TempDir(), generatorConfig(a.URL, b))
	if !killed.Load() {
		t.Fatal("the server never got a generation after the first RL update, so it was never killed")
	}
	t.Logf("killed the server with %d generations in flight through the proxy", atKill.Load())
	sameRun(t, ref, got)
}

// episodesOn runs 8 groups of 2 calc episodes of the tiny run in dir's policy, generating on
// the servers of g.
func episodesOn(t *testing.T, dir string, g *remote.Config) ([]*traj.Trajectory, *remote.Router) {
	t.Helper()
	ck, err := checkpoint.Load(filepath.Join(dir, "checkpoints", bestName))
	if err != nil {
		t.Fatal(err)
	}
	opts, err := g.Options()
	if err != nil {
		t.Fatal(err)
	}
	opts.HealthInterval = -1
	router, err := remote.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { router.Close() })
	c := tinyConfig(t, t.TempDir())
	runner := &rollout.Runner{Gen: router, Tok: ck.Tokenizer, Cfg: c.Rollout.Config, SampleSeed: 1}
	spec, err := all.Builtins().Lookup("calc")
	if err != nil {
		t.Fatal(err)
	}
	var tasks []rollout.Task
	for i := range 8 {
		tasks = append(tasks, rollout.Task{Env: "calc", Seed: spec.Train.Lo + int64(i), GroupID: uint64(i)})
	}
	groups, err := runner.RunGroups(context.Background(), all.Builtins().New, tasks, 2, 8)
	if err != nil {
		t.Fatal(err)
	}
	var out []*traj.Trajectory
	for _, gr := range groups {
		out = append(out, gr.Trajs...)
	}
	return out, router
}

// A server that hangs is ejected once its calls pass their deadline; the episodes it held are
// resubmitted to the other server and complete.
func TestRemoteHangingServerIsEjected(t *testing.T) {
	dir := trainTiny(t, t.TempDir(), nil)
	t.Setenv(testKeyVar, "k")
	good := startServer(t, filepath.Join(dir, "checkpoints", bestName), "k")
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hang.Close()
	defer close(release)
	g := generatorConfig(hang.URL, good)
	g.Timeout = 300 * time.Millisecond
	t0 := time.Now()
	trajs, router := episodesOn(t, dir, g)
	t.Logf("episodes took %s", time.Since(t0))
	for _, tr := range trajs {
		if tr.Status == traj.StatusEnvError || tr.Status == traj.StatusTimeout {
			t.Fatalf("%s: %s %q", tr.ID, tr.Status, tr.Error)
		}
	}
	st := router.Stats()
	if st[0].Healthy || st[0].Failures < 2 || !st[1].Healthy {
		t.Fatalf("stats %+v: want the hanging server ejected after its deadlines", st)
	}
	t.Logf("hanging server: %d calls, %d failed; good server: %d calls", st[0].Requests, st[0].Failures, st[1].Requests)
}

// A server that returns a logprob fewer than its tokens fails each episode as env_error with an
// error that says so: never trained on, never a reward of 0.
func TestRemoteWrongLogprobsFailTheEpisode(t *testing.T) {
	dir := trainTiny(t, t.TempDir(), nil)
	t.Setenv(testKeyVar, "k")
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"tokens":[5,6,7],"logprobs":[-0.5,-0.25],"versions":[0,0,0],"finish":"stop"}`)
	}))
	defer bad.Close()
	trajs, _ := episodesOn(t, dir, generatorConfig(bad.URL))
	for _, tr := range trajs {
		if tr.Status != traj.StatusEnvError || !strings.Contains(tr.Error, "protocol violation: 3 tokens but 2 logprobs") {
			t.Fatalf("%s: status %s, error %q; want env_error naming the logprobs", tr.ID, tr.Status, tr.Error)
		}
	}
	t.Logf("recorded as: %s %q", trajs[0].Status, trajs[0].Error)
}

// TestHelperRemoteTrainProcess is the child of TestRemoteResumeRewindsServers: it trains the tiny
// run on the servers of AGENTRL_TEST_REMOTE_SERVERS until it is killed.
func TestHelperRemoteTrainProcess(t *testing.T) {
	runs := os.Getenv("AGENTRL_TEST_REMOTE_RUNS")
	if runs == "" {
		t.Skip("run by TestRemoteResumeRewindsServers")
	}
	trainTiny(t, runs, generatorConfig(strings.Split(os.Getenv("AGENTRL_TEST_REMOTE_SERVERS"), ",")...))
}

// A trainer killed after it published a version and before it checkpointed it leaves the servers
// ahead of the run: the resumed run, back at its last checkpoint, brings them to its own weights
// under a newer epoch (they would refuse its lower version otherwise) and records exactly what an
// uninterrupted in-process run records.
func TestRemoteResumeRewindsServers(t *testing.T) {
	ref := trainTiny(t, t.TempDir(), nil)
	t.Setenv(testKeyVar, "k")
	ck := initialCheckpoint(t, ref)
	// The servers' weight route kills the trainer once both have taken version 7, the first RL
	// update (checkpoint.every=2: the run's last checkpoint is then version 6), before either
	// answers it.
	const ahead = 7
	var trainer atomic.Pointer[os.Process]
	var took atomic.Int32
	killed := make(chan struct{})
	var servers []*serve.Server
	var urls []string
	for range 2 {
		srv, err := serve.Open(ck, serve.Options{APIKey: "k", Slots: 8})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/agentrl/v1/weights" || r.URL.Query().Get("version") != strconv.Itoa(ahead) {
				srv.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, r)
			if rec.Code != http.StatusOK {
				t.Errorf("version %d: %d %s", ahead, rec.Code, rec.Body)
			}
			if took.Add(1) == 2 {
				// killed is closed first: the trainer's exit, which the test may see at once,
				// must find it closed.
				close(killed)
				trainer.Load().Kill()
			}
			select {
			case <-killed: // the trainer never hears back
			case <-time.After(time.Minute):
				t.Error("the other server never took the version")
			}
		}))
		t.Cleanup(func() { hs.Close(); srv.Close() })
		servers, urls = append(servers, srv), append(urls, hs.URL)
	}
	runs := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRemoteTrainProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AGENTRL_TEST_REMOTE_RUNS="+runs, "AGENTRL_TEST_REMOTE_SERVERS="+strings.Join(urls, ","))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	trainer.Store(cmd.Process)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-killed:
		<-exited
	case err := <-exited:
		select {
		case <-killed: // the kill and the exit were both ready; select took the exit
		default:
			t.Fatalf("the trainer exited before it published version %d: %v", ahead, err)
		}
	}
	killedEpoch := servers[0].Epoch()
	for i, srv := range servers {
		if srv.Version() != ahead || srv.Epoch() != killedEpoch || killedEpoch == 0 {
			t.Fatalf("server %d serves version %d of epoch %d, want %d of the killed trainer's epoch %d", i, srv.Version(), srv.Epoch(), ahead, killedEpoch)
		}
	}

	dir := filepath.Join(runs, "tiny")
	run, err := Resume(dir, Options{Envs: all.Builtins()})
	if err != nil {
		t.Fatal(err)
	}
	if run.version >= ahead {
		t.Fatalf("resumed at version %d: the servers are not ahead of the run", run.version)
	}
	t.Logf("servers at version %d of epoch %d; the run resumes at version %d", ahead, killedEpoch, run.version)
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	sameRun(t, ref, dir)
	for i, srv := range servers {
		if srv.Version() != 10 || srv.Epoch() <= killedEpoch {
			t.Fatalf("server %d serves version %d of epoch %d, want 10 of an epoch after %d", i, srv.Version(), srv.Epoch(), killedEpoch)
		}
	}
}
