package remote

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// documented serves the recorded vLLM or SGLang answers, with edit applied to one of them.
func documented(t *testing.T, d Dialect, edit map[string]string) *httptest.Server {
	t.Helper()
	files := map[Dialect]map[string]string{
		VLLM: {"GET /v1/models": "vllm_models.json", "GET /version": "vllm_version.json",
			"POST /v1/completions": "vllm_completions.json"},
		SGLang: {"GET /get_model_info": "sglang_model_info.json", "GET /get_server_info": "sglang_server_info.json",
			"POST /generate": "sglang_generate.json"},
	}[d]
	bodies := map[string]string{}
	for route, f := range files {
		b, err := os.ReadFile("testdata/" + f)
		if err != nil {
			t.Fatal(err)
		}
		bodies[route] = string(b)
	}
	for route, b := range edit {
		bodies[route] = b
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := bodies[r.Method+" "+r.URL.Path]
		if !ok || b == "" {
			http.Error(w, `{"detail":"Not Found"}`, http.StatusNotFound)
			return
		}
		w.Write([]byte(b))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func probeOpts() ProbeOptions {
	return ProbeOptions{Request: request(1), MaxContext: 512}
}

// The recorded answers of vLLM and SGLang pass the probe, and a real agentrl route does too.
func TestProbeAcceptsDocumentedServers(t *testing.T) {
	eng := tinyEngine(t)
	ag := http.NewServeMux()
	ag.Handle("/", agentrlHandler(eng))
	ag.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"object":"list","data":[{"id":"agentrl","object":"model","max_model_len":96,"version":4}]}`))
	})
	agSrv := httptest.NewServer(ag)
	defer agSrv.Close()
	v := documented(t, VLLM, nil)
	s := documented(t, SGLang, nil)
	r := newRouter(t, Options{Servers: []Server{
		{Name: "a", URL: agSrv.URL, Dialect: Agentrl},
		{Name: "v", URL: v.URL, Dialect: VLLM, Model: "agentrl-calc"},
		{Name: "s", URL: s.URL, Dialect: SGLang},
	}})
	infos, err := r.Probe(context.Background(), ProbeOptions{Request: request(1), MaxContext: 96})
	if err != nil {
		t.Fatal(err)
	}
	want := []Info{
		{Name: "a", Model: "agentrl", MaxContext: 96},
		{Name: "v", Model: "agentrl-calc", MaxContext: 1024, Release: "0.11.0"},
		{Name: "s", Model: "/runs/calc/published/v3", Release: "0.5.4"},
	}
	for i := range want {
		if infos[i] != want[i] {
			t.Errorf("server %d: %+v, want %+v", i, infos[i], want[i])
		}
	}
	for _, st := range r.Stats() {
		if st.Outstanding != 0 || !st.Healthy {
			t.Errorf("probe left %+v", st)
		}
	}
}

// Each capability a run relies on is checked before the run starts, with an error that says
// what is wrong and on which server.
func TestProbeRefuses(t *testing.T) {
	cases := []struct {
		name    string
		dialect Dialect
		model   string
		edit    map[string]string
		opts    func(*ProbeOptions)
		want    string
	}{
		{name: "vllm-model", dialect: VLLM, model: "other", want: `serves ["agentrl-calc"], not the configured model "other"`},
		{name: "vllm-old", dialect: VLLM, edit: map[string]string{"GET /version": `{"version":"0.9.2"}`},
			want: "release 0.9.2 is older than 0.10.2"},
		{name: "vllm-context", dialect: VLLM, opts: func(o *ProbeOptions) { o.MaxContext = 4096 },
			want: "at most 1024 tokens; the run generates up to 4096"},
		{name: "vllm-no-token-ids", dialect: VLLM, edit: map[string]string{
			"POST /v1/completions": `{"choices":[{"text":"x","logprobs":{"token_logprobs":[-0.1],"tokens":["x"]},"finish_reason":"length"}]}`},
			want: "generating one token"},
		{name: "vllm-raw-logprobs", dialect: VLLM, opts: func(o *ProbeOptions) { o.Request.Sampling.Temperature = 0.7 },
			want: "declare processed_logprobs"},
		{name: "vllm-no-models", dialect: VLLM, edit: map[string]string{"GET /v1/models": ""}, want: "GET /v1/models: HTTP 404"},
		{name: "sglang-embedding", dialect: SGLang, edit: map[string]string{
			"GET /get_model_info": `{"model_path":"/m/e5","is_generation":false}`}, want: "not a generation model"},
		{name: "sglang-old", dialect: SGLang, edit: map[string]string{"GET /get_server_info": `{"version":"0.4.1.post3"}`},
			want: "release 0.4.1.post3 is older than 0.4.6"},
		{name: "sglang-no-logprobs", dialect: SGLang, edit: map[string]string{
			"POST /generate": `{"text":"x","output_ids":[5],"meta_info":{"finish_reason":{"type":"length"}}}`},
			want: "no meta_info.output_token_logprobs"},
		{name: "sglang-garbage-info", dialect: SGLang, edit: map[string]string{"GET /get_model_info": `<html>`},
			want: "protocol violation"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := documented(t, c.dialect, c.edit)
			model := c.model
			if model == "" && c.dialect == VLLM {
				model = "agentrl-calc"
			}
			r := newRouter(t, Options{Servers: []Server{{Name: "x", URL: srv.URL, Dialect: c.dialect, Model: model}}})
			o := probeOpts()
			if c.opts != nil {
				c.opts(&o)
			}
			_, err := r.Probe(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "x ("+string(c.dialect)) {
				t.Fatalf("error %v, want one naming server x and containing %q", err, c.want)
			}
		})
	}
}

// A server that does not answer (down, or failing with 5xx) is ejected, not fatal, while another
// passes; when none answers the probe fails.
func TestProbeUnreachable(t *testing.T) {
	v := documented(t, VLLM, nil)
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer failing.Close()
	servers := []Server{
		{Name: "v", URL: v.URL, Dialect: VLLM, Model: "agentrl-calc"},
		{Name: "dead", URL: url, Dialect: VLLM, Model: "agentrl-calc"},
		{Name: "busy", URL: failing.URL, Dialect: SGLang},
	}
	r := newRouter(t, Options{Servers: servers})
	infos, err := r.Probe(context.Background(), probeOpts())
	if err != nil {
		t.Fatal(err)
	}
	if infos[0].Model != "agentrl-calc" || infos[0].Unreachable != nil {
		t.Errorf("server v: %+v", infos[0])
	}
	for i, want := range map[int]string{1: "dead (vllm", 2: "HTTP 503"} {
		if infos[i].Unreachable == nil || !strings.Contains(infos[i].Unreachable.Error(), want) {
			t.Errorf("server %d: %+v, want unreachable with %q", i, infos[i], want)
		}
	}
	if st := r.Stats(); !st[0].Healthy || st[1].Healthy || st[2].Healthy {
		t.Errorf("stats %+v: want only v in rotation", st)
	}
	r2 := newRouter(t, Options{Servers: servers[1:]})
	if _, err := r2.Probe(context.Background(), probeOpts()); err == nil || !strings.Contains(err.Error(), "no inference server answered") {
		t.Fatalf("error %v, want none answered", err)
	}
}

func TestParseRelease(t *testing.T) {
	for s, want := range map[string][3]int{"0.11.0": {0, 11, 0}, "0.10.2+cu128": {0, 10, 2}, "0.5.4.post2": {0, 5, 4},
		"v1.2": {1, 2, 0}, "0.11.0rc1": {0, 11, 0}} {
		got, ok := parseRelease(s)
		if !ok || got != want {
			t.Errorf("%q: %v %v, want %v", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "dev", "x.1"} {
		if _, ok := parseRelease(s); ok {
			t.Errorf("%q parsed", s)
		}
	}
}
