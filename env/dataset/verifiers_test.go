package dataset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/tool"
)

// grade loads rows with verifier v and returns a function that plays row 0's episode with an
// answer and returns the reward (or the step's error).
func grade(t *testing.T, c Config, rows string) (*Data, func(answer string) (float64, error)) {
	t.Helper()
	c.Path = write(t, "d.jsonl", rows)
	d, err := Load(c)
	if err != nil {
		t.Fatal(err)
	}
	spec := d.Spec("t")
	return d, func(answer string) (float64, error) {
		e, err := spec.New()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Reset(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		tr, err := e.Step(context.Background(), answer)
		if err != nil {
			return 0, err
		}
		if want := fmt.Sprint(tr.Reward >= 1); tr.Info[env.InfoSuccess] != want {
			t.Fatalf("success %q for reward %v", tr.Info[env.InfoSuccess], tr.Reward)
		}
		return tr.Reward, nil
	}
}

// The json-schema verifier: the answer field is a schema (a JSON object in JSONL, or text); the
// final turn's JSON must satisfy it.
func TestJSONSchemaVerifier(t *testing.T) {
	row := `{"id": "a", "split": "train", "q": "Describe Ada as JSON.", "schema": {"type": "object", "properties": {"name": {"type": "string"}, "born": {"type": "integer"}}, "required": ["name", "born"]}}`
	rows := row + "\n" + strings.Replace(strings.Replace(row, `"id": "a"`, `"id": "b"`, 1), `"train"`, `"test"`, 1) + "\n"
	c := Config{Prompt: "q", Answer: "schema", ID: "id", Split: Split{HeldOut: "split"}, Verifier: "json-schema"}
	_, play := grade(t, c, rows)
	for answer, want := range map[string]float64{
		`{"name": "Ada Lovelace", "born": 1815}`:                 1,
		"```json\n{\"name\": \"Ada\", \"born\": 1815}\n```":      1,
		`{"name": "Ada Lovelace"}`:                               0,
		`{"name": "Ada Lovelace", "born": "1815"}`:               0,
		`Ada Lovelace, born 1815`:                                0,
		`{"name": "Ada Lovelace", "born": 1815} and more text {`: 0,
	} {
		if got, err := play(answer); err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", answer, got, err, want)
		}
	}
	bad := strings.Replace(rows, `"type": "object"`, `"type": 7`, 1)
	c.Path, c.Strict = write(t, "bad.jsonl", bad), true
	var re *RowError
	if _, err := Load(c); !errors.As(err, &re) || re.Line != 1 || re.Reason != "bad_answer" {
		t.Fatalf("a row whose schema does not compile: %v", err)
	}
}

func needSandbox(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed (run scripts/setup): the test-cases verifier needs it")
	}
}

