package cli

import "errors"

// BenchModelCmd is filled in by its issue; until then it says so.
type BenchModelCmd struct{}

// Run reports that the command is not available yet.
func (c *BenchModelCmd) Run(g *Globals) error { return errors.New("not yet available in this build") }
