package remote

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/internal/envref"
)

// Errors of a Pool's episodes, besides the client's.
var (
	// ErrUnreachable: no server of the environment answered for PoolConfig.Unreachable.
	ErrUnreachable = errors.New("remote: no server of the environment answers")
	// ErrResetChanged: a server started a different task for a seed than it did before.
	ErrResetChanged = errors.New("remote: reset gave a different task for the same seed")
)

// maxSeen bounds the seeds whose first observation a pool remembers to check determinism.
const maxSeen = 1 << 17

// Backoff of a server that failed: 100ms doubling to 10s.
const (
	backoffMin = 100 * time.Millisecond
	backoffMax = 10 * time.Second
)

// Pool is one remote environment served by one or more replicas: it routes each episode to the
// replica with the fewest sessions in use (at most MaxSessions each), over shared keep-alive
// connections; a replica that does not answer is left alone for a backoff that doubles with each
// failure, and resets go to the others meanwhile. When none has answered for
// PoolConfig.Unreachable, the pool is dead: every call fails with ErrUnreachable and OnDead is
// called once. Failures are counted by reason (Failures). Safe for concurrent use.
type Pool struct {
	name        string
	cfg         PoolConfig
	opts        ClientOptions
	transport   *http.Transport
	md          Metadata
	tools       map[string]bool
	maxSessions int
	reps        []*replica
	onDead      func(error)
	now         func() time.Time

	mu           sync.Mutex // protects everything below and the replicas' mutable fields
	wake         chan struct{}
	allDownSince time.Time
	dead         error
	seen         map[int64]uint64
	reasons      map[string]int64
	episodes     int64
}

type replica struct {
	url    string
	client *Client // for calls outside a session (metadata, expert); safe for concurrent use

	outstanding int
	downUntil   time.Time
	fails       int
	lastErr     error
	checked     bool // its metadata was read and agrees with the pool's
	excluded    bool // its metadata disagrees: it is never used
}

// OpenPool reads every replica's metadata (retrying for up to cfg.Unreachable until at least
// one answers), checks that it is sound and that the replicas agree, and returns the pool of the
// environment named name in the run. onDead, when not nil, is called once if the pool dies.
func OpenPool(ctx context.Context, name string, cfg PoolConfig, onDead func(error)) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("env %s: %w", name, err)
	}
	cfg = cfg.withDefaults()
	opts := ClientOptions{Timeout: cfg.Timeout}
	if cfg.APIKey != "" {
		key, err := envref.Resolve(cfg.APIKey)
		if err != nil {
			return nil, fmt.Errorf("env %s: remote.api_key: %w", name, err)
		}
		opts.APIKey = key
	}
	urls := cfg.URLs()
	tr := newTransport()
	tr.MaxIdleConnsPerHost = cfg.MaxSessions
	tr.MaxIdleConns = cfg.MaxSessions * len(urls)
	opts.Transport = tr
	p := &Pool{name: name, cfg: cfg, opts: opts, transport: tr, onDead: onDead, now: time.Now,
		wake: make(chan struct{}), seen: map[int64]uint64{}, reasons: map[string]int64{}}
	for _, u := range urls {
		c, err := Dial(u, opts)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", name, err)
		}
		p.reps = append(p.reps, &replica{url: u, client: c})
	}
	deadline := p.now().Add(cfg.Unreachable)
	var errs []string
	for attempt := 0; ; attempt++ {
		errs = errs[:0]
		var wg sync.WaitGroup
		results := make([]error, len(p.reps))
		mds := make([]Metadata, len(p.reps))
		for i, r := range p.reps {
			if r.checked {
				continue
			}
			wg.Go(func() { mds[i], results[i] = fetchMetadata(ctx, r.client) })
		}
		wg.Wait()
		for i, r := range p.reps {
			if r.checked {
				continue
			}
			if results[i] != nil {
				if isProtocolOrAuth(results[i]) {
					return nil, fmt.Errorf("env %s: server %s: %w", name, r.url, results[i])
				}
				errs = append(errs, fmt.Sprintf("%s: %v", r.url, results[i]))
				continue
			}
			if err := p.adopt(r, mds[i]); err != nil {
				return nil, err
			}
		}
		if p.md.Protocol != 0 {
			break
		}
		wait := min(backoffMin<<min(attempt, 10), backoffMax)
		if p.now().Add(wait).After(deadline) {
			return nil, fmt.Errorf("env %s: %w within %v: %s", name, ErrUnreachable, cfg.Unreachable, strings.Join(errs, "; "))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("env %s: %w", name, ctx.Err())
		case <-time.After(wait):
		}
	}
	for _, r := range p.reps {
		if !r.checked {
			r.fails, r.downUntil, r.lastErr = 1, p.now().Add(backoffMin), errors.New("did not answer at start")
		}
	}
	return p, nil
}

