package cli

import (
	"fmt"
	"os"

	"github.com/agentrl/agentrl/hub"
)

// folderOrHub returns the folder a flag names: an existing folder as given, or the cache
// snapshot of a Hub reference (hf:ORG/NAME[@REVISION]) after downloading what want names into
// the huggingface_hub cache (HF_HOME, HF_ENDPOINT, HF_HUB_OFFLINE, HF_TOKEN), with progress on
// g.Stderr.
func folderOrHub(g *Globals, flag, s string, want hub.Want) (string, error) {
	if hub.IsRef(s) {
		dir, err := hub.Resolve(g.Ctx, s, want, g.Stderr)
		if err != nil {
			return "", fmt.Errorf("%s: %w", flag, err)
		}
		return dir, nil
	}
	st, err := os.Stat(s)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s: %s is not a folder", flag, s)
	}
	return s, nil
}
