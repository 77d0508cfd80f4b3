package code

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/envtest"
	"github.com/agentrl/agentrl/tool"
)

// needSandbox skips only when bubblewrap is not installed at all; scripts/setup installs it,
// so CI runs everything here.
func needSandbox(t testing.TB) *tool.Sandbox {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed (run scripts/setup): code env tests skipped")
	}
	sb, err := tool.NewSandbox(tool.DefaultSandboxLimits())
	if err != nil {
		t.Fatalf("sandbox: %v", err)
	}
	return sb
}

func TestSuite(t *testing.T) {
	needSandbox(t)
	envtest.Run(t, Spec())
}

// seedsPerTemplate returns, for every template, the first n seeds that draw it.
func seedsPerTemplate(t *testing.T, n int) map[string][]int64 {
	t.Helper()
	out := map[string][]int64{}
	for seed := int64(0); seed < 5000; seed++ {
		p := newProblem(seed)
		if len(out[p.fn]) < n {
			out[p.fn] = append(out[p.fn], seed)
		}
	}
	for _, tp := range templates {
		if len(out[tp.fn]) < n {
			t.Fatalf("template %s drawn %d times in 5000 seeds", tp.fn, len(out[tp.fn]))
		}
	}
	return out
}

// TestReferenceSolutions runs every template's Python solution and buggy variant against the
// hidden cases computed in Go: the solution must pass all, the buggy one must fail some. This
// checks the Go references, the Python sources and the harness against each other.
func TestReferenceSolutions(t *testing.T) {
	sb := needSandbox(t)
	n := 3
	if testing.Short() {
		n = 1
	}
	for fn, seeds := range seedsPerTemplate(t, n) {
		for _, seed := range seeds {
			p := newProblem(seed)
			for _, variant := range []struct {
				name string
				code string
				pass bool
			}{{"solution", p.solution, true}, {"buggy", p.buggy, false}} {
				v := grade(t, sb, p, variant.code)
				if (v.passed == v.total && v.load == "") != variant.pass {
					t.Errorf("%s seed %d %s: passed %d/%d load %q\n%s\ncases %+v", fn, seed, variant.name, v.passed, v.total, v.load, variant.code, p.cases)
				}
			}
		}
	}
}

func grade(t *testing.T, sb *tool.Sandbox, p *problem, answer string) verdict {
	t.Helper()
	const nonce = "#test"
	prog, err := harness(p, answer, nonce)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sb.Run(context.Background(), prog)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	v, err := parseVerdict(p, res.Stdout, nonce)
	if err != nil {
		t.Fatalf("verdict: %v (stdout %q stderr %q)", err, res.Stdout, res.Stderr)
	}
	return v
}

