package dashboard

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentrl/agentrl/internal/httpserve"
	"io/fs"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

//go:embed assets
var assets embed.FS

// MaxPoints is the most x values a curve request returns unless it asks for fewer.
const MaxPoints = 4000

// Options configure a Server.
type Options struct {
	// Key, when set, is required: as "Authorization: Bearer KEY", or once as ?key=KEY, which sets
	// a cookie for the rest of the browser session.
	Key string
	// Refresh is the least time between two reads of a run's files (default 1s).
	Refresh time.Duration
}

// run is one run directory the server shows.
type run struct {
	name, dir string
	curves    *curves
	trajs     *trajIndex

	mu        sync.Mutex
	lastRead  time.Time
	lastTrajs time.Time
	cfg       map[string]string
	cfgErr    string
}

// Server serves the dashboard of a fixed set of run directories. Make it with New.
type Server struct {
	opts Options
	runs []*run
	mux  *http.ServeMux
	reg  *prometheus.Registry
}

// New makes a server over dirs. A directory that holds no metrics.jsonl but has run directories
// inside (a runs/ folder) stands for each of them. Runs are named by their directory's base name.
func New(dirs []string, opts Options) (*Server, error) {
	if opts.Refresh <= 0 {
		opts.Refresh = time.Second
	}
	if err := checkKey(opts.Key); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, mux: http.NewServeMux(), reg: prometheus.NewRegistry()}
	names := map[string]int{}
	add := func(dir string) {
		name := filepath.Base(filepath.Clean(dir))
		names[name]++
		if k := names[name]; k > 1 {
			name = fmt.Sprintf("%s-%d", name, k)
		}
		s.runs = append(s.runs, &run{name: name, dir: dir,
			curves: newCurves(filepath.Join(dir, "metrics.jsonl")),
			trajs:  newTrajIndex(filepath.Join(dir, "trajectories.atrs"))})
	}
	for _, d := range dirs {
		st, err := os.Stat(d)
		if err != nil {
			return nil, fmt.Errorf("dashboard: %w", err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("dashboard: %s is not a run directory", d)
		}
		if isRun(d) {
			add(d)
			continue
		}
		ents, err := os.ReadDir(d)
		if err != nil {
			return nil, fmt.Errorf("dashboard: %w", err)
		}
		found := false
		for _, e := range ents {
			if sub := filepath.Join(d, e.Name()); e.IsDir() && isRun(sub) {
				add(sub)
				found = true
			}
		}
		if !found { // a run that has not written anything yet
			add(d)
		}
	}
	if len(s.runs) == 0 {
		return nil, errors.New("dashboard: no run directories given")
	}
	s.reg.MustRegister(&collector{s: s})
	s.routes()
	return s, nil
}

// checkKey refuses a key that a request could match by accident or that a header cannot carry: a
// blank one (a space is as good as none, and ?key=%20 would open the page), one with spaces at
// either end, or one with control characters.
func checkKey(key string) error {
	if key == "" {
		return nil
	}
	if strings.TrimSpace(key) == "" {
		return errors.New("dashboard: the key is blank: choose a key of visible characters")
	}
	if strings.TrimSpace(key) != key {
		return errors.New("dashboard: the key starts or ends with a space: choose a key of visible characters")
	}
	if strings.ContainsFunc(key, unicode.IsControl) {
		return errors.New("dashboard: the key holds control characters: choose a key of visible characters")
	}
	return nil
}

// updated is when the run last wrote its metrics or config, in Unix milliseconds (0: neither).
func updated(dir string) int64 {
	var t int64
	for _, f := range []string{"metrics.jsonl", "config.yaml"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t = max(t, st.ModTime().UnixMilli())
		}
	}
	return t
}

func isRun(dir string) bool {
	for _, f := range []string{"metrics.jsonl", "config.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return true
		}
	}
	return false
}

// Handler is the dashboard: the page, its API under /api/ and /metrics.
func (s *Server) Handler() http.Handler { return s.auth(s.mux) }

