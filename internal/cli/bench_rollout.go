package cli

import "errors"

// BenchRolloutCmd is filled in by its issue; until then it says so.
type BenchRolloutCmd struct{}

// Run reports that the command is not available yet.
func (c *BenchRolloutCmd) Run(g *Globals) error { return errors.New("not yet available in this build") }
