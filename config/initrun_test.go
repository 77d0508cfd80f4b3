package config

import (
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

// TestLoadFromInitReference: train --init takes a Hub reference as the configuration's init key
// does (the run resolves it when it starts), and a folder that is not there is a clear error.
func TestLoadFromInitReference(t *testing.T) {
	c, notes, err := LoadFrom(all.Builtins(), "calc", "", "hf:org/tiny@main", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Init != "hf:org/tiny@main" {
		t.Errorf("init %q, want the reference as given", c.Init)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "hf:org/tiny@main") {
		t.Errorf("notes %q: want one naming the reference", notes)
	}
	missing := t.TempDir() + "/nothing-here"
	if _, _, err := LoadFrom(all.Builtins(), "calc", "", missing, nil, nil); err == nil || !strings.Contains(err.Error(), "--init") || !strings.Contains(err.Error(), "nothing-here") {
		t.Errorf("a missing --init folder: %v, want an error naming --init and the folder", err)
	}
}
