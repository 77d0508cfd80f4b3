package serve

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/agentrl/agentrl/checkpoint"
)

// OpenAdapter serves the base checkpoint folder baseDir with the LoRA adapter of the PEFT folder
// adapterDir on it (adapter_config.json, adapter_model.safetensors). baseName is the base's
// name on the Hugging Face Hub (ORG/NAME) when it came from there, else "" (a folder in the Hub's
// cache is named by its path). An adapter for another base is refused by name: a tensor
// whose shape the base contradicts or that it lacks, a base_model_name_or_path naming another
// repository than the base's, or an adapter folder whose own config.json (a run's checkpoint)
// describes another architecture. The base may hold no adapter of its own.
func OpenAdapter(baseDir, baseName, adapterDir string, opts Options) (*Server, error) {
	if _, err := os.Stat(filepath.Join(baseDir, "adapter_config.json")); err == nil {
		return nil, fmt.Errorf("serve: base %s holds an adapter already (adapter_config.json); give a base without one, or serve that folder alone", baseDir)
	}
	ck, err := checkpoint.Load(baseDir)
	if err != nil {
		return nil, err
	}
	if own, err := checkpoint.ReadConfig(adapterDir); err == nil {
		if own != ck.Model.Cfg {
			return nil, fmt.Errorf("serve: adapter %s was saved with a base of another architecture (its config.json: %+v; base %s: %+v)", adapterDir, own, baseDir, ck.Model.Cfg)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("serve: adapter %s: %w", adapterDir, err)
	}
	info, err := checkpoint.LoadAdapter(adapterDir, ck.Model)
	if err != nil {
		return nil, err
	}
	if baseName == "" {
		baseName = hubCacheRepo(baseDir)
	}
	if want := repoName(info.BaseModel); want != "" && baseName != "" && !strings.EqualFold(want, baseName) {
		return nil, fmt.Errorf("serve: adapter %s was trained on %q (adapter_config.json base_model_name_or_path), not on the base %s (%s)", adapterDir, info.BaseModel, baseName, baseDir)
	}
	cfgJSON, err := os.ReadFile(filepath.Join(baseDir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	return New(ck.Model, ck.Tokenizer, cfgJSON, opts)
}

var (
	hubName  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*/[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
	cacheDir = regexp.MustCompile(`(?:^|/)models--([A-Za-z0-9_.-]+?)--([A-Za-z0-9_.-]+)/snapshots/[^/]+/?$`)
)

// repoName is the Hub repository a base_model_name_or_path names: ORG/NAME as it is, or the
// repository of a folder in the Hub's cache; "" for any other path.
func repoName(s string) string {
	if hubName.MatchString(s) && !strings.HasPrefix(s, ".") {
		if _, err := os.Stat(s); err != nil { // not a folder that happens to look like ORG/NAME
			return s
		}
	}
	return hubCacheRepo(s)
}

// hubCacheRepo is ORG/NAME of a snapshot folder of huggingface_hub's cache, else "".
func hubCacheRepo(dir string) string {
	m := cacheDir.FindStringSubmatch(filepath.ToSlash(dir))
	if m == nil {
		return ""
	}
	return m[1] + "/" + m[2]
}