// Runs lists the run names in order.
func (s *Server) Runs() []string {
	out := make([]string, len(s.runs))
	for i, r := range s.runs {
		out[i] = r.name
	}
	return out
}

func (s *Server) routes() {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err)
	}
	s.mux.Handle("GET /", http.FileServerFS(static))
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("GET /api/runs", s.handleRuns)
	s.mux.HandleFunc("GET /api/run/{name}/keys", s.withRun(s.handleKeys))
	s.mux.HandleFunc("GET /api/run/{name}/series", s.withRun(s.handleSeries))
	s.mux.HandleFunc("GET /api/run/{name}/events", s.withRun(s.handleEvents))
	s.mux.HandleFunc("GET /api/run/{name}/trajs", s.withRun(s.handleTrajs))
	s.mux.HandleFunc("GET /api/run/{name}/traj/{i}", s.withRun(s.handleTraj))
	s.mux.HandleFunc("GET /api/compare", s.handleCompare)
}

// auth requires the key when one is set.
func (s *Server) auth(next http.Handler) http.Handler {
	if s.opts.Key == "" {
		return next
	}
	want := []byte(s.opts.Key)
	ok := func(got string) bool { return got != "" && subtle.ConstantTimeCompare([]byte(got), want) == 1 }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found && ok(b) {
			next.ServeHTTP(w, r)
			return
		}
		if c, err := r.Cookie("agentrl_dashboard_key"); err == nil && ok(c.Value) {
			next.ServeHTTP(w, r)
			return
		}
		if k := r.URL.Query().Get("key"); ok(k) {
			http.SetCookie(w, &http.Cookie{Name: "agentrl_dashboard_key", Value: k, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			next.ServeHTTP(w, r)
			return
		}
		http.Error(w, "missing or wrong key: open the page once with ?key=KEY, or send Authorization: Bearer KEY", http.StatusUnauthorized)
	})
}

func (s *Server) find(name string) *run {
	for _, r := range s.runs {
		if r.name == name {
			return r
		}
	}
	return nil
}

// fresh reads what the run appended, at most once per Refresh.
func (s *Server) fresh(r *run) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.lastRead) < s.opts.Refresh {
		return
	}
	r.lastRead = time.Now()
	_ = r.curves.refresh() // a file being replaced is read again on the next request
	if r.cfg == nil {
		cfg, err := flatConfig(filepath.Join(r.dir, "config.yaml"))
		if err != nil {
			r.cfgErr = err.Error()
		} else {
			r.cfg, r.cfgErr = cfg, ""
		}
	}
}

func (s *Server) freshTrajs(r *run) {
	r.mu.Lock()
	due := time.Since(r.lastTrajs) >= s.opts.Refresh
	if due {
		r.lastTrajs = time.Now()
	}
	r.mu.Unlock()
	if due {
		_ = r.trajs.refresh()
	}
}

func (s *Server) withRun(h func(http.ResponseWriter, *http.Request, *run)) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		r := s.find(req.PathValue("name"))
		if r == nil {
			http.Error(w, "no run "+strconv.Quote(req.PathValue("name")), http.StatusNotFound)
			return
		}
		s.fresh(r)
		h(w, req, r)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	if err := enc.Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func (s *Server) handleRuns(w http.ResponseWriter, req *http.Request) {
	if _, err := params(req); err != nil {
		badRequest(w, err)
		return
	}
	out := make([]runInfo, len(s.runs))
	for i, r := range s.runs {
		s.fresh(r)
		out[i] = r.curves.info(r.name, r.dir)
		out[i].Updated = updated(r.dir)
	}
	writeJSON(w, out)
}

func (s *Server) handleKeys(w http.ResponseWriter, req *http.Request, r *run) {
	if _, err := params(req); err != nil {
		badRequest(w, err)
		return
	}
	writeJSON(w, r.curves.keys())
}