func fetchMetadata(ctx context.Context, c *Client) (Metadata, error) {
	var md Metadata
	if err := c.call(ctx, "metadata", http.MethodGet, "/metadata", nil, &md); err != nil {
		return md, err
	}
	return md, checkMetadata(md)
}

// checkMetadata refuses metadata that cannot be true.
func checkMetadata(md Metadata) error {
	switch {
	case md.Protocol != ProtocolVersion:
		return fmt.Errorf("%w: server speaks protocol %d, this client %d", ErrProtocol, md.Protocol, ProtocolVersion)
	case md.Name == "":
		return fmt.Errorf("%w: metadata without a name", ErrProtocol)
	case md.Train.Hi <= md.Train.Lo || md.Heldout.Hi <= md.Heldout.Lo:
		return fmt.Errorf("%w: metadata's train %v and held-out %v seed ranges must be non-empty [lo, hi)", ErrProtocol, md.Train, md.Heldout)
	case md.Train.Lo < md.Heldout.Hi && md.Heldout.Lo < md.Train.Hi:
		return fmt.Errorf("%w: metadata's train %v and held-out %v seed ranges overlap", ErrProtocol, md.Train, md.Heldout)
	case md.MaxSessions < 0:
		return fmt.Errorf("%w: metadata's max_sessions %d is negative", ErrProtocol, md.MaxSessions)
	}
	seen := map[string]bool{}
	for _, t := range md.Tools {
		if t.Name == "" || seen[t.Name] {
			return fmt.Errorf("%w: metadata's tool %q is unnamed or listed twice", ErrProtocol, t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}

// adopt takes a replica's metadata: the first sets the pool's, later ones must agree with it.
func (p *Pool) adopt(r *replica, md Metadata) error {
	if p.md.Protocol == 0 {
		p.md = md
		p.tools = map[string]bool{}
		for _, t := range md.Tools {
			p.tools[t.Name] = true
		}
		p.maxSessions = p.cfg.MaxSessions
		if md.MaxSessions > 0 {
			p.maxSessions = min(p.maxSessions, md.MaxSessions)
		}
	} else if d := metadataDiff(p.md, md); d != "" {
		return fmt.Errorf("env %s: server %s serves another environment than %s: %s", p.name, r.url, p.reps[0].url, d)
	}
	r.checked = true
	return nil
}

func metadataDiff(a, b Metadata) string {
	names := func(m Metadata) []string {
		var out []string
		for _, t := range m.Tools {
			out = append(out, t.Name)
		}
		sort.Strings(out)
		return out
	}
	switch {
	case a.Name != b.Name:
		return fmt.Sprintf("name %q, not %q", b.Name, a.Name)
	case a.Train != b.Train || a.Heldout != b.Heldout:
		return fmt.Sprintf("seeds train %v held-out %v, not %v and %v", b.Train, b.Heldout, a.Train, a.Heldout)
	case a.Expert != b.Expert:
		return fmt.Sprintf("expert %v, not %v", b.Expert, a.Expert)
	case !slices.Equal(names(a), names(b)):
		return fmt.Sprintf("tools %v, not %v", names(b), names(a))
	}
	return ""
}

// URLs lists the pool's servers.
func (p *Pool) URLs() []string { return p.cfg.URLs() }

// Metadata is what the servers report (the first to answer; the others agree).
func (p *Pool) Metadata() Metadata { return p.md }

// Spec is the environment as a registry holds it, under the run's name for it. Its Expert asks
// the servers (POST /expert) when their metadata offers one and otherwise fails every action
// with an error saying so; its Corpus plays episodes on the servers (PoolConfig.Unreachable
// bounds it).
func (p *Pool) Spec() env.Spec {
	return env.Spec{
		Name:        p.name,
		Description: p.md.Description,
		Train:       env.SeedRange{Lo: p.md.Train.Lo, Hi: p.md.Train.Hi},
		Heldout:     env.SeedRange{Lo: p.md.Heldout.Lo, Hi: p.md.Heldout.Hi},
		New:         func() (env.Env, error) { return &poolEnv{p: p}, nil },
		Expert: func(seed int64, noise float64, rng *rand.Rand) env.Agent {
			if !p.md.Expert {
				return noExpert{p.name}
			}
			return &expertAgent{p: p, seed: seed, noise: noise, rngSeed: rng.Uint64()}
		},
		Corpus: p.corpus,
	}
}

type noExpert struct{ name string }

func (n noExpert) Act(context.Context, string) (string, error) {
	return "", fmt.Errorf("remote env %s: its servers offer no expert (metadata \"expert\": false), so it has no demonstrations", n.name)
}

// Close releases the pool's idle connections.
func (p *Pool) Close() { p.transport.CloseIdleConnections() }

// acquire takes a session slot on the live replica with the fewest in use, waiting while all
// are full or backing off, and declaring the pool dead when none has answered for Unreachable.
// Without slot it picks the replica the same way but takes no slot (a call outside a session,
// which an episode holding its slot makes: the expert).
func (p *Pool) acquire(ctx context.Context, slot bool) (*replica, error) {
	for {
		p.mu.Lock()
		if p.dead != nil {
			err := p.dead
			p.mu.Unlock()
			return nil, err
		}
		now := p.now()
		var best *replica
		var earliest time.Time
		live := 0
		for _, r := range p.reps {
			if now.Before(r.downUntil) {
				if earliest.IsZero() || r.downUntil.Before(earliest) {
					earliest = r.downUntil
				}
				continue
			}
			live++
			if (!slot || r.outstanding < p.maxSessions) && (best == nil || r.outstanding < best.outstanding) {
				best = r
			}
		}
		if best != nil {
			if slot {
				best.outstanding++
			}
			p.mu.Unlock()
			return best, nil
		}
		var wait <-chan time.Time
		if live == 0 {
			if p.allDownSince.IsZero() {
				p.allDownSince = now
			}
			if now.Sub(p.allDownSince) >= p.cfg.Unreachable {
				p.dead = fmt.Errorf("env %s: %w: none of %s answered for %v (last: %s)", p.name, ErrUnreachable,
					strings.Join(p.cfg.URLs(), ", "), p.cfg.Unreachable, p.lastErrors())
				err, onDead := p.dead, p.onDead
				p.mu.Unlock()
				if onDead != nil {
					onDead(err)
				}
				return nil, err
			}
			d := min(earliest.Sub(now), p.allDownSince.Add(p.cfg.Unreachable).Sub(now))
			wait = time.After(max(d, time.Millisecond))
		}
		woken := p.wake
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("env %s: waiting for a server: %w", p.name, ctx.Err())
		case <-woken:
		case <-wait:
		}
	}
}

func (p *Pool) lastErrors() string {
	var out []string
	for _, r := range p.reps {
		if r.lastErr != nil {
			out = append(out, fmt.Sprintf("%s: %v", r.url, r.lastErr))
		}
	}
	return strings.Join(out, "; ")
}

// release gives back a slot of r.
func (p *Pool) release(r *replica) {
	p.mu.Lock()
	r.outstanding--
	close(p.wake)
	p.wake = make(chan struct{})
	p.mu.Unlock()
}

// up records that r answered.
func (p *Pool) up(r *replica) {
	p.mu.Lock()
	if r.excluded {
		p.mu.Unlock()
		return
	}
	r.fails, r.downUntil, r.lastErr = 0, time.Time{}, nil
	p.allDownSince = time.Time{}
	p.mu.Unlock()
}

// down leaves r alone for a backoff that doubles with each failure in a row.
func (p *Pool) down(r *replica, err error) {
	p.mu.Lock()
	if r.excluded {
		p.mu.Unlock()
		return
	}
	r.fails++
	d := min(backoffMin<<min(r.fails-1, 10), backoffMax)
	r.downUntil, r.lastErr = p.now().Add(d), err
	p.mu.Unlock()
}

// check makes sure r's metadata was read and agrees, reading it on r's first use when it did not
// answer at start.
func (p *Pool) check(ctx context.Context, r *replica) error {
	p.mu.Lock()
	ok := r.checked
	p.mu.Unlock()
	if ok {
		return nil
	}
	md, err := fetchMetadata(ctx, r.client)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := metadataDiff(p.md, md); d != "" {
		// Not the same environment: never route to it again in this run.
		err := fmt.Errorf("%w: server %s serves another environment than %s: %s", ErrProtocol, r.url, p.reps[0].url, d)
		r.downUntil, r.lastErr, r.excluded = p.now().Add(100*365*24*time.Hour), err, true
		return err
	}
	r.checked = true
	return nil
}

// withReplica runs op on a replica, moving to another replica when one does not answer (op must
// be safe to repeat: a reset or the expert). With slot, op opens a session and its success keeps
// the replica's slot for it.
func (p *Pool) withReplica(ctx context.Context, slot bool, op func(*replica) error) (*replica, error) {
	for {
		r, err := p.acquire(ctx, slot)
		if err != nil {
			p.count(err)
			return nil, err
		}
		err = p.check(ctx, r)
		if err == nil {
			err = op(r)
		}
		if err == nil {
			p.up(r)
			return r, nil
		}
		if slot {
			p.release(r)
		}
		if ctx.Err() == nil && retryable(err) {
			p.count(err)
			p.down(r, err)
			continue
		}
		if errors.Is(err, ErrProtocol) && !errors.As(err, new(*Error)) {
			p.down(r, err) // a server answering nonsense is not trusted with the next episode at once
		}
		p.count(err)
		return nil, err
	}
}

// do runs a call outside a session (the expert).
func (p *Pool) do(ctx context.Context, call func(*Client) error) error {
	_, err := p.withReplica(ctx, false, func(r *replica) error { return call(r.client) })
	return err
}

// retryable reports whether err says the server, not the request, failed, so the same request
// may go to another replica: no answer, a gateway's 502/503/504, or a full server.
func retryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		switch e.Code {
		case CodeEnvError, CodeEnvTimeout, CodePoisoned:
			return false
		}
		return errors.Is(err, ErrUnavailable) || e.Status == http.StatusBadGateway ||
			e.Status == http.StatusServiceUnavailable || e.Status == http.StatusGatewayTimeout
	}
	if errors.Is(err, ErrProtocol) || errors.Is(err, ErrResetChanged) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || isConnError(err)
}

