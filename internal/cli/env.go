package cli

import "errors"

// EnvCmd is filled in by its issue; until then it says so.
type EnvCmd struct{}

// Run reports that the command is not available yet.
func (c *EnvCmd) Run(g *Globals) error { return errors.New("not yet available in this build") }
