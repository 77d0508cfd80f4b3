package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/optim"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The conversation the test policy is trained to answer: asked the question with the calculator
// tool declared it calls the tool; shown the tool's response it answers.
const (
	testQuestion = "what is 12 + 30?"
	testCall     = `<tool_call>{"name":"calculator","arguments":{"expression":"12 + 30"}}</tool_call>`
	testAnswer   = "The answer is 42."
)

var testTools = []chatTool{func() chatTool {
	var t chatTool
	t.Type = "function"
	t.Function.Name = "calculator"
	t.Function.Description = "Evaluate an arithmetic expression."
	t.Function.Parameters = json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string"}},"required":["expression"]}`)
	return t
}()}

// testConversation is the chat request of turn 1 (the call) or 2 (the answer).
func testConversation(turn int) chatRequest {
	req := chatRequest{Messages: []chatMessage{
		{Role: "system", Content: json.RawMessage(`"You are a careful calculator."`)},
		{Role: "user", Content: json.RawMessage(`"` + testQuestion + `"`)},
	}, Tools: testTools}
	if turn == 2 {
		var tc chatToolCall
		tc.ID, tc.Type = "call_1", "function"
		tc.Function.Name, tc.Function.Arguments = "calculator", `{"expression": "12 + 30"}`
		req.Messages = append(req.Messages,
			chatMessage{Role: "assistant", ToolCalls: []chatToolCall{tc}},
			chatMessage{Role: "tool", ToolCallID: "call_1", Content: json.RawMessage(`"42"`)})
	}
	return req
}

var (
	fixtureOnce sync.Once
	fixtureDir  string
	fixtureErr  error
)

// testCheckpoint is a checkpoint folder of a tiny policy trained until greedy decoding gives the
// test conversation's turns; built once per test binary.
func testCheckpoint(t testing.TB) string {
	t.Helper()
	fixtureOnce.Do(func() { fixtureDir, fixtureErr = buildCheckpoint() })
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	return fixtureDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixtureDir != "" {
		os.RemoveAll(filepath.Dir(fixtureDir)) // the checkpoints of this binary live in one temporary folder
	}
	os.Exit(code)
}

func buildCheckpoint() (string, error) {
	corpus := []string{
		strings.Repeat("the agent calls a tool and reads the answer. ", 10),
		tokenizer.RenderChat([]tokenizer.Message{{Role: "user", Content: testQuestion}, {Role: "assistant", Content: testCall}}, false),
		strings.Repeat("calculator(expression): Evaluate an arithmetic expression. The answer is 42. ", 5),
		"héllo wörld ✓ 12 + 30 = 42",
	}
	tok, err := tokenizer.Train(corpus, tokenizer.DefaultTrainOptions(320))
	if err != nil {
		return "", err
	}
	cfg := model.Config{Vocab: 320, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 64, MaxSeq: 192,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}
	m, err := model.New(cfg, 1)
	if err != nil {
		return "", err
	}
	var seqs [][]int32
	var starts []int
	for turn := 1; turn <= 2; turn++ {
		req := testConversation(turn)
		msgs, _, err := renderMessages(&req)
		if err != nil {
			return "", err
		}
		text, _ := renderPrompt(msgs)
		prompt := tok.Encode(text)
		target := testCall
		if turn == 2 {
			target = testAnswer
		}
		seq := append(append(prompt, tok.Encode(target)...), tok.EndOfTurn())
		seqs, starts = append(seqs, seq), append(starts, len(prompt))
	}
	T := 0
	for _, s := range seqs {
		T = max(T, len(s)-1)
	}
	b := &model.Batch{Rows: len(seqs), T: T, Tokens: make([]int32, len(seqs)*T), Targets: make([]int32, len(seqs)*T),
		Pos: make([]int32, len(seqs)*T), Seg: make([]int32, len(seqs)*T)}
	for r, s := range seqs {
		for i := 0; i < T; i++ {
			k := r*T + i
			b.Targets[k], b.Pos[k] = -1, int32(i)
			if i < len(s)-1 {
				b.Tokens[k] = s[i]
				if i >= starts[r]-1 {
					b.Targets[k] = s[i+1]
				}
			}
		}
	}
	opt, err := optim.NewAdamW(optim.Config{Beta1: 0.9, Beta2: 0.99, Eps: 1e-8}, len(m.Params.Data), []optim.Segment{{Off: 0, Len: len(m.Params.Data)}})
	if err != nil {
		return "", err
	}
	for step := 0; step < 400; step++ {
		m.ZeroGrad()
		loss, err := m.TrainCE(b)
		if err != nil {
			return "", err
		}
		if loss < 0.01 {
			break
		}
		optim.ClipGradNorm(m.Grads.Data, 1)
		if err := opt.Step(m.Params.Data, m.Grads.Data, 1e-2); err != nil {
			return "", err
		}
	}
	dir, err := os.MkdirTemp("", "agentrl-serve-test-")
	if err != nil {
		return "", err
	}
	ck := filepath.Join(dir, "ck")
	if err := checkpoint.Save(ck, m, tok, nil); err != nil {
		return "", err
	}
	return ck, nil
}

// testServer serves the test checkpoint on loopback.
func testServer(t testing.TB, opts Options) (*Server, *httptest.Server) {
	t.Helper()
	srv, err := Open(testCheckpoint(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	return srv, hs
}

// post sends body (a value marshalled to JSON, or []byte as is) and returns status and body.
// postAccept posts body as JSON with the Accept header accept and returns the answer's
// Content-Type and body, failing unless it is a 200.
func postAccept(t testing.TB, url, accept string, body any) (string, []byte) {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s (%v)", resp.StatusCode, out, err)
	}
	return resp.Header.Get("Content-Type"), out
}

func post(t testing.TB, url, key string, body any) (int, []byte) {
	t.Helper()
	data, ok := body.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

func mustDecode[T any](t testing.TB, data []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("decoding %s: %v", data, err)
	}
	return v
}

// sseEvents splits a server-sent event stream into its data payloads.
func sseEvents(t testing.TB, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	if len(out) == 0 || out[len(out)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %s", body)
	}
	return out[:len(out)-1]
}

// errorBody is an OpenAI-style error.
type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func newHTTPTest(t testing.TB, srv *Server) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return hs
}

func testutilCounter(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

// getBody sends a GET with key (none when empty) and returns status and body.
func getBody(t testing.TB, url, key string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// pushWeights pushes the model.safetensors of the checkpoint dir with query (version=N&…).
func pushWeights(t testing.TB, url, key, dir, query string) (int, []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url+"/agentrl/v1/weights?"+query, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}