func isConnError(err error) bool {
	s := err.Error()
	return strings.Contains(s, "connection refused") || strings.Contains(s, "connection reset") ||
		strings.Contains(s, "EOF") || strings.Contains(s, "broken pipe")
}

// isProtocolOrAuth: at start, an answer that will not get better by waiting.
func isProtocolOrAuth(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden || e.Status == http.StatusNotFound
	}
	return errors.Is(err, ErrProtocol)
}

// Reason names the kind of failure err is, as Failures counts it.
func Reason(err error) string {
	var e *Error
	switch {
	case errors.Is(err, ErrUnreachable):
		return "unreachable"
	case errors.Is(err, ErrResetChanged):
		return "reset_changed_task"
	case errors.As(err, &e):
		switch e.Code {
		case CodeEnvError, CodeEnvTimeout, CodePoisoned, CodeSessionNotFound, CodeSessionExpired, CodeSessionEvicted,
			CodeTooManySessions, CodeShuttingDown, CodeSessionBusy, CodeNotReset, CodeEpisodeDone, CodeTooLarge,
			CodeBadRequest, CodeNoExpert, CodeNotFound:
			return fmt.Sprintf("http_%d_%s", e.Status, e.Code)
		}
		return fmt.Sprintf("http_%d", e.Status)
	case errors.Is(err, ErrProtocol):
		return "bad_answer"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return "connection"
}

func (p *Pool) count(err error) {
	if err == nil {
		return
	}
	p.mu.Lock()
	p.reasons[Reason(err)]++
	p.mu.Unlock()
}

// Failures counts the failed calls by Reason, including those retried on another replica.
func (p *Pool) Failures() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int64, len(p.reasons))
	for k, v := range p.reasons {
		out[k] = v
	}
	return out
}

