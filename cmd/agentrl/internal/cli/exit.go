package cli

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/alecthomas/kong"
)

// ExitInterrupted is the exit status of a command stopped by an interrupt (SIGINT or SIGTERM):
// 128 + SIGINT, the shell's convention.
const ExitInterrupted = 130

// interrupted is the error of a command stopped by an interrupt; its message says how to go on.
type interrupted struct{ msg string }

func (e *interrupted) Error() string { return "interrupted: " + e.msg }

// ExitCode is the process status for what Main returned: 0 for nil, ExitInterrupted when the
// command was interrupted, 1 otherwise.
func ExitCode(err error) int {
	var in *interrupted
	switch {
	case err == nil:
		return 0
	case errors.As(err, &in):
		return ExitInterrupted
	}
	return 1
}

// asInterrupted turns the error of a command stopped by ctx's cancellation into an interrupted
// error (keeping one that already says how to go on).
func asInterrupted(ctx context.Context, err error) error {
	var in *interrupted
	if err == nil || ctx.Err() == nil || !errors.Is(err, context.Canceled) || errors.As(err, &in) {
		return err
	}
	return &interrupted{msg: "stopped before it finished"}
}

// shellQuote quotes s for a POSIX shell when it holds anything but plain path characters.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./+,:@=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Version describes the binary: the module version, the commit it was built from (with
// "+modified" when the tree had uncommitted changes), the commit time and the Go version.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "agentrl (no build information)"
	}
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		}
	}
	v := "agentrl " + bi.Main.Version
	if rev != "" {
		v += fmt.Sprintf(" commit %s%s", rev, modified)
		if at != "" {
			v += " (" + at + ")"
		}
	}
	return v + " " + bi.GoVersion
}

// HelpCmd prints the help of the command tree or of one command.
type HelpCmd struct {
	Command []string `arg:"" optional:"" help:"The command to describe, e.g. train or env serve."`
}

// Run prints the help as --help would.
func (h *HelpCmd) Run(k *kong.Context) error {
	_, err := k.Kong.Parse(append(append([]string{}, h.Command...), "--help"))
	return err
}
