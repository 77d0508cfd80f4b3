package tool

import "errors"

// ErrInfra marks a tool failure that is the infrastructure's fault, not the model's: a sandbox
// that cannot start, a lost connection to a tool server. The tool wrapper turns such an error
// into a Step error (the episode is recorded as env_error and never trained on) instead of an
// observation. Tools return it wrapped, e.g. fmt.Errorf("sandbox start: %w", tool.Infra(err)),
// or with fmt.Errorf("...: %w", tool.ErrInfra).
var ErrInfra = errors.New("tool infrastructure failure")

// InfraError wraps the cause of an infrastructure failure; errors.Is(e, ErrInfra) holds.
type InfraError struct{ Err error }

func (e *InfraError) Error() string {
	if e.Err == nil {
		return ErrInfra.Error()
	}
	return ErrInfra.Error() + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *InfraError) Unwrap() error { return e.Err }

// Is makes errors.Is(e, ErrInfra) true.
func (e *InfraError) Is(target error) bool { return target == ErrInfra }

// Infra marks err as an infrastructure failure; Infra(nil) is nil.
func Infra(err error) error {
	if err == nil {
		return nil
	}
	return &InfraError{Err: err}
}