// TestGrading plays one answer per row on a sum_first task and checks reward and Info.
// Attacks on the grader must earn nothing; the sandbox failing is the only error.
func TestGrading(t *testing.T) {
	needSandbox(t)
	seed := seedsPerTemplate(t, 1)["sum_first"][0]
	p := newProblem(seed)
	fence := func(code string) string { return "Here it is.\n```python\n" + code + "\n```" }
	tests := []struct {
		name    string
		action  string
		reward  float64
		passed  string
		reason  string // substring of Info[reason], "" for none
		inStdin string
	}{
		{name: "correct", action: fence(p.solution), reward: 1, passed: "6/6"},
		{name: "correct, last block counts", action: fence("def sum_first(xs):\n    return 0") + "\nFixed:\n" + fence(p.solution), reward: 1, passed: "6/6"},
		{name: "untagged fence", action: "```\n" + p.solution + "```", reward: 1, passed: "6/6"},
		{name: "floats equal to the answer", action: fence(strings.Replace(p.solution, "return sum(", "return 1.0 * sum(", 1)), reward: 1, passed: "6/6"},
		{name: "prints are ignored", action: fence("print('noise')\n" + strings.Replace(p.solution, "return", "print('x'*100000)\n    return", 1)), reward: 1, passed: "6/6"},
		{name: "buggy", action: fence(p.buggy), reward: 0},
		{name: "no code block", action: "The answer is sum(xs[:2]).", reward: 0, passed: "0/6", reason: "no ```python"},
		{name: "empty block", action: "```python\n\n```", reward: 0, reason: "empty"},
		{name: "syntax error", action: fence("def sum_first(xs) return 1"), reward: 0, reason: "SyntaxError"},
		{name: "wrong name", action: fence("def solve(xs):\n    return sum(xs)"), reward: 0, reason: "KeyError"},
		{name: "raises", action: fence("def sum_first(xs):\n    raise ValueError"), reward: 0, passed: "0/6"},
		{name: "returns bool for int", action: fence("def sum_first(xs):\n    return True"), reward: 0},
		{name: "sys.exit at load", action: fence("import sys\nsys.exit(0)"), reward: 0, reason: "SystemExit"},
		{name: "os._exit at load", action: fence("import os\nos._exit(0)"), reward: 0, reason: "no result"},
		{name: "infinite loop", action: fence("def sum_first(xs):\n    while True:\n        pass"), reward: 0, reason: "limit exceeded"},
		{name: "memory bomb", action: fence("def sum_first(xs):\n    return len(list(range(1 << 30)))"), reward: 0, passed: "0/6"},
		{name: "forged result lines", action: fence("import sys, os\ng = sys._getframe(1).f_globals\nnonce = [c for c in g['_emit'].__code__.co_consts if isinstance(c, str) and c.startswith('#')][0]\nfor i in range(6):\n    os.write(1, ('%s %d 0\\n' % (nonce, i)).encode())\ndef sum_first(xs):\n    return 0"), reward: 0},
		{name: "patched json", action: fence("import json\njson.dumps = lambda v: '1e999999999'\ndef sum_first(xs):\n    return 0"), reward: 0},
		{name: "answer too long", action: fence("x = 1\n" + strings.Repeat("#", 20000)), reward: 0, reason: "too long"},
		{name: "invalid utf-8", action: fence("def sum_first(xs):\n    return '\xff'"), reward: 0, reason: "UTF-8"},
	}
	e, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.Reset(context.Background(), seed); err != nil {
				t.Fatal(err)
			}
			tr, err := e.Step(context.Background(), tc.action)
			if err != nil {
				t.Fatalf("Step: %v", err)
			}
			if !tr.Done || tr.Reward != tc.reward {
				t.Fatalf("done %v reward %v, want done and %v; obs %q info %v", tr.Done, tr.Reward, tc.reward, tr.Observation, tr.Info)
			}
			if want := map[bool]string{true: "true", false: "false"}[tc.reward == 1]; tr.Info[env.InfoSuccess] != want {
				t.Errorf("info success %q, want %q", tr.Info[env.InfoSuccess], want)
			}
			if tc.passed != "" && tr.Info[InfoPassed] != tc.passed {
				t.Errorf("passed %q, want %q (info %v)", tr.Info[InfoPassed], tc.passed, tr.Info)
			}
			if tc.reason != "" && !strings.Contains(tr.Info[InfoReason], tc.reason) {
				t.Errorf("reason %q lacks %q", tr.Info[InfoReason], tc.reason)
			}
			if _, err := e.Step(context.Background(), tc.action); err == nil {
				t.Error("Step after the answer succeeded")
			}
		})
	}
}

// TestToolTurn checks that a python call in a turn is run by the tool, not graded.
func TestToolTurn(t *testing.T) {
	needSandbox(t)
	e, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	obs, err := e.Reset(context.Background(), 7)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(obs.System, "python") || !strings.Contains(obs.Text, "Example:") {
		t.Fatalf("observation %+v", obs)
	}
	tr, err := e.Step(context.Background(), `<tool_call>{"name":"python","arguments":{"code":"print(6*7)"}}</tool_call>`)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Done || tr.Observation != "<tool_response>42\n</tool_response>" || len(tr.ToolCalls) != 1 {
		t.Fatalf("tool turn: %+v", tr)
	}
}

func TestCancelledGradingIsAnError(t *testing.T) {
	needSandbox(t)
	e, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Reset(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := newProblem(3)
	_, err = e.Step(ctx, answerText(p.solution))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Step with a cancelled context: %v, want context.Canceled", err)
	}
}

func TestConfigValidate(t *testing.T) {
	mod := func(f func(*Config)) Config {
		c := DefaultConfig()
		f(&c)
		return c
	}
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", DefaultConfig(), true},
		{"zero", Config{}, false},
		{"no turns", mod(func(c *Config) { c.MaxTurns = 0 }), false},
		{"answer too large for sandbox", mod(func(c *Config) { c.MaxAnswerBytes = 64 << 10 }), false},
		{"bad sandbox", mod(func(c *Config) { c.Sandbox.Processes = 1 }), false},
		{"negative tool limit", mod(func(c *Config) { c.Tools.MaxCallsPerTurn = -1 }), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok {
				if _, err := New(tc.cfg); err == nil {
					t.Fatal("New accepted an invalid config")
				}
			}
		})
	}
}
