package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentrl/agentrl/env"
)

// Error codes in the JSON error body.
const (
	CodeBadRequest       = "bad_request"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeTooLarge         = "too_large"
	CodeSessionNotFound  = "session_not_found"
	CodeSessionExpired   = "session_expired"
	CodeSessionEvicted   = "session_evicted"
	CodeSessionExists    = "session_exists"
	CodeSessionBusy      = "session_busy"
	CodeNotReset         = "not_reset"
	CodeEpisodeDone      = "episode_done"
	CodeTooManySessions  = "too_many_sessions"
	CodeShuttingDown     = "shutting_down"
	CodeEnvError         = "env_error"
	CodeEnvTimeout       = "env_timeout"
	CodePoisoned         = "poisoned"
)

// Sentinels a client's errors wrap (test with errors.Is). A client error for an environment
// timeout also wraps context.DeadlineExceeded, and step-before-reset / step-after-done wrap
// env.ErrNotReset / env.ErrEpisodeDone as a local environment would.
var (
	ErrSessionNotFound = errors.New("remote: session not found")
	ErrSessionExpired  = errors.New("remote: session expired after being idle")
	ErrSessionEvicted  = errors.New("remote: session evicted to make room for another client's")
	ErrTooLarge        = errors.New("remote: request body too large")
	ErrUnavailable     = errors.New("remote: server cannot take the session now")
	ErrEnv             = errors.New("remote: environment failed on the server")
	ErrProtocol        = errors.New("remote: protocol error")
)

// Error is a non-2xx answer from a server.
type Error struct {
	Op      string // reset, step, state, close, metadata
	Status  int    // HTTP status
	Code    string // one of the Code constants (or what the server sent)
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("remote env %s: %d %s: %s", e.Op, e.Status, e.Code, e.Message)
}

// Unwrap maps the code to the sentinels above, the env package's misuse errors, and
// context.DeadlineExceeded for a timed-out environment.
func (e *Error) Unwrap() []error {
	switch e.Code {
	case CodeSessionNotFound:
		return []error{ErrSessionNotFound}
	case CodeSessionExpired:
		return []error{ErrSessionExpired}
	case CodeSessionEvicted:
		return []error{ErrSessionEvicted}
	case CodeTooLarge:
		return []error{ErrTooLarge}
	case CodeTooManySessions, CodeShuttingDown, CodeSessionBusy:
		return []error{ErrUnavailable}
	case CodeNotReset:
		return []error{env.ErrNotReset}
	case CodeEpisodeDone:
		return []error{env.ErrEpisodeDone}
	case CodePoisoned:
		return []error{ErrEnv, env.ErrPoisoned}
	case CodeEnvTimeout:
		return []error{ErrEnv, context.DeadlineExceeded}
	case CodeEnvError:
		return []error{ErrEnv}
	}
	if e.Status >= 500 {
		return []error{ErrEnv}
	}
	return []error{ErrProtocol}
}

// envErrorStatus classifies an error returned by the served environment.
func envErrorStatus(err error) (int, string) {
	switch {
	case errors.Is(err, env.ErrNotReset):
		return http.StatusConflict, CodeNotReset
	case errors.Is(err, env.ErrEpisodeDone):
		return http.StatusConflict, CodeEpisodeDone
	case errors.Is(err, env.ErrPoisoned):
		return http.StatusInternalServerError, CodePoisoned
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, CodeEnvTimeout
	}
	return http.StatusInternalServerError, CodeEnvError
}
