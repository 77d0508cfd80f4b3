package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentrl/agentrl/env"
)

// promptsFile, in a checkpoint the trainer writes, holds the system prompt each environment's
// episodes had in training (that of its first held-out task, tools described): a policy only
// behaves under the prompt it was trained with, and evaluation says when its prompt differs.
const promptsFile = "prompts.json"

// trainingPrompts renders the system prompt of each environment of the run, as its episodes see
// it (with the run's MCP tools attached).
func (r *Run) trainingPrompts(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	newEnv := r.envFactory()
	for _, name := range r.Cfg.EnvNames() {
		spec, err := r.opts.Envs.Lookup(name)
		if err != nil {
			return nil, err
		}
		sys, err := SystemPrompt(ctx, newEnv, name, spec.Heldout.Lo)
		if err != nil {
			return nil, err
		}
		out[name] = sys
	}
	return out, nil
}

// SystemPrompt is the system prompt of task seed of environment name, as newEnv makes it.
func SystemPrompt(ctx context.Context, newEnv func(string) (env.Env, error), name string, seed int64) (string, error) {
	e, err := newEnv(name)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if c, ok := e.(env.Closer); ok {
		defer func() { _ = c.Close() }()
	}
	obs, err := e.Reset(ctx, seed)
	if err != nil {
		return "", fmt.Errorf("%s: reset task %d: %w", name, seed, err)
	}
	return obs.System, nil
}

// recordPrompts writes the run's training prompts into the checkpoint folder dir.
func (r *Run) recordPrompts(dir string) error {
	if r.prompts == nil {
		return nil
	}
	data, err := json.MarshalIndent(r.prompts, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, promptsFile), append(data, '\n'))
}

// PromptNote compares system, the system prompt an evaluation of environment name gives the
// policy of checkpoint ckDir, with the one it was trained with; it returns a warning when they
// differ, and "" when they match or the checkpoint does not record it.
func PromptNote(ckDir, name, system string) string {
	data, err := os.ReadFile(filepath.Join(ckDir, promptsFile))
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	var prompts map[string]string
	if err != nil || json.Unmarshal(data, &prompts) != nil {
		return fmt.Sprintf("warning: %s/%s does not read (%v): the training prompt is not checked", ckDir, promptsFile, err)
	}
	trained, ok := prompts[name]
	switch {
	case !ok:
		return fmt.Sprintf("warning: the checkpoint was not trained on %s (it was on %s): expect it to do poorly", name, keys(prompts))
	case trained != system:
		return fmt.Sprintf("warning: %s's system prompt here (%d characters) differs from the one the checkpoint was trained with (%d characters; in %s/%s), e.g. tools attached or removed: a policy behaves under the prompt it was trained with, so expect lower success",
			name, len(system), len(trained), ckDir, promptsFile)
	}
	return ""
}

func keys(m map[string]string) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return fmt.Sprint(out)
}
