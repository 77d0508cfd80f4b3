package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/infer/wire"
	"github.com/agentrl/agentrl/model"
)

func tinyEngine(t *testing.T) *local.Engine {
	t.Helper()
	cfg := model.Config{Vocab: 64, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 48, MaxSeq: 96,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}
	m, err := model.New(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	e, err := local.NewEngine(m, 4, local.EngineConfig{Slots: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// agentrlHandler serves the agentrl training route from gen, as agentrl serve does.
func agentrlHandler(gen infer.Generator) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /agentrl/v1/generate", func(w http.ResponseWriter, r *http.Request) {
		var req infer.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
			return
		}
		c, err := gen.Generate(r.Context(), req)
		if err != nil {
			http.Error(w, `{"error":{"message":"`+err.Error()+`"}}`, http.StatusInternalServerError)
			return
		}
		json.NewEncoder(w).Encode(c)
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	return mux
}

func newRouter(t *testing.T, opts Options) *Router {
	t.Helper()
	if opts.HealthInterval == 0 {
		opts.HealthInterval = -1
	}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func request(seed uint64) infer.Request {
	return infer.Request{Prompt: []int32{1, 2, 3, 4}, MaxTokens: 12, Sampling: infer.Sampling{Temperature: 1}, Stop: []int32{0}, Seed: seed}
}

// Over the agentrl route the completion is exactly the in-process engine's for the same seed:
// tokens, logprobs under the sampled distribution, per-token versions, finish.
func TestAgentrlDialectReproducesTheEngine(t *testing.T) {
	eng := tinyEngine(t)
	srv := httptest.NewServer(agentrlHandler(eng))
	defer srv.Close()
	r := newRouter(t, Options{Servers: []Server{{Name: "a", URL: srv.URL, Dialect: Agentrl}}})
	for seed := range uint64(5) {
		want, err := eng.Generate(context.Background(), request(seed))
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.Generate(context.Background(), request(seed))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: over HTTP %+v, in process %+v", seed, got, want)
		}
	}
}

// vLLM is asked for the prompt as ids, the sampled token's logprob and the completion's ids;
// its documented response decodes to tokens, logprobs and the server's confirmed version.
func TestVLLMDialect(t *testing.T) {
	body, err := os.ReadFile("testdata/vllm_completions.json")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "wrong route or key", http.StatusNotFound)
			return
		}
		json.NewDecoder(r.Body).Decode(&got)
		w.Write(body)
	}))
	defer srv.Close()
	r := newRouter(t, Options{Servers: []Server{{Name: "v", URL: srv.URL, Dialect: VLLM, Model: "agentrl-calc", APIKey: "k"}}})
	if err := r.SetVersion("v", 9); err != nil {
		t.Fatal(err)
	}
	c, err := r.Generate(context.Background(), infer.Request{Prompt: []int32{1, 122, 128, 122}, MaxTokens: 16, Sampling: infer.Sampling{Temperature: 1}, Stop: []int32{2}, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	want := infer.Completion{Tokens: []int32{128, 17, 2}, Logprobs: []float32{-0.0215, -1.2034, -0.0007}, Versions: []int32{9, 9, 9}, Finish: infer.FinishStop}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("decoded %+v, want %+v", c, want)
	}
	for k, v := range map[string]any{"model": "agentrl-calc", "logprobs": 0.0, "return_token_ids": true, "return_tokens_as_token_ids": true,
		"max_tokens": 16.0, "seed": 5.0, "top_k": -1.0, "top_p": 1.0, "temperature": 1.0, "skip_special_tokens": false} {
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("request %s = %v, want %v", k, got[k], v)
		}
	}
	if fmt.Sprint(got["prompt"]) != "[1 122 128 122]" || fmt.Sprint(got["stop_token_ids"]) != "[2]" {
		t.Errorf("request prompt %v stop %v", got["prompt"], got["stop_token_ids"])
	}
}