// Episodes is how many episodes the pool started.
func (p *Pool) Episodes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.episodes
}

// DescribeFailures is Failures as one line ("" when none): "timeout 3, bad_answer 1".
func (p *Pool) DescribeFailures() string {
	f := p.Failures()
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, f[k]))
	}
	return strings.Join(parts, ", ")
}

// sameTask checks that seed's task is the one its first reset showed.
func (p *Pool) sameTask(seed int64, obs env.Observation) error {
	h := fnv.New64a()
	h.Write([]byte(obs.System))
	h.Write([]byte{0})
	h.Write([]byte(obs.Text))
	sum := h.Sum64()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.episodes++
	if old, ok := p.seen[seed]; ok {
		if old != sum {
			return fmt.Errorf("remote env %s: %w: seed %d", p.name, ErrResetChanged, seed)
		}
		return nil
	}
	if len(p.seen) < maxSeen {
		p.seen[seed] = sum
	}
	return nil
}

// poolEnv is one episode at a time on the pool: a session on one replica, holding one of its
// slots from Reset to Close.
type poolEnv struct {
	p      *Pool
	rep    *replica
	c      *Client
	done   bool
	closed bool
}

func (e *poolEnv) Reset(ctx context.Context, seed int64) (env.Observation, error) {
	if e.closed {
		return env.Observation{}, errors.New("remote env: reset after Close")
	}
	e.end()
	var obs env.Observation
	var c *Client
	r, err := e.p.withReplica(ctx, true, func(r *replica) error {
		var err error
		if c, err = Dial(r.url, e.p.opts); err != nil {
			return err
		}
		obs, err = c.Reset(ctx, seed)
		return err
	})
	if err != nil {
		return env.Observation{}, fmt.Errorf("env %s: %w", e.p.name, err)
	}
	e.rep, e.c, e.done = r, c, false
	if err := e.p.sameTask(seed, obs); err != nil {
		e.p.count(err)
		e.end()
		return env.Observation{}, err
	}
	return obs, nil
}

