package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/env/remote"
	"github.com/agentrl/agentrl/traj"
)

// echoEnv is a one-step environment of these tests (see testEnvs).
type echoEnv struct{ word string }

func (e *echoEnv) Reset(_ context.Context, seed int64) (env.Observation, error) {
	e.word = fmt.Sprintf("w%d", seed)
	return env.Observation{Text: "Say " + e.word}, nil
}

func (e *echoEnv) Step(_ context.Context, action string) (env.Transition, error) {
	r := 0.0
	if action == e.word {
		r = 1
	}
	return env.Transition{Observation: "ok", Role: traj.RoleEnv, Reward: r, Done: true}, nil
}

type echoAgent struct{ word string }

func (a echoAgent) Act(context.Context, string) (string, error) { return a.word, nil }

// testEnvs is the built-in environments and clitest-echo.
func testEnvs() *env.Registry {
	r := all.Builtins()
	if err := r.Register(env.Spec{
		Name: "clitest-echo", Description: "Repeat the word (cli tests).",
		Train: env.SeedRange{Lo: 0, Hi: 10}, Heldout: env.SeedRange{Lo: 10, Hi: 12},
		New: func() (env.Env, error) { return &echoEnv{}, nil },
		Expert: func(seed int64, _ float64, _ *rand.Rand) env.Agent {
			return echoAgent{fmt.Sprintf("w%d", seed)}
		},
		Corpus: func(n int) []string { return make([]string, n) },
	}); err != nil {
		panic(err)
	}
	return r
}

// syncBuffer is a bytes.Buffer safe to read while a command writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string { b.mu.Lock(); defer b.mu.Unlock(); return b.buf.String() }

func TestEnvList(t *testing.T) {
	envs := testEnvs()
	var out bytes.Buffer
	if err := mainWith(context.Background(), []string{"env", "list"}, &out, &out, envs); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`clitest-echo\s+\[0, 10\)\s+\[10, 12\)\s+Repeat the word`).MatchString(out.String()) {
		t.Fatalf("table lacks the test env:\n%s", out.String())
	}
	for _, name := range envs.Names() {
		if !strings.Contains(out.String(), name) {
			t.Errorf("table lacks %s", name)
		}
	}
	out.Reset()
	if err := mainWith(context.Background(), []string{"env", "list", "--json"}, &out, &out, envs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(envs.Names()) {
		t.Fatalf("%d JSON lines for %d environments", len(lines), len(envs.Names()))
	}
	found := false
	for _, l := range lines {
		var md remote.Metadata
		if err := json.Unmarshal([]byte(l), &md); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		found = found || (md.Name == "clitest-echo" && md.Heldout == remote.Range{Lo: 10, Hi: 12})
	}
	if !found {
		t.Fatalf("JSON lacks the test env:\n%s", out.String())
	}
}

// servingURL waits for env serve, writing to out, to say where it serves name, and returns that
// address; it fails the test if the command ends (done) first.
func servingURL(t *testing.T, name string, out *syncBuffer, done <-chan error) string {
	t.Helper()
	addr := regexp.MustCompile(`serving ` + regexp.QuoteMeta(name) + ` on (http://127\.0\.0\.1:\d+)`)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("serve ended early: %v\n%s", err, out.String())
		case <-time.After(wait):
		}
		if m := addr.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
	}
}

func TestEnvServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- mainWith(ctx, []string{"env", "serve", "--env", "clitest-echo", "--addr", "127.0.0.1:0", "--idle-timeout", "1m"}, &out, &out, testEnvs())
	}()
	url := servingURL(t, "clitest-echo", &out, done)
	resp, err := http.Get(url + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
	spec, err := remote.Spec(url, remote.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := spec.New()
	if err != nil {
		t.Fatal(err)
	}
	ep, err := env.Play(ctx, e, echoAgent{"w3"}, 3, 4)
	if err != nil || !ep.Done || ep.Reward != 1 {
		t.Fatalf("episode %+v, %v", ep, err)
	}
	e.(env.Closer).Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve after cancel: %v", err)
	}
	if !strings.Contains(out.String(), "stopped serving clitest-echo") {
		t.Fatalf("output: %s", out.String())
	}
}

func TestEnvServeRejects(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"env", "serve", "--env", "nope"}, `unknown environment "nope" (known: calc, calc-notool, clitest-echo, code, ledger, maze, parts, search)`},
		{[]string{"env", "serve", "--env", "clitest-echo", "--addr", "0.0.0.0:0"}, "refusing"},
		{[]string{"env", "serve", "--env", "clitest-echo", "--addr", ":0"}, "refusing"},
		{[]string{"env", "serve", "--env", "clitest-echo", "--max-sessions", "0"}, "must be positive"},
		{[]string{"env", "serve"}, "--env"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args[2:], " "), func(t *testing.T) {
			var out bytes.Buffer
			err := mainWith(context.Background(), c.args, &out, &out, testEnvs())
			if err == nil || !strings.Contains(err.Error()+out.String(), c.want) {
				t.Fatalf("err %v, output %q; want %q", err, out.String(), c.want)
			}
		})
	}
}