func TestSGLangDialect(t *testing.T) {
	body, err := os.ReadFile("testdata/sglang_generate.json")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/generate" {
			http.NotFound(w, r)
			return
		}
		json.NewDecoder(r.Body).Decode(&got)
		w.Write(body)
	}))
	defer srv.Close()
	r := newRouter(t, Options{Servers: []Server{{Name: "s", URL: srv.URL, Dialect: SGLang}}})
	c, err := r.Generate(context.Background(), infer.Request{Prompt: []int32{1, 122, 128, 122}, MaxTokens: 16, Sampling: infer.Sampling{Temperature: 1}, Stop: []int32{2}, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	want := infer.Completion{Tokens: []int32{128, 17, 2}, Logprobs: []float32{-0.0215, -1.2034, -0.0007}, Versions: []int32{7, 7, 7}, Finish: infer.FinishStop}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("decoded %+v, want %+v (version from meta_info.weight_version)", c, want)
	}
	sp, _ := got["sampling_params"].(map[string]any)
	if got["return_logprob"] != true || fmt.Sprint(got["input_ids"]) != "[1 122 128 122]" || sp["max_new_tokens"] != 16.0 || sp["sampling_seed"] != 5.0 || fmt.Sprint(sp["stop_token_ids"]) != "[2]" {
		t.Fatalf("request %v", got)
	}
}

// Responses that would corrupt a trajectory are refused with a clear error and not retried.
func TestProtocolViolationsAreRefused(t *testing.T) {
	vllm, _ := os.ReadFile("testdata/vllm_completions.json")
	sglang, _ := os.ReadFile("testdata/sglang_generate.json")
	good, err := wire.AppendBinaryCompletion(nil, infer.Completion{Tokens: []int32{1, 2}, Logprobs: []float32{-1, -1}, Versions: []int32{3, 3}, Finish: infer.FinishStop})
	if err != nil {
		t.Fatal(err)
	}
	positive, err := wire.AppendBinaryCompletion(nil, infer.Completion{Tokens: []int32{1, 2}, Logprobs: []float32{-1, 1.5}, Versions: []int32{3, 3}, Finish: infer.FinishStop})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		dialect Dialect
		body    string
		want    string
		typ     string // the answer's Content-Type, when not the test server's guess
	}{
		{"vllm short logprobs", VLLM, strings.Replace(string(vllm), `[-0.0215, -1.2034, -0.0007]`, `[-0.0215, -1.2034]`, 1), "3 tokens but 2 logprobs", ""},
		{"vllm no token ids", VLLM, strings.Replace(string(vllm), `"token_ids": [128, 17, 2],`, ``, 1), "no token_ids", ""},
		{"vllm ids disagree", VLLM, strings.Replace(string(vllm), `"token_id:17"`, `"token_id:18"`, 1), `"token_id:18"`, ""},
		{"vllm abort", VLLM, strings.Replace(string(vllm), `"finish_reason": "stop"`, `"finish_reason": "abort"`, 1), `finish reason "abort"`, ""},
		{"vllm null logprob", VLLM, strings.Replace(string(vllm), `-1.2034`, `null`, 1), "no logprob", ""},
		{"sglang no logprobs", SGLang, strings.Replace(string(sglang), `"output_token_logprobs"`, `"x"`, 1), "output_token_logprobs", ""},
		{"sglang positive logprob", SGLang, strings.Replace(string(sglang), `-1.2034`, `1.5`, 1), "logprob 1.5", ""},
		{"agentrl short versions", Agentrl, `{"tokens":[1,2],"logprobs":[-1,-1],"versions":[3],"finish":"stop"}`, "2 tokens but 2 logprobs and 1 versions", ""},
		{"agentrl not json", Agentrl, `<html>`, "protocol violation", ""},
		{"agentrl binary truncated", Agentrl, string(good[:len(good)-1]), "malformed binary completion", wire.BinaryType},
		{"agentrl binary positive logprob", Agentrl, string(positive), "logprob 1.5", wire.BinaryType},
		{"agentrl json as binary", Agentrl, `{"tokens":[1],"logprobs":[-1],"versions":[3],"finish":"stop"}`, "malformed binary completion", wire.BinaryType},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				if tc.typ != "" {
					w.Header().Set("Content-Type", tc.typ)
				}
				io.WriteString(w, tc.body)
			})
			a, b := httptest.NewServer(h), httptest.NewServer(h)
			defer a.Close()
			defer b.Close()
			r := newRouter(t, Options{Servers: []Server{{Name: "a", URL: a.URL, Dialect: tc.dialect, Model: "m"}, {Name: "b", URL: b.URL, Dialect: tc.dialect, Model: "m"}}})
			_, err := r.Generate(context.Background(), request(1))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
			if calls.Load() != 1 {
				t.Fatalf("%d calls: a protocol violation was retried", calls.Load())
			}
		})
	}
}