// params returns the request's query, refusing a parameter not among allowed (key, the access
// key, is always allowed) and one given twice: a misspelt or repeated filter is an error, not a
// filter silently dropped.
func params(req *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(req.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("bad query: %w", err)
	}
	for k, vs := range q {
		if k == "key" {
			continue
		}
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return nil, fmt.Errorf("unknown query parameter %q: this route takes none", k)
			}
			return nil, fmt.Errorf("unknown query parameter %q: this route takes %s", k, strings.Join(allowed, ", "))
		}
		if len(vs) > 1 {
			return nil, fmt.Errorf("query parameter %q given %d times", k, len(vs))
		}
	}
	return q, nil
}

// intParam reads q's name as an integer in [lo, hi]; def when absent or empty.
func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%s=%s: want an integer from %d to %d", name, strconv.Quote(v), lo, hi)
	}
	return n, nil
}

// floatParam reads q's name as a finite number; nil when absent or empty.
func floatParam(q url.Values, name string) (*float64, error) {
	v := q.Get(name)
	if v == "" {
		return nil, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("%s=%s: want a finite number", name, strconv.Quote(v))
	}
	return &f, nil
}

func badRequest(w http.ResponseWriter, err error) { http.Error(w, err.Error(), http.StatusBadRequest) }

// phaseParam reads q's phase: "" for the whole run, else a phase some of rs logged.
func phaseParam(q url.Values, rs ...*run) (string, error) {
	p := q.Get("phase")
	if p == "" {
		return "", nil
	}
	var known []string
	for _, r := range rs {
		if r.curves.hasPhase(p) {
			return p, nil
		}
		for _, n := range r.curves.phaseNames() {
			if !slices.Contains(known, n) {
				known = append(known, n)
			}
		}
	}
	return "", fmt.Errorf("phase=%s: no such phase logged (phases: %s)", strconv.Quote(p), strings.Join(known, ", "))
}

func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (s *Server) handleSeries(w http.ResponseWriter, req *http.Request, r *run) {
	q, err := params(req, "keys", "max", "phase")
	var n int
	var phase string
	if err == nil {
		n, err = intParam(q, "max", MaxPoints, 1, MaxPoints)
	}
	if err == nil {
		phase, err = phaseParam(q, r)
	}
	if err != nil {
		badRequest(w, err)
		return
	}
	writeJSON(w, r.curves.series(splitList(q.Get("keys")), n, phase))
}

// eventsReply is what the page draws over the curves.
type eventsReply struct {
	Warnings   []warning   `json:"warnings"`
	Actions    []warning   `json:"actions"`
	Evals      []evalPoint `json:"evals"`
	Phases     []phaseSpan `json:"phases"`
	Thresholds []threshold `json:"thresholds"`
	ConfigErr  string      `json:"config_error,omitempty"`
}

func (s *Server) handleEvents(w http.ResponseWriter, req *http.Request, r *run) {
	if _, err := params(req); err != nil {
		badRequest(w, err)
		return
	}
	ws, acts, evs, ph := r.curves.events()
	r.mu.Lock()
	th, cerr := monitorThresholds(r.cfg), r.cfgErr
	r.mu.Unlock()
	writeJSON(w, eventsReply{Warnings: ws, Actions: acts, Evals: evs, Phases: ph, Thresholds: th, ConfigErr: cerr})
}

func (s *Server) handleTrajs(w http.ResponseWriter, req *http.Request, r *run) {
	q, err := params(req, "phase", "env", "status", "step", "min_reward", "max_reward", "offset", "limit")
	if err != nil {
		badRequest(w, err)
		return
	}
	f := trajFilter{Phase: q.Get("phase"), Env: q.Get("env"), Status: q.Get("status")}
	if f.Status != "" && !slices.Contains(trajStatuses, f.Status) {
		badRequest(w, fmt.Errorf("status=%s: want one of %s", strconv.Quote(f.Status), strings.Join(trajStatuses, ", ")))
		return
	}
	var off, limit int
	f.Step, err = intParam(q, "step", 0, 1, math.MaxInt32)
	if err == nil {
		f.MinReward, err = floatParam(q, "min_reward")
	}
	if err == nil {
		f.MaxReward, err = floatParam(q, "max_reward")
	}
	if err == nil {
		off, err = intParam(q, "offset", 0, 0, math.MaxInt32)
	}
	if err == nil {
		limit, err = intParam(q, "limit", 50, 1, 500)
	}
	if err != nil {
		badRequest(w, err)
		return
	}
	s.freshTrajs(r)
	writeJSON(w, r.trajs.page(f, off, limit))
}

