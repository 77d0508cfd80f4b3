package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/dataset"
	"github.com/agentrl/agentrl/env/mcp/mcptest"
	"github.com/agentrl/agentrl/env/remote"
	"github.com/agentrl/agentrl/env/remote/remotetest"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// countingServer serves h, counting the calls by route.
type countingServer struct {
	*httptest.Server
	resets, steps, closes atomic.Int64
}

func startCounting(t *testing.T, h http.Handler) *countingServer {
	t.Helper()
	cs := &countingServer{}
	cs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/reset":
			cs.resets.Add(1)
		case "/step":
			cs.steps.Add(1)
		case "/close":
			cs.closes.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(cs.Close)
	return cs
}

// startCalcServer serves calc (with its calculator tool) over the remote protocol, its spec's
// New wrapped by wrap when not nil; its /metadata lists the calculator, as a server whose
// episodes offer tools says.
func startCalcServer(t *testing.T, wrap func(env.Env) env.Env) *countingServer {
	t.Helper()
	spec, err := testEnvs().Lookup("calc")
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		orig := spec.New
		spec.New = func() (env.Env, error) {
			e, err := orig()
			if err != nil {
				return nil, err
			}
			return wrap(e), nil
		}
	}
	srv, err := remote.NewServer(spec, remote.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	calc, err := tool.NewCalculator(tool.CalcLimits{})
	if err != nil {
		t.Fatal(err)
	}
	return startCounting(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metadata" {
			srv.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, r)
		var md remote.Metadata
		if err := json.Unmarshal(rec.Body.Bytes(), &md); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		md.Tools = []remote.ToolInfo{{Name: calc.Name(), Description: calc.Description(), Parameters: calc.Schema()}}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(md)
	}))
}