// A server that hangs is cut by the deadline, a dead one by the connection error; the request
// goes to another server, and the failing one is ejected and later re-admitted by health checks.
func TestFailuresAreRetriedElsewhereAndEjected(t *testing.T) {
	eng := tinyEngine(t)
	good := httptest.NewServer(agentrlHandler(eng))
	defer good.Close()
	release := make(chan struct{})
	var hangHealthy atomic.Bool
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			if !hangHealthy.Load() {
				http.Error(w, "down", http.StatusServiceUnavailable)
			}
			return
		}
		io.Copy(io.Discard, r.Body)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hang.Close()
	defer close(release)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there any more

	r := newRouter(t, Options{Timeout: 200 * time.Millisecond, Attempts: 3, HealthInterval: 20 * time.Millisecond, Servers: []Server{
		{Name: "hang", URL: hang.URL, Dialect: Agentrl}, {Name: "dead", URL: dead, Dialect: Agentrl}, {Name: "good", URL: good.URL, Dialect: Agentrl},
	}})
	want, err := eng.Generate(context.Background(), request(3))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		got, err := r.Generate(context.Background(), request(3))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("request %d: resubmitted generation %+v differs from %+v", i, got, want)
		}
	}
	st := map[string]ServerStats{}
	for _, s := range r.Stats() {
		st[s.Name] = s
	}
	if st["hang"].Healthy || st["dead"].Healthy || !st["good"].Healthy {
		t.Fatalf("after failures: %+v", st)
	}
	if st["good"].Requests != 4 {
		t.Fatalf("good server got %d of 4 requests", st["good"].Requests)
	}
	hangHealthy.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for !healthy(r, "hang") {
		if time.Now().After(deadline) {
			t.Fatal("a server whose health check passes again was not re-admitted")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func healthy(r *Router, name string) bool {
	for _, s := range r.Stats() {
		if s.Name == name {
			return s.Healthy
		}
	}
	return false
}

// 5xx is the server's failure (retried); other 4xx is the request's (not retried, server kept).
func TestStatusCodes(t *testing.T) {
	eng := tinyEngine(t)
	good := httptest.NewServer(agentrlHandler(eng))
	defer good.Close()
	for _, tc := range []struct {
		status  int
		retried bool
	}{{503, true}, {429, true}, {500, true}, {400, false}, {404, false}, {413, false}} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				io.WriteString(w, `{"error":{"message":"nope","type":"x"}}`)
			}))
			defer bad.Close()
			r := newRouter(t, Options{Servers: []Server{{Name: "bad", URL: bad.URL, Dialect: Agentrl}, {Name: "good", URL: good.URL, Dialect: Agentrl}}})
			_, err := r.Generate(context.Background(), request(1))
			if tc.retried && err != nil {
				t.Fatalf("HTTP %d was not retried: %v", tc.status, err)
			}
			if !tc.retried && (err == nil || !strings.Contains(err.Error(), "nope")) {
				t.Fatalf("HTTP %d: error %v, want the server's message", tc.status, err)
			}
			if !tc.retried && !healthy(r, "bad") {
				t.Fatalf("HTTP %d counted against the server", tc.status)
			}
		})
	}
}

