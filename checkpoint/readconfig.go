package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentrl/agentrl/model"
)

// ReadConfig reads the architecture of the checkpoint folder dir from its config.json alone, as
// LoadModel does before reading weights: what a run with init takes as its model.
func ReadConfig(dir string) (model.Config, error) {
	data, err := os.ReadFile(filepath.Join(dir, configFile))
	if err != nil {
		return model.Config{}, fmt.Errorf("checkpoint: %w", err)
	}
	cfg, err := parseConfig(data)
	if err != nil {
		return model.Config{}, fmt.Errorf("checkpoint: %s: %w", dir, err)
	}
	return cfg, nil
}