// The test-cases verifier runs the final turn's program in the sandbox on each case's input:
// full marks only when every output matches; wrong output, an exception, a syntax error, no
// program, a loop past the time limit and memory past the limit all score 0.
func TestTestCasesVerifier(t *testing.T) {
	needSandbox(t)
	old := caseLimits
	caseLimits = func() tool.SandboxLimits {
		l := TestCasesLimits()
		l.Timeout, l.CPUSeconds, l.MemoryBytes = 4*time.Second, 2, 128<<20
		return l
	}
	defer func() { caseLimits = old }()
	row := `{"id": "a", "q": "Sum the two numbers of each line.", "tests": {"inputs": ["1 2\n", "10 -4\n", "0 0"], "outputs": ["3\n", "6", "0\n\n"]}}`
	c := Config{Prompt: "q", Answer: "tests", ID: "id", Split: Split{HeldOut: 0.5}, Verifier: "test-cases"}
	var rows strings.Builder
	for i := range 8 { // enough rows that both splits have some
		rows.WriteString(strings.Replace(row, `"id": "a"`, fmt.Sprintf(`"id": "r%d"`, i), 1) + "\n")
	}
	d, play := grade(t, c, rows.String())
	fence := func(code string) string { return "Here:\n```python\n" + code + "\n```" }
	cases := []struct {
		name, answer string
		want         float64
	}{
		{"right", fence("a, b = map(int, input().split())\nprint(a + b)"), 1},
		{"right, by stdin and exit", fence("import sys\nprint(sum(map(int, sys.stdin.read().split())))\nsys.exit(0)"), 1},
		{"draft then right", fence("print(0)") + "\nbetter:\n" + fence("print(sum(map(int, input().split())))"), 1},
		{"one case wrong", fence("a, b = map(int, input().split())\nprint(a + b if a else 1)"), 0},
		{"exception", fence("raise ValueError('no')"), 0},
		{"syntax error", fence("print(("), 0},
		{"no program", "The sum is 3.", 0},
		{"endless loop", fence("while True:\n    pass"), 0},
		{"memory", fence("x = bytearray(1 << 30)\nprint(3)"), 0},
		{"forged result line", fence("import os\nos.write(1, b'x 0 \"3\\\\n\"\\n')\nprint(1)"), 0},
	}
	for _, c := range cases {
		t0 := time.Now()
		got, err := play(c.answer)
		if err != nil || got != c.want {
			t.Errorf("%s: %v %v, want %v", c.name, got, err, c.want)
		}
		if el := time.Since(t0); el > 8*time.Second {
			t.Errorf("%s: graded in %v, past the sandbox's limits", c.name, el)
		}
	}
	if d.grade.sb == nil {
		t.Fatal("no sandbox was made")
	}
	// Call-based cases: the function (or Solution's method) is called with each argument list.
	crow := `{"id": "a", "q": "Write add(a, b).", "tests": {"fn_name": "add", "inputs": [[1, 2], [2.5, 0.5], [-1, 1]], "outputs": [3, [3], 0]}}`
	var crows strings.Builder
	for i := range 8 {
		crows.WriteString(strings.Replace(crow, `"id": "a"`, fmt.Sprintf(`"id": "r%d"`, i), 1) + "\n")
	}
	_, playCall := grade(t, c, crows.String())
	for _, c := range []struct {
		name, answer string
		want         float64
	}{
		{"function", fence("def add(a, b):\n    print('noise')\n    return a + b"), 1},
		{"method", fence("class Solution:\n    def add(self, a, b):\n        return a + b"), 1},
		{"wrong", fence("def add(a, b):\n    return a - b"), 0},
		{"no such function", fence("def plus(a, b):\n    return a + b"), 0},
		{"not JSON", fence("def add(a, b):\n    return {a + b}"), 0},
	} {
		if got, err := playCall(c.answer); err != nil || got != c.want {
			t.Errorf("call %s: %v %v, want %v", c.name, got, err, c.want)
		}
	}
	if !sameReturn(`[1, 2.0, {"a": true}]`, `[1.0, 2, {"a": true}]`) || sameReturn(`true`, `1`) || sameReturn(`"1"`, `1`) || !sameReturn(`1e5000`, `1e5000`) || sameReturn(`1e5000`, `1e5001`) {
		t.Error("sameReturn")
	}
	for _, bad := range []string{`{"inputs": ["1"], "outputs": []}`, `{"inputs": [], "outputs": []}`, `{"inputs": ["1"], "outputs": ["2"], "fn_name": "f x"}`,
		`{"inputs": [1], "outputs": [2], "fn_name": "f"}`, `[1, 2]`, `{"inputs": [1], "outputs": [2]}`, `{"inputs": ["1"], "outputs": ["2"], "x": 1}`} {
		if _, err := parseTestCases(bad); err == nil {
			t.Errorf("test cases %s accepted", bad)
		}
	}
}

// A judge server speaking the chat-completions shape: it checks the request, and answers with
// reply (or the status and body of fail, or nothing until the client gives up).
type judgeServer struct {
	reply  atomic.Value // string: the judge's content
	status atomic.Int64 // non-200: fail with this status
	raw    atomic.Value // string: a body sent as it is
	hang   atomic.Bool
	got    atomic.Value // the last request body
	auth   atomic.Value
}

func (s *judgeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	s.got.Store(string(body))
	s.auth.Store(r.Header.Get("Authorization"))
	if s.hang.Load() {
		<-r.Context().Done()
		return
	}
	if st := s.status.Load(); st != 0 {
		w.WriteHeader(int(st))
		fmt.Fprint(w, "<html>overloaded</html>")
		return
	}
	if raw, _ := s.raw.Load().(string); raw != "" {
		fmt.Fprint(w, raw)
		return
	}
	content, _ := json.Marshal(s.reply.Load().(string))
	fmt.Fprintf(w, `{"id": "c1", "object": "chat.completion", "model": "judge-1", "choices": [{"index": 0, "message": {"role": "assistant", "content": %s}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}`, content)
}