// vLLM and SGLang logprobs are taken before temperature, top-k and top-p unless the server says
// otherwise: such a server is used only with exact sampling.
func TestRawLogprobsNeedExactSampling(t *testing.T) {
	body, _ := os.ReadFile("testdata/vllm_completions.json")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	defer srv.Close()
	raw := newRouter(t, Options{Servers: []Server{{Name: "v", URL: srv.URL, Dialect: VLLM, Model: "m"}}})
	req := request(1)
	req.Sampling.Temperature = 0.7
	if _, err := raw.Generate(context.Background(), req); err == nil || !strings.Contains(err.Error(), "processed_logprobs") {
		t.Fatalf("raw logprobs at temperature 0.7: %v", err)
	}
	processed := newRouter(t, Options{Servers: []Server{{Name: "v", URL: srv.URL, Dialect: VLLM, Model: "m", ProcessedLogprobs: true}}})
	if _, err := processed.Generate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}

// Requests go to the server with the fewest outstanding; an episode's requests stay on the
// server its first one went to.
func TestLeastOutstandingAndSticky(t *testing.T) {
	var mu sync.Mutex
	count := map[string]int{}
	gate := make(chan struct{})
	mk := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			count[name]++
			mu.Unlock()
			<-gate
			io.WriteString(w, `{"tokens":[5],"logprobs":[-1],"versions":[1],"finish":"stop"}`)
		}))
	}
	a, b := mk("a"), mk("b")
	defer a.Close()
	defer b.Close()
	r := newRouter(t, Options{Servers: []Server{{Name: "a", URL: a.URL, Dialect: Agentrl}, {Name: "b", URL: b.URL, Dialect: Agentrl}}})
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			if _, err := r.Generate(context.Background(), request(uint64(i))); err != nil {
				t.Error(err)
			}
		})
	}
	for {
		mu.Lock()
		n := count["a"] + count["b"]
		mu.Unlock()
		if n == 10 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	if count["a"] != 5 || count["b"] != 5 {
		t.Errorf("10 concurrent requests split %v, want 5 and 5", count)
	}
	mu.Unlock()
	close(gate)
	wg.Wait()

	first := ""
	for turn := range 6 {
		req := request(uint64(turn))
		req.Session = "episode-1"
		if _, err := r.Generate(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		s := r.servers[r.sticky["episode-1"]].Name
		r.mu.Unlock()
		if first == "" {
			first = s
		} else if s != first {
			t.Fatalf("turn %d of the episode went to %s, earlier turns to %s", turn, s, first)
		}
	}
}

func TestNewRejectsBadServers(t *testing.T) {
	for _, tc := range []struct {
		s    []Server
		want string
	}{
		{nil, "no servers"},
		{[]Server{{URL: "http://x", Dialect: "tgi"}}, `unknown dialect "tgi"`},
		{[]Server{{URL: "x:80", Dialect: Agentrl}}, "must start with http"},
		{[]Server{{URL: "http://x", Dialect: VLLM}}, "needs model"},
		{[]Server{{Name: "a", URL: "http://x", Dialect: Agentrl}, {Name: "a", URL: "http://y", Dialect: Agentrl}}, "twice"},
	} {
		if _, err := New(Options{Servers: tc.s, HealthInterval: -1}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.s, err, tc.want)
		}
	}
}

