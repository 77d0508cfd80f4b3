package cli

import "errors"

// EvalCmd is filled in by its issue; until then it says so.
type EvalCmd struct{}

// Run reports that the command is not available yet.
func (c *EvalCmd) Run(g *Globals) error { return errors.New("not yet available in this build") }
