package env

import (
	"errors"
	"unicode/utf8"
)

// Keys of Transition.Info that the rest of the system reads.
const (
	// InfoSuccess is "true" or "false" on the final transition of an episode whose task has a
	// notion of success (the verifier accepted the answer).
	InfoSuccess = "success"
	// InfoTruncated names the limit that ended the episode early, e.g. "turn_limit".
	InfoTruncated = "truncated"
)

// Values of InfoTruncated.
const TruncatedTurnLimit = "turn_limit"

// Errors wrappers and environments return for misuse of an episode. Remote clients may not
// preserve their identity; envtest only requires that such a Step fails.
var (
	// ErrNotReset: Step before the first Reset.
	ErrNotReset = errors.New("env: step before reset")
	// ErrEpisodeDone: Step after a transition with Done; Reset starts a new episode.
	ErrEpisodeDone = errors.New("env: step after the episode ended")
	// ErrPoisoned: the instance timed out inside a call that never returned; it must be closed
	// and replaced.
	ErrPoisoned = errors.New("env: instance abandoned after a timed-out call")
)

// closeInner closes inner when it holds resources.
func closeInner(inner Env) error {
	if c, ok := inner.(Closer); ok {
		return c.Close()
	}
	return nil
}

// truncateMarker ends text cut by a size cap so the model can tell it was cut.
const truncateMarker = "…[truncated]"

// truncate returns s cut to at most max bytes, marker included, on a rune boundary. A max smaller
// than the marker yields a plain cut.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	keep := max - len(truncateMarker)
	marker := truncateMarker
	if keep < 0 {
		keep, marker = max, ""
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + marker
}
