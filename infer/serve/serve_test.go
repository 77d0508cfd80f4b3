package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/infer/wire"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestHealthModelsMetrics(t *testing.T) {
	_, hs := testServer(t, Options{ModelName: "tiny", Version: 3})
	for _, path := range []string{"/health", "/v1/models", "/agentrl/v1/version"} {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"version":3`) {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		if path == "/v1/models" && !strings.Contains(string(body), `"id":"tiny"`) {
			t.Fatalf("models: %s", body)
		}
	}
	code, _ := post(t, hs.URL+"/v1/completions", "", map[string]any{"model": "tiny", "prompt": "the agent", "max_tokens": 3})
	if code != 200 {
		t.Fatal(code)
	}
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`agentrl_serve_requests_total{code="200",route="/v1/completions"} 1`, "agentrl_serve_completion_tokens_total 3",
		"agentrl_serve_model_version 3", "agentrl_serve_queue_depth 0", "agentrl_serve_batch_occupancy 0", "agentrl_serve_request_duration_seconds_bucket",
		"agentrl_serve_time_to_first_token_seconds_count 1", "agentrl_serve_prompt_tokens_total", "agentrl_serve_running 0",
		"agentrl_serve_slots 32", "agentrl_serve_weights_epoch 0"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestCompletions(t *testing.T) {
	_, hs := testServer(t, Options{})
	url := hs.URL + "/v1/completions"
	// Prompts as a string, token ids, and a list of both; n choices each.
	code, body := post(t, url, "", map[string]any{"prompt": []any{"the agent", []int{20, 30, 40}}, "n": 2, "max_tokens": 5,
		"seed": 7, "logprobs": 3, "return_token_ids": true, "ignore_eos": true})
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	resp := mustDecode[completionResponse](t, body)
	if len(resp.Choices) != 4 || resp.Object != "text_completion" || resp.Usage.CompletionTokens != 20 {
		t.Fatalf("%s", body)
	}
	for i, ch := range resp.Choices {
		if ch.Index != i || len(ch.TokenIDs) != 5 || *ch.FinishReason != "length" || len(ch.Logprobs.Tokens) != 5 {
			t.Fatalf("choice %d: %+v", i, ch)
		}
		if i >= 2 && !slices.Equal(ch.PromptTokenIDs, []int32{20, 30, 40}) {
			t.Fatalf("prompt ids %v", ch.PromptTokenIDs)
		}
		for k, top := range ch.Logprobs.TopLogprobs {
			if strings.ContainsRune(ch.Logprobs.Tokens[k], utf8.RuneError) {
				continue // part of a character: such tokens share the key "\ufffd" (return_tokens_as_token_ids tells them apart)
			}
			if len(top) < 1 || len(top) > 4 || top[ch.Logprobs.Tokens[k]] != ch.Logprobs.TokenLogprobs[k] {
				t.Fatalf("top logprobs %v for %q %v", top, ch.Logprobs.Tokens[k], ch.Logprobs.TokenLogprobs[k])
			}
		}
	}
	if slices.Equal(resp.Choices[0].TokenIDs, resp.Choices[1].TokenIDs) && slices.Equal(resp.Choices[2].TokenIDs, resp.Choices[3].TokenIDs) {
		t.Fatalf("n choices are identical: seeds are not distinct")
	}
	// The same seed gives the same completion; echo prepends the prompt; token ids as strings.
	code, body2 := post(t, url, "", map[string]any{"prompt": "the agent", "n": 2, "max_tokens": 5, "seed": 7, "logprobs": 0,
		"echo": false, "return_tokens_as_token_ids": true, "return_token_ids": true, "ignore_eos": true})
	if code != 200 {
		t.Fatalf("%d %s", code, body2)
	}
	again := mustDecode[completionResponse](t, body2)
	if !slices.Equal(again.Choices[1].TokenIDs, resp.Choices[1].TokenIDs) || again.Choices[1].Text != resp.Choices[1].Text {
		t.Fatalf("seeded completions differ: %v vs %v", again.Choices[1].TokenIDs, resp.Choices[1].TokenIDs)
	}
	if tok := again.Choices[0].Logprobs.Tokens[0]; tok != fmt.Sprintf("token_id:%d", again.Choices[0].TokenIDs[0]) || again.Choices[0].Logprobs.TopLogprobs != nil {
		t.Fatalf("token as id: %q, top %v", tok, again.Choices[0].Logprobs.TopLogprobs)
	}
	code, body = post(t, url, "", map[string]any{"prompt": "the agent", "max_tokens": 5, "seed": 7, "echo": true, "ignore_eos": true})
	echo := mustDecode[completionResponse](t, body)
	if code != 200 || echo.Choices[0].Text != "the agent"+resp.Choices[0].Text {
		t.Fatalf("echo: %s", body)
	}
	// A stop string cuts the text before it; a stop token id ends the completion after it.
	text := resp.Choices[0].Text
	if len(text) > 2 {
		stop := text[len(text)/2 : len(text)/2+1]
		code, body = post(t, url, "", map[string]any{"prompt": "the agent", "max_tokens": 5, "seed": 7, "stop": stop, "ignore_eos": true})
		cut := mustDecode[completionResponse](t, body)
		if code != 200 || cut.Choices[0].Text != text[:strings.Index(text, stop)] || *cut.Choices[0].FinishReason != "stop" {
			t.Fatalf("stop %q on %q: %s", stop, text, body)
		}
	}
	stopID := resp.Choices[0].TokenIDs[2]
	code, body = post(t, url, "", map[string]any{"prompt": "the agent", "max_tokens": 5, "seed": 7, "stop_token_ids": []int32{stopID}, "return_token_ids": true, "ignore_eos": true})
	cut := mustDecode[completionResponse](t, body)
	if k := slices.Index(resp.Choices[0].TokenIDs, stopID); code != 200 || !slices.Equal(cut.Choices[0].TokenIDs, resp.Choices[0].TokenIDs[:k+1]) || *cut.Choices[0].FinishReason != "stop" {
		t.Fatalf("stop token %d: %s", stopID, body)
	}
}

// A stream carries the same text and tokens as the response without streaming.
func TestCompletionsStream(t *testing.T) {
	_, hs := testServer(t, Options{})
	req := map[string]any{"prompt": []string{"the agent", "héllo"}, "n": 2, "max_tokens": 12, "seed": 11, "logprobs": 2, "return_token_ids": true, "ignore_eos": true}
	code, body := post(t, hs.URL+"/v1/completions", "", req)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	want := mustDecode[completionResponse](t, body)
	req["stream"] = true
	req["stream_options"] = map[string]bool{"include_usage": true}
	code, body = post(t, hs.URL+"/v1/completions", "", req)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	texts := make([]string, 4)
	toks := make([][]int32, 4)
	lps := make([][]float32, 4)
	finish := make([]string, 4)
	var u *usage
	for _, ev := range sseEvents(t, body) {
		c := mustDecode[completionResponse](t, []byte(ev))
		if c.Usage != nil {
			u = c.Usage
		}
		for _, ch := range c.Choices {
			texts[ch.Index] += ch.Text
			toks[ch.Index] = append(toks[ch.Index], ch.TokenIDs...)
			if ch.Logprobs != nil {
				lps[ch.Index] = append(lps[ch.Index], ch.Logprobs.TokenLogprobs...)
			}
			if ch.FinishReason != nil {
				finish[ch.Index] = *ch.FinishReason
			}
		}
	}
	for i, ch := range want.Choices {
		if texts[i] != ch.Text || !slices.Equal(toks[i], ch.TokenIDs) || !slices.Equal(lps[i], ch.Logprobs.TokenLogprobs) || finish[i] != *ch.FinishReason {
			t.Fatalf("choice %d: stream %q %v %v %q, response %q %v %v %q", i, texts[i], toks[i], lps[i], finish[i], ch.Text, ch.TokenIDs, ch.Logprobs.TokenLogprobs, *ch.FinishReason)
		}
	}
	if u == nil || *u != *want.Usage {
		t.Fatalf("usage %+v, want %+v", u, want.Usage)
	}
}

// The agentrl route returns exactly what the in-process engine returns for the same request,
// and the completions route samples the same tokens and logprobs.
func TestGenerateMatchesEngine(t *testing.T) {
	_, hs := testServer(t, Options{Slots: 3})
	ck, err := checkpoint.Load(testCheckpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := local.NewEngine(ck.Model, 0, local.EngineConfig{Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	prompt := ck.Tokenizer.Encode("the agent calls")
	reqs := []infer.Request{
		{Prompt: prompt, MaxTokens: 20, Sampling: infer.Sampling{Temperature: 1}, Seed: 1},
		{Prompt: prompt, MaxTokens: 20, Sampling: infer.Sampling{Temperature: 0.8, TopK: 10, TopP: 0.9}, Seed: 2, Stop: []int32{ck.Tokenizer.EndOfTurn()}},
		{Prompt: prompt[:3], MaxTokens: 189, Sampling: infer.Sampling{Temperature: 1.2}, Seed: 3}, // the whole context
		{Prompt: prompt, MaxTokens: 8, Sampling: infer.Sampling{}, Seed: 4},
	}
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Add(1)
		go func() { // concurrently: the batch the server decodes them in does not change them
			defer wg.Done()
			want, err := eng.Generate(context.Background(), req)
			if err != nil {
				t.Error(err)
				return
			}
			code, body := post(t, hs.URL+"/agentrl/v1/generate", "", req)
			if code != 200 {
				t.Errorf("%d %s", code, body)
				return
			}
			got := mustDecode[infer.Completion](t, body)
			if !slices.Equal(got.Tokens, want.Tokens) || !bitsEqual(got.Logprobs, want.Logprobs) || !slices.Equal(got.Versions, want.Versions) || got.Finish != want.Finish {
				t.Errorf("request %d: over HTTP %+v, in process %+v", i, got, want)
			}
			// The binary form, asked for among other types as the router asks, holds the same.
			typ, body := postAccept(t, hs.URL+"/agentrl/v1/generate", "text/plain;q=0.5, "+wire.BinaryType+";q=1", req)
			if typ != wire.BinaryType {
				t.Errorf("request %d: asked for the binary form, answered %s: %q", i, typ, body)
				return
			}
			bin, err := wire.ReadBinaryCompletion(body)
			if err != nil || !slices.Equal(bin.Tokens, want.Tokens) || !bitsEqual(bin.Logprobs, want.Logprobs) || !slices.Equal(bin.Versions, want.Versions) || bin.Finish != want.Finish {
				t.Errorf("request %d: binary form %+v (%v), in process %+v", i, bin, err, want)
			}
			if typ, _ := postAccept(t, hs.URL+"/agentrl/v1/generate", "application/json", req); typ != "application/json" {
				t.Errorf("request %d: asked for JSON, answered %s", i, typ)
			}
			if req.Sampling.Temperature == 0 || len(req.Stop) > 0 {
				return
			}
			creq := map[string]any{"prompt": req.Prompt, "max_tokens": min(req.MaxTokens, 192-len(req.Prompt)), "seed": req.Seed, "temperature": req.Sampling.Temperature,
				"logprobs": 0, "return_token_ids": true, "ignore_eos": true}
			code, body = post(t, hs.URL+"/v1/completions", "", creq)
			c := mustDecode[completionResponse](t, body)
			if code != 200 || !slices.Equal(c.Choices[0].TokenIDs, want.Tokens) || !bitsEqual(c.Choices[0].Logprobs.TokenLogprobs, want.Logprobs) {
				t.Errorf("request %d: completions route %s differs from %v", i, body, want.Tokens)
			}
		}()
	}
	wg.Wait()
}

func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

func TestAuth(t *testing.T) {
	_, hs := testServer(t, Options{APIKey: "sekrit"})
	get := func(path, key string) int {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, key string
		want      int
	}{{"/v1/models", "", 401}, {"/v1/models", "wrong", 401}, {"/v1/models", "sekrit", 200}, {"/health", "", 200}, {"/metrics", "", 200}} {
		if got := get(c.path, c.key); got != c.want {
			t.Errorf("GET %s key %q: %d, want %d", c.path, c.key, got, c.want)
		}
	}
	code, body := post(t, hs.URL+"/v1/completions", "", map[string]any{"prompt": "a"})
	if e := mustDecode[errorBody](t, body); code != 401 || e.Error.Type != "authentication_error" {
		t.Fatalf("%d %s", code, body)
	}
	if code, body := post(t, hs.URL+"/agentrl/v1/weights", "", map[string]any{"path": "x", "version": 9}); code != 401 {
		t.Fatalf("weights without key: %d %s", code, body)
	}
	// A server without a key has no weight route.
	_, open := testServer(t, Options{})
	if code, body := post(t, open.URL+"/agentrl/v1/weights", "", map[string]any{"path": "x", "version": 9}); code != 403 {
		t.Fatalf("weights on a server without a key: %d %s", code, body)
	}
}

func TestCheckAddr(t *testing.T) {
	for _, c := range []struct {
		addr              string
		key, insecure, ok bool
	}{
		{"127.0.0.1:8000", false, false, true}, {"localhost:0", false, false, true}, {"[::1]:80", false, false, true},
		{"0.0.0.0:8000", false, false, false}, {":8000", false, false, false}, {"10.1.2.3:80", false, false, false},
		{"0.0.0.0:8000", true, false, true}, {":8000", false, true, true}, {"nonsense", true, true, false},
	} {
		if err := CheckAddr(c.addr, c.key, c.insecure); (err == nil) != c.ok {
			t.Errorf("CheckAddr(%q, key %v, insecure %v) = %v", c.addr, c.key, c.insecure, err)
		}
	}
}

func TestErrors(t *testing.T) {
	_, hs := testServer(t, Options{MaxBodyBytes: 4096})
	big := strings.Repeat("x", 5000)
	for _, c := range []struct {
		path string
		body any
		code int
		typ  string
	}{
		{"/v1/completions", []byte(`{"prompt": `), 400, typeInvalid},
		{"/v1/completions", []byte(``), 400, typeInvalid},
		{"/v1/completions", []byte(`[1,2]`), 400, typeInvalid},
		{"/v1/completions", []byte(`{"prompt": "a"} {}`), 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": big}, 413, typeInvalid},
		{"/v1/completions", map[string]any{}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": ""}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": []int{}}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": []int{1, 99999}}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": []int{1, -1}}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": []any{1, "a"}}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": "a", "model": "gpt-4"}, 404, typeNotFound},
		{"/v1/completions", map[string]any{"prompt": "a", "logprobs": 21}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": "a", "logprobs": 1, "echo": true}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": "a", "max_tokens": 0}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": "a", "max_tokens": 1000}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": strings.Repeat("the agent ", 150)}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": "a", "temperature": -1}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": "a", "top_p": 1.5}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": "a", "top_k": -2}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": "a", "n": 0}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": "a", "n": 2, "best_of": 3}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": "a", "stop": 5}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": "a", "stop": ""}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": "a", "stop_token_ids": []int{100000}}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": "a", "presence_penalty": 0.5}, 400, typeInvalid},
		{"/v1/completions", map[string]any{"prompt": "a", "temperature": "hot"}, 400, typeInvalid},
		{"/v1/chat/completions", map[string]any{"messages": []any{}}, 400, typeInvalid},
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "robot", "content": "hi"}}}, 400, typeInvalid},
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "image_url"}}}}}, 400, typeInvalid},
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}, "tool_choice": "required"}, 400, typeInvalid},
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}, "tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "nope"}}, "tools": testTools}, 400, typeInvalid},
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}, "tool_choice": "always", "tools": testTools}, 400, typeInvalid},
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}, "top_logprobs": 2}, 400, typeInvalid},
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"type": "function", "function": map[string]any{"name": "f", "arguments": "[1]"}}}}}}, 400, typeInvalid},
		{"/agentrl/v1/generate", map[string]any{"prompt": []int{1, 2}, "max_tokens": 3, "temprature": 1}, 400, typeInvalid},
		{"/agentrl/v1/generate", map[string]any{"prompt": []int{1, 2}, "max_tokens": 0}, 400, typeInvalid},
		{"/agentrl/v1/generate", map[string]any{"prompt": []int{1, 2}, "max_tokens": 3, "sampling": map[string]any{"top_p": 2}}, 400, typeInvalid},
		{"/v1/nothing", map[string]any{}, 404, typeNotFound},
	} {
		code, body := post(t, hs.URL+c.path, "", c.body)
		var e errorBody
		if err := json.Unmarshal(body, &e); err != nil || code != c.code || e.Error.Type != c.typ || e.Error.Message == "" {
			t.Errorf("%s %v: %d %s, want %d %s", c.path, c.body, code, body, c.code, c.typ)
		}
	}
	resp, err := http.Get(hs.URL + "/v1/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET completions: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/v1/completions", strings.NewReader("prompt=a"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("a form body: %d, want 400", resp.StatusCode)
	}
}

// A random policy with a long context, for generations long enough to interrupt.
var (
	slowOnce sync.Once
	slowDir  string
	slowErr  error
)

const slowMaxSeq = 4096

func slowCheckpoint(t *testing.T) string {
	t.Helper()
	slowOnce.Do(func() {
		tok, err := tokenizer.Load(testCheckpoint(t))
		if err != nil {
			slowErr = err
			return
		}
		m, err := model.New(model.Config{Vocab: 320, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 128, MaxSeq: slowMaxSeq,
			RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}, 5)
		if err != nil {
			slowErr = err
			return
		}
		slowDir = filepath.Join(filepath.Dir(testCheckpoint(t)), "slow")
		slowErr = checkpoint.Save(slowDir, m, tok, nil)
	})
	if slowErr != nil {
		t.Fatal(slowErr)
	}
	return slowDir
}

// A client that disconnects mid-stream frees its slot at once: with one slot, the next request
// is served without waiting for the abandoned generation's budget.
func TestDisconnectFreesSlot(t *testing.T) {
	srv, err := Open(slowCheckpoint(t), Options{Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := newHTTPTest(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	body, _ := json.Marshal(map[string]any{"prompt": "the agent", "max_tokens": slowMaxSeq - 10, "stream": true, "ignore_eos": true, "seed": 1})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/v1/completions", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil { // the stream has begun
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	start := time.Now()
	code, out := post(t, hs.URL+"/v1/completions", "", map[string]any{"prompt": "the agent", "max_tokens": 2})
	if code != 200 {
		t.Fatalf("%d %s", code, out)
	}
	waited := time.Since(start)
	for srv.met.running.Load() != 0 || srv.met.queued.Load() != 0 {
		time.Sleep(time.Millisecond)
	}
	// The abandoned generation stopped early: far fewer tokens than its budget were made.
	made := int(testutilCounter(srv.met.completionTokens)) - 2
	if made >= slowMaxSeq-20 {
		t.Fatalf("the disconnected generation ran to %d tokens (waited %v)", made, waited)
	}
	t.Logf("disconnected after %d tokens; the next request waited %v", made, waited)
}

// Weights pushed while a generation runs: it continues, and its tokens after the switch carry
// the new version. Versions only go up: a stale push is refused with 409.
func TestWeightUpdateMidRequest(t *testing.T) {
	dir := slowCheckpoint(t)
	srv, err := Open(dir, Options{Slots: 2, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := newHTTPTest(t, srv)
	prompt := []int32{10, 11, 12}
	var got infer.Completion
	for attempt := int32(1); attempt <= 5; attempt++ {
		done := make(chan infer.Completion, 1)
		go func() {
			code, body := post(t, hs.URL+"/agentrl/v1/generate", "k", infer.Request{Prompt: prompt, MaxTokens: slowMaxSeq - 10, Sampling: infer.Sampling{Temperature: 1}, Seed: 3})
			if code != 200 {
				t.Errorf("%d %s", code, body)
			}
			done <- mustDecode[infer.Completion](t, body)
		}()
		for srv.met.running.Load() == 0 {
			time.Sleep(100 * time.Microsecond)
		}
		code, body := post(t, hs.URL+"/agentrl/v1/weights", "k", map[string]any{"path": dir, "version": 10 * attempt})
		if code != 200 || !strings.Contains(string(body), fmt.Sprintf(`"version":%d`, 10*attempt)) {
			t.Fatalf("%d %s", code, body)
		}
		got = <-done
		if got.Versions[0] != got.Versions[len(got.Versions)-1] {
			break
		}
	}
	first, last := got.Versions[0], got.Versions[len(got.Versions)-1]
	if first == last {
		t.Fatalf("no version change within a generation in 5 attempts")
	}
	if !slices.IsSorted(got.Versions) || last != srv.Version() {
		t.Fatalf("versions %d..%d not monotonic to the loaded %d", first, last, srv.Version())
	}
	switchAt := slices.Index(got.Versions, last)
	t.Logf("version %d → %d at token %d of %d", first, last, switchAt, len(got.Versions))

	// Stale: the same version again, and an older one.
	for _, v := range []int32{srv.Version(), 1} {
		code, body := post(t, hs.URL+"/agentrl/v1/weights", "k", map[string]any{"path": dir, "version": v})
		if e := mustDecode[errorBody](t, body); code != 409 || *e.Error.Code != "stale_version" {
			t.Fatalf("stale version %d: %d %s", v, code, body)
		}
	}
	// A pushed model.safetensors: a stale one is refused before its body counts; a new one loads.
	weights, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	push := func(v int32, data []byte) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/agentrl/v1/weights?version=%d", hs.URL, v), bytes.NewReader(data))
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := push(srv.Version(), weights); code != 409 {
		t.Fatalf("stale push: %d %s", code, body)
	}
	if code, body := push(srv.Version()+1, weights[:len(weights)/2]); code != 400 {
		t.Fatalf("truncated push: %d %s", code, body)
	}
	next := srv.Version() + 1
	if code, body := push(next, weights); code != 200 || srv.Version() != next {
		t.Fatalf("push: %d %s (version %d)", code, body, srv.Version())
	}
}

// A client that gives up while its request waits for a slot is answered at once: its handler
// does not wait for a slot to free.
func TestQueuedCancelReturns(t *testing.T) {
	srv, err := Open(slowCheckpoint(t), Options{Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := newHTTPTest(t, srv)
	long := make(chan struct{})
	go func() {
		defer close(long)
		post(t, hs.URL+"/agentrl/v1/generate", "", infer.Request{Prompt: []int32{1, 2}, MaxTokens: slowMaxSeq - 10, Sampling: infer.Sampling{Temperature: 1}})
	}()
	for srv.met.running.Load() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	body, _ := json.Marshal(infer.Request{Prompt: []int32{1, 2}, MaxTokens: 4})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/agentrl/v1/generate", bytes.NewReader(body))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the queued request was answered %d while the only slot was busy", resp.StatusCode)
	}
	for testutil.CollectAndCount(srv.met.requests) == 0 { // the abandoned request's handler returned
		select {
		case <-long:
			t.Fatal("the handler of the abandoned request waited for the slot")
		case <-time.After(time.Millisecond):
		}
	}
	<-long
}