// trajStatuses are the statuses a trajectory can end with (traj.Status's names).
var trajStatuses = []string{"ok", "truncated", "env_error", "timeout"}

func (s *Server) handleTraj(w http.ResponseWriter, req *http.Request, r *run) {
	if _, err := params(req); err != nil {
		badRequest(w, err)
		return
	}
	s.freshTrajs(r)
	i, err := strconv.Atoi(req.PathValue("i"))
	if err != nil {
		http.Error(w, "bad trajectory number", http.StatusBadRequest)
		return
	}
	v, err := r.trajs.view(i)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	writeJSON(w, v)
}

// compareReply overlays runs: each run's curves for the same keys (for one phase, by its step, so
// that runs with phases of different lengths line up), and the config keys on which the runs
// differ.
type compareReply struct {
	Phase  string        `json:"phase,omitempty"`
	Runs   []string      `json:"runs"`
	Series []seriesReply `json:"series"`
	Diff   []configDiff  `json:"diff"`
	Errors []string      `json:"errors,omitempty"`
}

func (s *Server) handleCompare(w http.ResponseWriter, req *http.Request) {
	q, err := params(req, "runs", "keys", "max", "phase")
	var n int
	if err == nil {
		n, err = intParam(q, "max", MaxPoints, 1, MaxPoints)
	}
	if err != nil {
		badRequest(w, err)
		return
	}
	var rs []*run
	for _, name := range splitList(q.Get("runs")) {
		r := s.find(name)
		if r == nil {
			http.Error(w, "no run "+strconv.Quote(name), http.StatusNotFound)
			return
		}
		s.fresh(r)
		rs = append(rs, r)
	}
	phase, err := phaseParam(q, rs...)
	if err != nil {
		badRequest(w, err)
		return
	}
	rep := compareReply{Phase: phase}
	var cfgs []map[string]string
	for _, r := range rs {
		rep.Runs = append(rep.Runs, r.name)
		rep.Series = append(rep.Series, r.curves.series(splitList(q.Get("keys")), n, phase))
		r.mu.Lock()
		cfg, cerr := r.cfg, r.cfgErr
		r.mu.Unlock()
		if cfg == nil {
			cfg = map[string]string{}
			if cerr != "" {
				rep.Errors = append(rep.Errors, r.name+": "+cerr)
			}
		}
		cfgs = append(cfgs, cfg)
	}
	rep.Diff = diffConfigs(cfgs)
	if rep.Diff == nil {
		rep.Diff = []configDiff{}
	}
	writeJSON(w, rep)
}

// CheckAddr refuses a listen address that is not loopback unless public is set and a key is
// given: the dashboard shows a run's trajectories and config to whoever can connect.
func CheckAddr(addr string, public, hasKey bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("dashboard: listen address %q: %w", addr, err)
	}
	if httpserve.Loopback(host) {
		return nil
	}
	if !public {
		return fmt.Errorf("dashboard: %s is not a loopback address: pass --public (and --key) to show the run to other hosts", addr)
	}
	if !hasKey {
		return fmt.Errorf("dashboard: a non-loopback address (%s) needs a key (--key or AGENTRL_DASHBOARD_KEY)", addr)
	}
	return nil
}

// Serve listens on addr and serves the dashboard until ctx ends; ready, when non-nil, is called
// with the address it listens on before serving.
func (s *Server) Serve(ctx context.Context, addr string, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	if ready != nil {
		ready(ln.Addr())
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	return httpserve.Run(ctx, srv, ln, 2*time.Second)
}