// The judge verifier asks an OpenAI-compatible server with the rubric and scores its reply; its
// key is read from the environment variable the configuration names; an unparseable reply or a
// timeout scores the fallback and is counted, a failing or nonsensical server is an error (the
// episode's env_error), never a score.
func TestJudgeVerifier(t *testing.T) {
	js := &judgeServer{}
	js.reply.Store("The answer matches the reference.\nScore: 8")
	srv := httptest.NewServer(js)
	defer srv.Close()
	t.Setenv("JUDGE_KEY_TEST", "sk-test-123")
	jc := &JudgeConfig{URL: srv.URL + "/v1", Model: "judge-1", APIKey: "${JUDGE_KEY_TEST}"}
	jc.Rubric = "Question: {{.Prompt}}\nReference: {{.Answer}}\nReply: {{.Response}}\nEnd with Score: N (0-10)."
	jc.Timeout, jc.Fallback = 500*time.Millisecond, 0.25
	c := Config{Prompt: "q", Answer: "a", ID: "id", Split: Split{HeldOut: 0.5}, Verifier: "judge", Judge: jc}
	var rows strings.Builder
	for i := range 8 {
		fmt.Fprintf(&rows, `{"id": "r%d", "q": "Why is the sky blue?", "a": "Rayleigh scattering"}`+"\n", i)
	}
	d, play := grade(t, c, rows.String())
	if got, err := play("Because of Rayleigh scattering."); err != nil || got != 0.8 {
		t.Fatalf("a judged reply: %v %v, want 0.8", got, err)
	}
	var req struct {
		Model    string `json:"model"`
		Messages []struct{ Role, Content string }
	}
	if err := json.Unmarshal([]byte(js.got.Load().(string)), &req); err != nil || req.Model != "judge-1" || len(req.Messages) != 1 ||
		req.Messages[0].Role != "user" || !strings.Contains(req.Messages[0].Content, "Reference: Rayleigh scattering\nReply: Because of Rayleigh scattering.") {
		t.Fatalf("the request: %s (%v)", js.got.Load(), err)
	}
	if a := js.auth.Load(); a != "Bearer sk-test-123" {
		t.Fatalf("authorization %q", a)
	}
	js.reply.Store("I cannot decide.")
	if got, err := play("Blue light."); err != nil || got != 0.25 {
		t.Fatalf("an unparseable judgement: %v %v, want the fallback 0.25", got, err)
	}
	js.reply.Store("Score: 11")
	if got, err := play("x"); err != nil || got != 0.25 {
		t.Fatalf("a score out of range: %v %v", got, err)
	}
	js.hang.Store(true)
	t0 := time.Now()
	if got, err := play("x"); err != nil || got != 0.25 || time.Since(t0) > 3*time.Second {
		t.Fatalf("a judge past its timeout: %v %v after %v", got, err, time.Since(t0))
	}
	js.hang.Store(false)
	if judged, unparseable, timedOut := d.JudgeVerdicts(); judged != 1 || unparseable != 2 || timedOut != 1 {
		t.Fatalf("verdicts %d judged, %d unparseable, %d timed out", judged, unparseable, timedOut)
	}
	js.status.Store(503)
	if _, err := play("x"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("a failing judge server: %v", err)
	}
	js.status.Store(0)
	for _, raw := range []string{`<html>hi</html>`, `{"choices": []}`, `{"choices": [{"message": {"content": null}}]}`} {
		js.raw.Store(raw)
		if _, err := play("x"); err == nil {
			t.Fatalf("a nonsensical reply %s scored", raw)
		}
	}
	// The configuration: the key only by reference, the block only with the verifier.
	bad := *jc
	bad.APIKey = "sk-literal"
	c2 := c
	c2.Judge = &bad
	if err := c2.Validate(); err == nil || !strings.Contains(err.Error(), "api_key") {
		t.Fatalf("a literal key: %v", err)
	}
	c2.Judge, c2.Verifier = jc, "exact"
	if err := c2.Validate(); err == nil || !strings.Contains(err.Error(), "judge does nothing") {
		t.Fatalf("a judge block without the judge verifier: %v", err)
	}
	c2.Judge, c2.Verifier = nil, "judge"
	if err := c2.Validate(); err == nil || !strings.Contains(err.Error(), "judge block") {
		t.Fatalf("the judge verifier without its block: %v", err)
	}
	t.Setenv("JUDGE_KEY_TEST", "")
	c.Path = write(t, "d2.jsonl", rows.String())
	if _, err := Load(c); err == nil || !strings.Contains(err.Error(), "JUDGE_KEY_TEST") {
		t.Fatalf("an unset key: %v", err)
	}
}

// The chat-completions decoder takes any bytes: content or an error, never a panic.
func FuzzDecodeChatReply(f *testing.F) {
	f.Add([]byte(`{"choices": [{"message": {"content": "Score: 3"}}]}`))
	f.Add([]byte(`{"choices": [{"message": null}]}`))
	f.Add([]byte(`<html>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = decodeChatReply(data)
	})
}

// The test-cases reader takes any text: cases within their bounds or an error.
func FuzzParseTestCases(f *testing.F) {
	f.Add(`{"inputs": ["1 2"], "outputs": ["3"]}`)
	f.Add(`{"inputs": ["1"], "outputs": ["2"], "x": 1}`)
	f.Fuzz(func(t *testing.T, s string) {
		tc, err := parseTestCases(s)
		if err == nil && (len(tc.Inputs) == 0 || len(tc.Inputs) != len(tc.Outputs) || len(tc.Inputs) > MaxCases) {
			t.Fatalf("%q: %+v", s, tc)
		}
	})
}

// The comparison of a program's returned JSON with the expected takes any text: never a panic,
// and never a hang on a number with a huge exponent.
func FuzzSameReturn(f *testing.F) {
	f.Add(`[1, 2.0, {"a": true}]`, `[1.0, 2, {"a": true}]`)
	f.Add(`1e999999999`, `1e999999999`)
	f.Add(`[3]`, `3`)
	f.Fuzz(func(t *testing.T, got, want string) {
		if sameReturn(got, want) && !sameReturn(got, got) {
			t.Fatalf("%q matches %q but not itself", got, want)
		}
	})
}
