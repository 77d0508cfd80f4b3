package cli

import "errors"

// ConfigCmd is filled in by its issue; until then it says so.
type ConfigCmd struct{}

// Run reports that the command is not available yet.
func (c *ConfigCmd) Run(g *Globals) error { return errors.New("not yet available in this build") }
