package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentrl/agentrl/dist"
)

// Backoff of a worker dialling a server that does not answer yet: from dialBackoffMin, doubling,
// at most dialBackoffMax between tries.
const (
	dialBackoffMin = time.Second
	dialBackoffMax = 30 * time.Second
)

// dialLearner connects a worker to its learner's server. A server that does not answer yet (a
// learner still in its supervised phase, or not started) is tried again with a bounded backoff,
// each wait reported on log, for up to wait; refused credentials are said plainly, and a missing
// token is told apart from a wrong one. The connection then reports its losses and recoveries.
func dialLearner(ctx context.Context, url string, auth dist.Auth, wait time.Duration, log io.Writer) (*dist.Conn, error) {
	logf := func(f string, a ...any) { fmt.Fprintf(log, "worker: "+f+"\n", a...) }
	start := time.Now()
	backoff := dialBackoffMin
	for {
		conn, err := dist.Dial(url, auth, "agentrl-worker", dist.LogEvents(logf))
		if err == nil {
			if time.Since(start) > time.Second {
				logf("connected to %s", url)
			}
			return conn, nil
		}
		if isAuthError(err) {
			if auth.Token == "" && auth.NKeySeed == "" {
				return nil, fmt.Errorf("worker: the server at %s requires credentials and none were given: pass --token (or AGENTRL_WORKER_TOKEN; the learner prints where its token is, <run>/dist/worker.token) or --nkey SEEDFILE", url)
			}
			what := "token"
			if auth.NKeySeed != "" {
				what = "nkey (its public key must be in the learner's rl.async.workers.worker_nkeys)"
			}
			return nil, fmt.Errorf("worker: the server at %s refused this worker's %s: %w", url, what, err)
		}
		if !errors.Is(err, nats.ErrNoServers) {
			return nil, err
		}
		waited := time.Since(start)
		if waited+backoff > wait {
			return nil, fmt.Errorf("worker: no server answers at %s after %v (is the learner running, and is this its URL? it prints it when its phase with workers starts): %w", url, waited.Round(time.Second), err)
		}
		logf("no server answers at %s yet (waited %v): the learner may not have started its phase with workers; trying again in %v (up to %v)", url, waited.Round(time.Second), backoff, wait)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, dialBackoffMax)
	}
}

func isAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		strings.Contains(strings.ToLower(err.Error()), "authorization violation")
}
