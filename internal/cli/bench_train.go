package cli

import "errors"

// BenchTrainCmd is filled in by its issue; until then it says so.
type BenchTrainCmd struct{}

// Run reports that the command is not available yet.
func (c *BenchTrainCmd) Run(g *Globals) error { return errors.New("not yet available in this build") }