// A cancelled caller gets its context's error at once, and the server's outstanding count is
// given back.
func TestCancelledRequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // a server notices a client gone once the body is read
		<-r.Context().Done()
	}))
	defer srv.Close()
	r := newRouter(t, Options{Servers: []Server{{Name: "a", URL: srv.URL, Dialect: Agentrl}}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if _, err := r.Generate(ctx, request(1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if st := r.Stats()[0]; st.Outstanding != 0 || !st.Healthy {
		t.Fatalf("after a cancelled request: %+v", st)
	}
}

// The decoders never panic, and what they accept is a valid completion.
func FuzzDecode(f *testing.F) {
	vllm, _ := os.ReadFile("testdata/vllm_completions.json")
	sglang, _ := os.ReadFile("testdata/sglang_generate.json")
	f.Add(uint8(0), `{"tokens":[1],"logprobs":[-1],"versions":[2],"finish":"length"}`)
	f.Add(uint8(1), string(vllm))
	f.Add(uint8(2), string(sglang))
	f.Fuzz(func(t *testing.T, which uint8, body string) {
		d := []dialect{agentrlDialect{}, vllmDialect{}, sglangDialect{}}[int(which)%3]
		c, err := d.decode([]byte(body), "application/json", 1)
		if err == nil {
			if err := checkCompletion(c); err != nil {
				t.Fatalf("accepted an invalid completion: %v", err)
			}
		}
	})
}

// Weights go to agentrl servers as the file's bytes with the version and the key, to SGLang as a
// path to load; a server that took them stamps its completions with the new version.
func TestPublishWeights(t *testing.T) {
	path := t.TempDir() + "/model.safetensors"
	if err := os.WriteFile(path, []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	var gotBody, gotVersion, gotAuth string
	var gotEpoch []string
	ag := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/agentrl/v1/weights":
			b, _ := io.ReadAll(r.Body)
			gotBody, gotVersion, gotAuth = string(b), r.URL.Query().Get("version"), r.Header.Get("Authorization")
			gotEpoch = r.URL.Query()["epoch"]
			io.WriteString(w, `{"version":4,"previous":3}`)
		default:
			io.WriteString(w, `{"tokens":[5],"logprobs":[-1],"versions":[4],"finish":"stop"}`)
		}
	}))
	defer ag.Close()
	var sgBody map[string]any
	sglang, _ := os.ReadFile("testdata/sglang_generate.json")
	sg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/update_weights_from_disk" {
			json.NewDecoder(r.Body).Decode(&sgBody)
			io.WriteString(w, `{"success": true, "message": "Succeeded to update model weights.", "num_paused_requests": 0}`)
			return
		}
		w.Write([]byte(strings.Replace(string(sglang), `"weight_version": "7",`, ``, 1)))
	}))
	defer sg.Close()
	r := newRouter(t, Options{Servers: []Server{{Name: "a", URL: ag.URL, Dialect: Agentrl, APIKey: "k"}, {Name: "s", URL: sg.URL, Dialect: SGLang}}})
	if err := r.PublishWeights(context.Background(), 4, path, "/ckpt/v4"); err != nil {
		t.Fatal(err)
	}
	if gotBody != "weights" || gotVersion != "4" || gotAuth != "Bearer k" || gotEpoch != nil {
		t.Fatalf("agentrl server got body %q version %q epoch %q auth %q", gotBody, gotVersion, gotEpoch, gotAuth)
	}
	if sgBody["model_path"] != "/ckpt/v4" || sgBody["weight_version"] != "4" || sgBody["abort_all_requests"] != false {
		t.Fatalf("sglang server got %v", sgBody)
	}
	for _, s := range r.Stats() {
		if s.Version != 4 {
			t.Fatalf("%s at version %d after the publish", s.Name, s.Version)
		}
	}
	// SGLang without a weight_version in its answer: the completion carries the published one.
	c, err := r.Generate(context.Background(), infer.Request{Prompt: []int32{1}, MaxTokens: 4, Sampling: infer.Sampling{Temperature: 1}, Session: "x"})
	if err != nil || c.Versions[0] != 4 {
		t.Fatalf("completion %+v, %v", c, err)
	}
	// A router with an epoch names it.
	e := newRouter(t, Options{Servers: []Server{{Name: "a", URL: ag.URL, Dialect: Agentrl, APIKey: "k"}}, Epoch: 1700000000123})
	if err := e.PublishWeights(context.Background(), 2, path, ""); err != nil || gotVersion != "2" || !reflect.DeepEqual(gotEpoch, []string{"1700000000123"}) {
		t.Fatalf("publish with an epoch: %v; server got version %q epoch %q", err, gotVersion, gotEpoch)
	}
	v := newRouter(t, Options{Servers: []Server{{Name: "v", URL: ag.URL, Dialect: VLLM, Model: "m"}}})
	if err := v.PublishWeights(context.Background(), 5, path, ""); err == nil || !strings.Contains(err.Error(), "no stock route that loads full weights") {
		t.Fatalf("publishing to vLLM: %v", err)
	}
}
