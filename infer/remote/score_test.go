package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrl/agentrl/infer"
)

var scoreReq = infer.ScoreRequest{Tokens: []int32{1, 122, 128, 17, 2}, Start: 2}
var scoreWant = []float32{-0.0215, -1.2034, -0.0007}

// fixedServer answers every POST to path with body (status 200) and records the request.
func fixedServer(t *testing.T, path string, body []byte, got *map[string]any) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		if got != nil {
			json.NewDecoder(r.Body).Decode(got)
		}
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// vLLM scores through prompt_logprobs: its documented answer gives the logprob of each prompt
// token from start on, read by the token's own id (not the likeliest one at a position).
func TestVLLMScore(t *testing.T) {
	body, err := os.ReadFile("testdata/vllm_prompt_logprobs.json")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	srv := fixedServer(t, "/v1/completions", body, &got)
	r := newRouter(t, Options{Servers: []Server{{Name: "v", URL: srv.URL, Dialect: VLLM, Model: "agentrl-teacher"}}})
	lps, err := r.Score(context.Background(), scoreReq)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(lps, scoreWant) {
		t.Fatalf("scored %v, want %v", lps, scoreWant)
	}
	for k, v := range map[string]any{"model": "agentrl-teacher", "prompt_logprobs": 0.0, "max_tokens": 1.0, "temperature": 1.0, "stream": false} {
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("request %s = %v, want %v", k, got[k], v)
		}
	}
	if fmt.Sprint(got["prompt"]) != "[1 122 128 17 2]" {
		t.Errorf("request prompt %v", got["prompt"])
	}
}

// SGLang scores through input_token_logprobs from logprob_start_len.
func TestSGLangScore(t *testing.T) {
	body, err := os.ReadFile("testdata/sglang_input_logprobs.json")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	srv := fixedServer(t, "/generate", body, &got)
	r := newRouter(t, Options{Servers: []Server{{Name: "s", URL: srv.URL, Dialect: SGLang}}})
	lps, err := r.Score(context.Background(), scoreReq)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(lps, scoreWant) {
		t.Fatalf("scored %v, want %v", lps, scoreWant)
	}
	sp, _ := got["sampling_params"].(map[string]any)
	if got["return_logprob"] != true || got["logprob_start_len"] != 2.0 || sp["max_new_tokens"] != 0.0 || fmt.Sprint(got["input_ids"]) != "[1 122 128 17 2]" {
		t.Fatalf("request %v", got)
	}
	// A server that starts at position 0 (a null first) is read from the entries it names.
	full := `{"meta_info":{"input_token_logprobs":[[null,1,null],[-3.1,122,null],[-0.0215,128,null],[-1.2034,17,null],[-0.0007,2,null]]}}`
	lps, err = sglangDialect{}.decodeScore([]byte(full), scoreReq)
	if err != nil || !reflect.DeepEqual(lps, scoreWant) {
		t.Fatalf("from position 0: %v %v", lps, err)
	}
}

func TestAgentrlScore(t *testing.T) {
	var got map[string]any
	srv := fixedServer(t, "/agentrl/v1/score", []byte(`{"logprobs":[-0.0215,-1.2034,-0.0007],"version":4}`), &got)
	r := newRouter(t, Options{Servers: []Server{{Name: "a", URL: srv.URL, Dialect: Agentrl}}})
	lps, err := r.Score(context.Background(), scoreReq)
	if err != nil || !reflect.DeepEqual(lps, scoreWant) {
		t.Fatalf("scored %v %v", lps, err)
	}
	if fmt.Sprint(got["tokens"]) != "[1 122 128 17 2]" || got["start"] != 2.0 {
		t.Fatalf("request %v", got)
	}
}