// arithTasks writes n arithmetic tasks whose demo field is the calculator call that solves them.
func arithTasks(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		a, c, d := 100+37*i, 13+i, 7*i+1
		expr := fmt.Sprintf("%d + %d - %d", a, c, d)
		call := fmt.Sprintf(`<tool_call>{"name": "calculator", "arguments": {"expression": %q}}</tool_call>`, expr)
		fmt.Fprintf(&b, "{\"id\": \"t%d\", \"q\": \"What is %s?\", \"a\": \"%d\", \"call\": %q}\n", i, expr, a+c-d, call)
	}
	path := filepath.Join(t.TempDir(), "arith.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// remoteToolsEntries are a run's environments: the dataset data whose tools are toolsFrom's, and
// calcsrv served at url. max_turns 2 keeps its episodes within the Python reference server's
// own turn limit (its third step is taken as its episode's answer, ending the session).
func remoteToolsEntries(url, data, toolsFrom string) []string {
	return []string{
		fmt.Sprintf("phases.sft.envs=[{name: arithtasks, weight: 1, tasks: {path: %q, prompt: q, answer: a, id: id, demo: call, "+
			"system: \"Use the calculator, then reply with the number.\", split: {held_out: 0.25}, verifier: rational, tools_from: %s, max_turns: 2}}, "+
			"{name: calcsrv, weight: 0.001, remote: {url: %q, unreachable: 1s, timeout: 2s}}]", data, toolsFrom, url),
		"phases.rl.envs=[{name: arithtasks, weight: 1}]",
	}
}

type scripted []string

func (s *scripted) Act(context.Context, string) (string, error) {
	if len(*s) == 0 {
		return "", fmt.Errorf("the script is over")
	}
	a := (*s)[0]
	*s = (*s)[1:]
	return a, nil
}

// A dataset whose tools are a remote environment's (tasks.tools_from): each episode opens a
// session on the Python reference server (examples/envs/arith), its tool calls are answered by
// the server's calculator, the
// final answer is graded by the dataset's verifier (never sent to the server), and the session is
// closed at the end.
func TestDatasetRemoteTools(t *testing.T) {
	target, err := url.Parse(remotetest.StartArith(t))
	if err != nil {
		t.Fatal(err)
	}
	cs := startCounting(t, httputil.NewSingleHostReverseProxy(target))
	data := arithTasks(t, 8)
	cfg, err := config.Load(testEnvs(), "", "", append([]string{"runs_dir=" + t.TempDir()}, remoteToolsEntries(cs.URL, data, "calcsrv")...))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	user, err := OpenUserEnvs(ctx, testEnvs(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	spec, err := user.Envs.Lookup("arithtasks")
	if err != nil {
		t.Fatal(err)
	}
	play := func(seed int64, agent env.Agent) (env.Episode, error) {
		e, err := spec.New()
		if err != nil {
			t.Fatal(err)
		}
		defer e.(env.Closer).Close()
		return env.Play(ctx, e, agent, seed, 8)
	}
	for seed := range int64(8) {
		ep, err := play(seed, spec.Expert(seed, 0, rand.New(rand.NewPCG(1, 2))))
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !ep.Success || ep.Reward != 1 || len(ep.Steps) != 2 || !strings.Contains(ep.Start.System, "calculator(expression): Evaluates") {
			t.Fatalf("seed %d: the expert's episode: %+v", seed, ep)
		}
		tr := ep.Steps[0].Transition
		if tr.Role != traj.RoleTool || len(tr.ToolCalls) != 1 || tr.ToolCalls[0].Result == "" ||
			!strings.Contains(tr.Observation, tr.ToolCalls[0].Result) || tr.Reward != 0 {
			t.Fatalf("seed %d: the tool turn: %+v", seed, tr)
		}
	}
	// A wrong answer after a tool call is graded 0 by the verifier, not an error.
	ep, err := play(3, &scripted{`<tool_call>{"name": "calculator", "arguments": {"expression": "1 + 1"}}</tool_call>`, "2"})
	if err != nil || ep.Success || ep.Reward != 0 || !strings.Contains(ep.Steps[0].Transition.Observation, "2") {
		t.Fatalf("a wrong answer: %+v %v", ep, err)
	}
	// 9 episodes: a reset and a close each, a step for each tool turn and none for the answers.
	if r, s, c := cs.resets.Load(), cs.steps.Load(), cs.closes.Load(); r != 9 || s != 9 || c != 9 {
		t.Fatalf("the server saw %d resets, %d steps and %d closes, want 9 each", r, s, c)
	}
	// Closed before its answer (a cancelled episode): the session is closed.
	e, _ := spec.New()
	if _, err := e.Reset(ctx, 1); err != nil {
		t.Fatal(err)
	}
	e.(env.Closer).Close()
	if r, c := cs.resets.Load(), cs.closes.Load(); r != 10 || c != 10 {
		t.Fatalf("%d resets and %d closes: a session was left open", r, c)
	}
	// Cancelled in its middle: the step fails and the session is closed at once.
	cctx, cancel := context.WithCancel(ctx)
	e, _ = spec.New()
	if _, err := e.Reset(cctx, 2); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := e.Step(cctx, `<tool_call>{"name": "calculator", "arguments": {"expression": "1 + 1"}}</tool_call>`); err == nil {
		t.Fatal("a step of a cancelled episode succeeded")
	}
	if r, c := cs.resets.Load(), cs.closes.Load(); r != 11 || c != 11 {
		t.Fatalf("%d resets and %d closes: the cancelled episode's session was left open", r, c)
	}
	e.(env.Closer).Close()
	if got := user.Describe(); !strings.Contains(strings.Join(got, "\n"), "tools from calcsrv") {
		t.Fatalf("the description does not name the tool provider: %q", got)
	}
}

// The errors of a dataset with a remote environment's tools: an unknown name, built-in or MCP
// tools beside tools_from (refused by the configuration); a tool not in the server's metadata,
// a server that stops answering, and a session that ends before the final answer (each fails
// the episode, which the run records as env_error).
func TestDatasetRemoteToolsErrors(t *testing.T) {
	cs := startCalcServer(t, nil)
	data := arithTasks(t, 4)
	_, err := config.Load(testEnvs(), "", "", append([]string{"runs_dir=" + t.TempDir()}, remoteToolsEntries(cs.URL, data, "nosuch")...))
	if err == nil || !strings.Contains(err.Error(), `tasks.tools_from "nosuch" is not a remote environment of this run (remote ones: [calcsrv])`) {
		t.Fatalf("an unknown tools_from: %v", err)
	}
	_, err = config.Load(testEnvs(), "", "", []string{"runs_dir=" + t.TempDir(), fmt.Sprintf(
		"phases.rl.envs=[{name: a, weight: 1, tasks: {path: %q, prompt: q, answer: a, split: {held_out: 0.5}, verifier: exact, tools: [calculator], tools_from: b}}]", data)})
	if err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("tools and tools_from: %v", err)
	}

	c, err := config.Load(testEnvs(), "", "", append([]string{"runs_dir=" + t.TempDir()}, remoteToolsEntries(cs.URL, data, "calcsrv")...))
	if err != nil {
		t.Fatal(err)
	}
	yml, err := config.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	block := strings.Replace(mcptest.StdioBlock(t, t.TempDir()), "test-mcp-echo:", "arithtasks:", 1)
	path := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(path, append(yml, block...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(testEnvs(), "", path, nil); err == nil || !strings.Contains(err.Error(), "mcp.envs.arithtasks: the dataset's tools are remote environment calcsrv's") {
		t.Fatalf("MCP tools and tools_from: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func(url string) env.Spec {
		cfg, err := config.Load(testEnvs(), "", "", append([]string{"runs_dir=" + t.TempDir()}, remoteToolsEntries(url, data, "calcsrv")...))
		if err != nil {
			t.Fatal(err)
		}
		user, err := OpenUserEnvs(ctx, testEnvs(), cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(user.Close)
		spec, err := user.Envs.Lookup("arithtasks")
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	episode := func(spec env.Spec, agent env.Agent) error {
		e, err := spec.New()
		if err != nil {
			t.Fatal(err)
		}
		defer e.(env.Closer).Close()
		_, err = env.Play(ctx, e, agent, 0, 8)
		return err
	}
	expertEpisode := func(spec env.Spec) error { return episode(spec, spec.Expert(0, 0, rand.New(rand.NewPCG(1, 2)))) }

	// The Go calc server answers the calculator; a tool not in its metadata fails the episode.
	spec := open(cs.URL)
	if err := expertEpisode(spec); err != nil {
		t.Fatalf("the expert on the Go calc server: %v", err)
	}
	err = episode(spec, &scripted{`<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>`, "1"})
	if err == nil || !strings.Contains(err.Error(), `tool "search" is not among the tools`) {
		t.Fatalf("an unknown tool: %v", err)
	}
	if r, c := cs.resets.Load(), cs.closes.Load(); r != 2 || c != 2 {
		t.Fatalf("%d resets and %d closes: a session was left open", r, c)
	}

	// The server goes down: the episode fails after the unreachable window, never graded 0.
	down := open(cs.URL)
	cs.Close()
	if err := expertEpisode(down); err == nil || !strings.Contains(err.Error(), "no server of the environment answers") {
		t.Fatalf("a server that is down: %v", err)
	}

	// A session that ends at its first step, before the final answer.
	early := startCalcServer(t, func(e env.Env) env.Env { return doneEarly{e} })
	if err := expertEpisode(open(early.URL)); err == nil || !strings.Contains(err.Error(), dataset.ErrToolSessionDone.Error()) {
		t.Fatalf("a session done early: %v", err)
	}
	if r, c := early.resets.Load(), early.closes.Load(); r != 1 || c != 1 {
		t.Fatalf("%d resets and %d closes: the failed episode's session was left open", r, c)
	}
}

// doneEarly ends its episode at every step.
type doneEarly struct{ env.Env }

func (d doneEarly) Step(ctx context.Context, action string) (env.Transition, error) {
	tr, err := d.Env.Step(ctx, action)
	tr.Done = true
	return tr, err
}

func (d doneEarly) Close() error {
	if c, ok := d.Env.(env.Closer); ok {
		return c.Close()
	}
	return nil
}

// A run trains on a dataset whose tools are the Python reference server's: the supervised phase
// on the dataset's demonstrations (the demo field's calculator call, then the answer), RL steps
// and evaluation whose tool turns the server's sessions answer; no episode fails.
func TestDatasetRemoteToolsRun(t *testing.T) {
	entries := remoteToolsEntries(remotetest.StartArith(t), arithTasks(t, 40), "calcsrv")
	// The default unreachable window: calcsrv's tokenizer corpus plays its episodes within it.
	entries[0] = strings.Replace(entries[0], "unreachable: 1s, ", "", 1)
	cfg := tinyConfig(t, t.TempDir(), append(entries,
		"phases.rl.steps=2", "eval.tasks=4", "eval.samples=1")...)
	var out lockedBuilder
	run, err := NewRun(cfg, Options{Envs: testEnvs(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "graded rational, tools from calcsrv") {
		t.Fatalf("the log does not describe the dataset's tools:\n%s", out.String())
	}
	episodes, answered := 0, 0
	for _, tr := range readTrajs(t, run.Dir) {
		if tr.Env != "arithtasks" {
			continue
		}
		episodes++
		if tr.Status.Failed() {
			t.Errorf("episode %s failed: %s", tr.ID, tr.Error)
		}
		for _, turn := range tr.Turns {
			for _, c := range turn.ToolCalls {
				if c.Name == "calculator" && c.Result != "" {
					answered++
				}
			}
		}
	}
	if episodes < 2*4 || answered == 0 {
		t.Fatalf("%d episodes of the dataset, %d calculator calls answered by the server", episodes, answered)
	}
	if strings.Contains(out.String(), "failed calls") {
		t.Fatalf("calls to the server failed:\n%s", out.String())
	}
}