func (e *poolEnv) Step(ctx context.Context, action string) (env.Transition, error) {
	if e.closed {
		return env.Transition{}, errors.New("remote env: step after Close")
	}
	if e.done {
		return env.Transition{}, fmt.Errorf("remote env %s: %w", e.p.name, env.ErrEpisodeDone)
	}
	if e.c == nil {
		return env.Transition{}, fmt.Errorf("remote env %s: %w", e.p.name, env.ErrNotReset)
	}
	tr, err := e.c.Step(ctx, action)
	if err == nil && len(e.p.tools) > 0 {
		for _, tc := range tr.ToolCalls {
			if !e.p.tools[tc.Name] {
				err = fmt.Errorf("remote env step: %w: tool %q is not among the tools of the server's metadata", ErrProtocol, tc.Name)
				break
			}
		}
	}
	if err != nil {
		e.p.count(err)
		if retryable(err) && ctx.Err() == nil {
			e.p.down(e.rep, err)
		}
		e.end()
		return env.Transition{}, fmt.Errorf("env %s: %w", e.p.name, err)
	}
	e.done = tr.Done
	return tr, nil
}

// end closes the session, if any, and gives back its slot. A close that fails is counted, not
// returned: the episode it ends is whole.
func (e *poolEnv) end() {
	if e.c == nil {
		return
	}
	if err := e.c.Close(); err != nil {
		e.p.count(err)
	}
	e.p.release(e.rep)
	e.c, e.rep = nil, nil
}

func (e *poolEnv) Close() error {
	if !e.closed {
		e.end()
		e.closed = true
	}
	return nil
}

// corpusEpisodes bounds the episodes Corpus plays on the servers.
const corpusEpisodes = 128

// corpus is the tokenizer's text: the tool list and, for up to corpusEpisodes train seeds, the
// episode's text (played by the expert when there is one, else the first observation), repeated
// to n samples.
func (p *Pool) corpus(n int) []string {
	if n <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.Unreachable)
	defer cancel()
	episodes := min(n, corpusEpisodes)
	span := p.md.Train.Hi - p.md.Train.Lo
	results := make([][]string, episodes)
	var texts []string
	for _, t := range p.md.Tools {
		texts = append(texts, t.Name+": "+t.Description)
	}
	spec := p.Spec()
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range episodes {
		seed := p.md.Train.Lo + int64(i)*max(span/int64(episodes), 1)%span
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			e := &poolEnv{p: p}
			defer e.Close()
			var got []string
			if p.md.Expert {
				ep, _ := env.Play(ctx, e, spec.Expert(seed, 0, rand.New(rand.NewPCG(uint64(seed), 1))), seed, 16)
				got = append(got, ep.Start.System, ep.Start.Text)
				for _, s := range ep.Steps {
					got = append(got, s.Action, s.Transition.Observation)
				}
			} else if obs, err := e.Reset(ctx, seed); err == nil {
				got = append(got, obs.System, obs.Text)
			}
			results[i] = got
		})
	}
	wg.Wait()
	for _, got := range results { // in seed order, so the tokenizer is the same every time
		for _, g := range got {
			if g != "" {
				texts = append(texts, g)
			}
		}
	}
	if len(texts) == 0 {
		texts = []string{p.name + " " + p.md.Description}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = texts[i%len(texts)]
	}
	return out
}
