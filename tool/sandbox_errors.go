package tool

import "errors"

// ErrSandboxUnavailable is wrapped by every error that says the sandbox itself could not be set
// up or run (bubblewrap missing, user namespaces refused, the sandbox died before the code
// started). It is an infrastructure failure: the code was never run, and it never will be run
// outside the sandbox instead.
var ErrSandboxUnavailable = errors.New("python sandbox unavailable")

// SandboxError is an infrastructure failure of the sandbox, as opposed to anything the code
// did. Callers that must tell the two apart (an environment deciding between env_error and
// reward 0) test with errors.Is(err, ErrInfra) or ErrSandboxUnavailable, or errors.As.
type SandboxError struct {
	Op  string // what was being done: "probe", "start", "run"
	Err error
}

func (e *SandboxError) Error() string { return "python sandbox: " + e.Op + ": " + e.Err.Error() }

// Unwrap exposes ErrInfra (so tool wrappers record an env error, not an observation),
// ErrSandboxUnavailable and the cause to errors.Is.
func (e *SandboxError) Unwrap() []error { return []error{ErrInfra, ErrSandboxUnavailable, e.Err} }
