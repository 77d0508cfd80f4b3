package remote

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentrl/agentrl/env"
)

// session is one episode on one environment instance.
type session struct {
	id       string
	seed     int64
	lastUsed atomic.Int64 // unix nanoseconds by the server's clock

	mu     sync.Mutex // held during every env call; protects the fields below
	env    env.Env
	steps  int
	done   bool
	failed bool // the env returned an infrastructure error: do not reuse it
	ended  bool // closed or expired: the env is gone
}

var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

func newSessionID() string {
	var b [16]byte
	rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}

// envCtx applies the server's step timeout.
func (s *Server) envCtx(r *http.Request) (context.Context, context.CancelFunc) {
	if s.opts.StepTimeout > 0 {
		return context.WithTimeout(r.Context(), s.opts.StepTimeout)
	}
	return context.WithCancel(r.Context())
}

func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) error {
	var req resetRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.Seed == nil {
		return errorf(http.StatusBadRequest, CodeBadRequest, `reset needs "seed"`)
	}
	id := req.SessionID
	if id == "" {
		id = newSessionID()
	} else if !sessionIDPattern.MatchString(id) {
		return errorf(http.StatusBadRequest, CodeBadRequest, "session id %q: want 1-128 of [A-Za-z0-9_.-]", id)
	}
	sess, err := s.openSession(id, *req.Seed)
	if err != nil {
		return err
	}
	// The session is locked until its env has answered, so nobody can step it half-made.
	ctx, cancel := s.envCtx(r)
	obs, err := sess.env.Reset(ctx, *req.Seed)
	cancel()
	s.touch(sess)
	if err != nil {
		sess.failed = true
		sess.mu.Unlock()
		s.endSession(sess)
		status, code := envErrorStatus(err)
		return errorf(status, code, "reset seed %d: %v", *req.Seed, err)
	}
	sess.mu.Unlock()
	writeJSON(w, http.StatusOK, resetResponse{SessionID: id,
		Observation: wireObservation{System: text(obs.System), Text: text(obs.Text)}})
	return nil
}

// openSession registers a new session, locked, with an environment taken from the pool or made.
func (s *Server) openSession(id string, seed int64) (*session, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errorf(http.StatusServiceUnavailable, CodeShuttingDown, "server is shutting down")
	}
	if _, dup := s.sessions[id]; dup {
		s.mu.Unlock()
		return nil, errorf(http.StatusConflict, CodeSessionExists, "session %s already exists", id)
	}
	full := len(s.sessions) >= s.opts.MaxSessions
	s.mu.Unlock()
	if full && s.ExpireIdle() == 0 { // make room from idle sessions before refusing
		s.evictLRU()
	}
	s.mu.Lock()
	if len(s.sessions) >= s.opts.MaxSessions {
		s.mu.Unlock()
		if s.opts.EvictIdle < 0 {
			return nil, errorf(http.StatusServiceUnavailable, CodeTooManySessions, "%d sessions are open (the maximum)", s.opts.MaxSessions)
		}
		return nil, errorf(http.StatusServiceUnavailable, CodeTooManySessions, "%d sessions are open (the maximum), each used within the last %v", s.opts.MaxSessions, s.opts.EvictIdle)
	}
	sess := &session{id: id, seed: seed}
	sess.mu.Lock()
	sess.lastUsed.Store(s.opts.Clock.Now().UnixNano())
	s.sessions[id] = sess
	if n := len(s.idleEnvs); n > 0 {
		sess.env = s.idleEnvs[n-1]
		s.idleEnvs = s.idleEnvs[:n-1]
	}
	s.mu.Unlock()
	if sess.env == nil {
		e, err := s.spec.New()
		if err == nil && e == nil {
			err = errors.New("the spec's New returned a nil Env")
		}
		if err != nil {
			sess.ended = true
			sess.mu.Unlock()
			s.mu.Lock()
			delete(s.sessions, id)
			s.mu.Unlock()
			return nil, errorf(http.StatusInternalServerError, CodeEnvError, "new %s environment: %v", s.spec.Name, err)
		}
		sess.env = e
	}
	return sess, nil
}

