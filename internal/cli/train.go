package cli

import "errors"

// TrainCmd is filled in by its issue; until then it says so.
type TrainCmd struct{}

// Run reports that the command is not available yet.
func (c *TrainCmd) Run(g *Globals) error { return errors.New("not yet available in this build") }