// An answer that would put a fabricated teacher value into training is refused, not retried.
func TestBadScoresAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dialect Dialect
		path    string
		body    string
		want    string
	}{
		{"short", Agentrl, "/agentrl/v1/score", `{"logprobs":[-1,-1]}`, "2 logprobs for 3"},
		{"long", Agentrl, "/agentrl/v1/score", `{"logprobs":[-1,-1,-1,-1]}`, "4 logprobs for 3"},
		{"positive", Agentrl, "/agentrl/v1/score", `{"logprobs":[-1,0.5,-1]}`, "logprob 0.5"},
		{"infinite", Agentrl, "/agentrl/v1/score", `{"logprobs":[-1,-1e39,-1]}`, "cannot unmarshal"},
		{"null", Agentrl, "/agentrl/v1/score", `{"logprobs":null}`, "no logprobs"},
		{"python nan", Agentrl, "/agentrl/v1/score", `{"logprobs":[NaN,-1,-1]}`, "invalid character"},
		{"vllm other token", VLLM, "/v1/completions", `{"choices":[{"prompt_logprobs":[null,{"122":{"logprob":-1}},{"128":{"logprob":-1}},{"18":{"logprob":-1}},{"2":{"logprob":-1}}]}]}`, "no entry for token 17"},
		{"vllm short", VLLM, "/v1/completions", `{"choices":[{"prompt_logprobs":[null,{"122":{"logprob":-1}}]}]}`, "2 prompt_logprobs entries"},
		{"vllm no prompt_logprobs", VLLM, "/v1/completions", `{"choices":[{"prompt_logprobs":null}]}`, "no prompt_logprobs"},
		{"vllm other prompt", VLLM, "/v1/completions", `{"choices":[{"prompt_token_ids":[1,2],"prompt_logprobs":[]}]}`, "prompt_token_ids differ"},
		{"sglang other id", SGLang, "/generate", `{"meta_info":{"input_token_logprobs":[[-1,128,null],[-1,18,null],[-1,2,null]]}}`, "names token 18"},
		{"sglang null logprob", SGLang, "/generate", `{"meta_info":{"input_token_logprobs":[[-1,128,null],[null,17,null],[-1,2,null]]}}`, "logprob null"},
		{"sglang too few", SGLang, "/generate", `{"meta_info":{"input_token_logprobs":[[-1,17,null],[-1,2,null]]}}`, "2 input_token_logprobs entries"},
		{"sglang none", SGLang, "/generate", `{"meta_info":{}}`, "no meta_info.input_token_logprobs"},
	} {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.Write([]byte(tc.body))
		}))
		s := Server{Name: "a", URL: srv.URL, Dialect: tc.dialect}
		if tc.dialect == VLLM {
			s.Model = "m"
		}
		b := s
		b.Name = "b"
		r := newRouter(t, Options{Servers: []Server{s, b}})
		_, err := r.Score(context.Background(), scoreReq)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("%s: %d calls: a protocol violation is not retried", tc.name, n)
		}
		srv.Close()
	}
}

// A teacher that is down or slow fails the call within the deadline and the router tries the
// next one, as generation does.
func TestScoreDeadlineAndFailover(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then the server notices the client going away
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer slow.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	downURL := down.URL
	down.Close()
	good := fixedServer(t, "/agentrl/v1/score", []byte(`{"logprobs":[-0.0215,-1.2034,-0.0007],"version":4}`), nil)
	r := newRouter(t, Options{Timeout: 200 * time.Millisecond, Attempts: 3, Servers: []Server{
		{Name: "slow", URL: slow.URL, Dialect: Agentrl}, {Name: "down", URL: downURL, Dialect: Agentrl}, {Name: "good", URL: good.URL, Dialect: Agentrl}}})
	// Least outstanding, then fewest sent: slow, down, then good.
	start := time.Now()
	lps, err := r.Score(context.Background(), scoreReq)
	if err != nil || !reflect.DeepEqual(lps, scoreWant) {
		t.Fatalf("scored %v %v", lps, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %s", d)
	}
	r2 := newRouter(t, Options{Timeout: 200 * time.Millisecond, Servers: []Server{{Name: "slow", URL: slow.URL, Dialect: Agentrl}}})
	start = time.Now()
	_, err = r2.Score(context.Background(), scoreReq)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("slow teacher: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("slow teacher took %s", d)
	}
}

func FuzzDecodeScore(f *testing.F) {
	for _, p := range []string{"testdata/vllm_prompt_logprobs.json", "testdata/sglang_input_logprobs.json"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, 2)
	}
	f.Add([]byte(`{"logprobs":[-1,-2,-3]}`), 2)
	f.Add([]byte(`{"meta_info":{"input_token_logprobs":[[null,1,null]]}}`), 1)
	f.Fuzz(func(t *testing.T, body []byte, start int) {
		req := infer.ScoreRequest{Tokens: scoreReq.Tokens, Start: min(max(start, 1), len(scoreReq.Tokens)-1)}
		for _, d := range []scoreDialect{agentrlDialect{}, vllmDialect{}, sglangDialect{}} {
			lps, err := d.decodeScore(body, req)
			if err == nil && d != (agentrlDialect{}) && len(lps) != len(req.Tokens)-req.Start {
				t.Fatalf("%T decoded %d logprobs for %d scored tokens", d, len(lps), len(req.Tokens)-req.Start)
			}
		}
	})
}