func (s *Server) touch(sess *session) { sess.lastUsed.Store(s.opts.Clock.Now().UnixNano()) }

// lookup finds a live session or explains why there is none.
func (s *Server) lookup(id string) (*session, error) {
	if id == "" {
		return nil, errorf(http.StatusBadRequest, CodeBadRequest, "missing session_id")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess, ok := s.sessions[id]; ok {
		return sess, nil
	}
	switch s.expired.get(id) {
	case endExpired:
		return nil, errorf(http.StatusGone, CodeSessionExpired, "session %s expired after %v idle", id, s.opts.IdleTimeout)
	case endEvicted:
		return nil, errorf(http.StatusGone, CodeSessionEvicted, "session %s was evicted: all %d sessions were taken when another client reset, and it was the least recently used, idle over %v (reset to start again)",
			id, s.opts.MaxSessions, s.opts.EvictIdle)
	}
	return nil, errorf(http.StatusNotFound, CodeSessionNotFound, "no session %s (never opened, or closed)", id)
}

// lockLive locks sess for an env call, refusing if another call holds it or it has ended.
func (s *Server) lockLive(sess *session) error {
	if !sess.mu.TryLock() {
		return errorf(http.StatusConflict, CodeSessionBusy, "session %s is busy with another request", sess.id)
	}
	if sess.ended {
		sess.mu.Unlock()
		_, err := s.lookup(sess.id)
		return err
	}
	return nil
}

func (s *Server) handleStep(w http.ResponseWriter, r *http.Request) error {
	var req stepRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.Action == nil {
		return errorf(http.StatusBadRequest, CodeBadRequest, `step needs "action"`)
	}
	sess, err := s.lookup(req.SessionID)
	if err != nil {
		return err
	}
	if err := s.lockLive(sess); err != nil {
		return err
	}
	ctx, cancel := s.envCtx(r)
	tr, err := sess.env.Step(ctx, string(*req.Action))
	cancel()
	s.touch(sess)
	if err != nil {
		status, code := envErrorStatus(err)
		if status >= 500 {
			sess.failed = true
		}
		sess.mu.Unlock()
		return errorf(status, code, "step %d: %v", sess.steps+1, err)
	}
	sess.steps++
	sess.done = tr.Done
	sess.mu.Unlock()
	writeJSON(w, http.StatusOK, transitionToWire(sess.id, tr))
	return nil
}

func (s *Server) handleState(w http.ResponseWriter, r *http.Request) error {
	sess, err := s.lookup(r.URL.Query().Get("session_id"))
	if err != nil {
		return err
	}
	if err := s.lockLive(sess); err != nil {
		return err
	}
	st := State{SessionID: sess.id, Seed: sess.seed, StepCount: sess.steps, Done: sess.done, Failed: sess.failed,
		IdleMS: s.opts.Clock.Now().Sub(time.Unix(0, sess.lastUsed.Load())).Milliseconds()}
	sess.mu.Unlock()
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *Server) handleClose(w http.ResponseWriter, r *http.Request) error {
	var id string
	if r.Method == http.MethodDelete {
		id = r.URL.Query().Get("session_id")
	} else {
		var req closeRequest
		if err := s.decodeBody(w, r, &req); err != nil {
			return err
		}
		id = req.SessionID
	}
	sess, err := s.lookup(id)
	if err != nil {
		return err
	}
	if err := s.lockLive(sess); err != nil {
		return err
	}
	sess.mu.Unlock()
	s.endSession(sess)
	writeJSON(w, http.StatusOK, map[string]bool{"closed": true})
	return nil
}

// endSession removes sess and returns its env to the pool, or closes it. The caller must not hold
// sess.mu; endSession takes it so no env call is in flight.
func (s *Server) endSession(sess *session) {
	sess.mu.Lock()
	if sess.ended {
		sess.mu.Unlock()
		return
	}
	sess.ended = true
	e, failed := sess.env, sess.failed
	sess.env = nil
	sess.mu.Unlock()

	s.mu.Lock()
	if s.sessions[sess.id] == sess {
		delete(s.sessions, sess.id)
	}
	if e != nil && !failed && !s.closed && len(s.idleEnvs) < s.opts.MaxIdleEnvs {
		s.idleEnvs = append(s.idleEnvs, e)
		e = nil
	}
	s.mu.Unlock()
	closeEnv(e)
}

func closeEnv(e env.Env) {
	if c, ok := e.(env.Closer); ok {
		c.Close() // the session is over; a failing Close has no one left to report to
	}
}

// ExpireIdle ends every session idle for longer than the idle timeout and returns how many. The
// reaper calls it periodically; tests call it after moving a fake clock.
func (s *Server) ExpireIdle() int {
	cutoff := s.opts.Clock.Now().Add(-s.opts.IdleTimeout).UnixNano()
	s.mu.Lock()
	var stale []*session
	for _, sess := range s.sessions {
		if sess.lastUsed.Load() < cutoff {
			stale = append(stale, sess)
		}
	}
	s.mu.Unlock()
	n := 0
	for _, sess := range stale {
		if !sess.mu.TryLock() { // busy in an env call: not idle
			continue
		}
		if sess.ended || sess.lastUsed.Load() >= cutoff {
			sess.mu.Unlock()
			continue
		}
		sess.mu.Unlock()
		s.mu.Lock()
		s.expired.add(sess.id, endExpired)
		s.mu.Unlock()
		s.endSession(sess)
		s.metrics.ended.WithLabelValues("expired").Inc()
		n++
	}
	return n
}

// evictLRU ends the least recently used session that has been idle for at least EvictIdle and
// is not in an environment call, and reports whether there was one. Its id is remembered, so its
// client hears why on its next call.
func (s *Server) evictLRU() bool {
	if s.opts.EvictIdle < 0 {
		return false
	}
	cutoff := s.opts.Clock.Now().Add(-s.opts.EvictIdle).UnixNano()
	s.mu.Lock()
	var idle []*session
	for _, sess := range s.sessions {
		if sess.lastUsed.Load() <= cutoff {
			idle = append(idle, sess)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(idle, func(a, b *session) int { return cmp.Compare(a.lastUsed.Load(), b.lastUsed.Load()) })
	for _, sess := range idle {
		if !sess.mu.TryLock() { // in an env call: in use
			continue
		}
		if sess.ended || sess.lastUsed.Load() > cutoff {
			sess.mu.Unlock()
			continue
		}
		sess.mu.Unlock()
		s.mu.Lock()
		s.expired.add(sess.id, endEvicted)
		s.mu.Unlock()
		s.endSession(sess)
		s.metrics.ended.WithLabelValues("evicted").Inc()
		return true
	}
	return false
}

// reap runs ExpireIdle on a ticker until Close.
func (s *Server) reap() {
	defer s.reaperWG.Done()
	every := min(max(s.opts.IdleTimeout/4, 10*time.Millisecond), 30*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.ExpireIdle()
		}
	}
}

// Sessions is the number of live sessions.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Close stops the reaper and ends every session, waiting for env calls in flight (their requests'
// contexts end when the HTTP server shuts down). Later requests get 503.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	open := make([]*session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		open = append(open, sess)
	}
	idle := s.idleEnvs
	s.idleEnvs = nil
	s.mu.Unlock()
	close(s.stop)
	s.reaperWG.Wait()
	for _, sess := range open {
		s.endSession(sess)
	}
	for _, e := range idle {
		closeEnv(e)
	}
	return nil
}

// tombstones remembers recently expired or evicted session ids (bounded, oldest forgotten
// first) so a late request hears why its session ended rather than "never existed".
type tombstones struct {
	set  map[string]endReason
	ring []string
	next int
}

// endReason is why the server ended a session.
type endReason uint8

const (
	endNone    endReason = iota // not remembered
	endExpired                  // idle past the idle timeout
	endEvicted                  // made room for another client's session
)

func newTombstones(n int) tombstones {
	return tombstones{set: make(map[string]endReason, n), ring: make([]string, n)}
}

func (t *tombstones) add(id string, why endReason) {
	if old := t.ring[t.next]; old != "" {
		delete(t.set, old)
	}
	t.ring[t.next] = id
	t.set[id] = why
	t.next = (t.next + 1) % len(t.ring)
}

func (t *tombstones) get(id string) endReason { return t.set[id] }
