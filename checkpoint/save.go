package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
)

// The files of a checkpoint folder.
const (
	weightsFile          = "model.safetensors"
	valueHeadFile        = "value_head.safetensors"
	configFile           = "config.json"
	generationConfigFile = "generation_config.json"
	optimizerFile        = "optimizer.safetensors"
	trainerStateFile     = "trainer_state.json"
)

// Sibling names a Save uses next to dir: ".<base>.tmp-*" while writing and ".<base>.old-*" for
// the replaced checkpoint between the two renames. A crash can leave either behind.
const (
	tmpInfix = ".tmp-"
	oldInfix = ".old-"
)

// saveHook, when set by a test, runs between the steps of Save; an error from it makes Save
// fail at that point as a real I/O error would.
var saveHook func(step, path string) error

func hook(step, path string) error {
	if saveHook == nil {
		return nil
	}
	return saveHook(step, path)
}

// Save writes a checkpoint folder atomically: everything is written into a temporary sibling
// folder, fsynced, then renamed onto dir (an older dir of that name is renamed away first and
// removed last), so a crash never leaves a half-written checkpoint at dir. Leftovers of a crashed
// Save of the same dir are cleaned first; if the crash came between the two renames, the old
// checkpoint is put back at dir before anything else happens. st may be nil (weights only).
//
// The weights are written in float32, whatever the model's DType: a run's checkpoints, the
// reference policies and the weights it publishes to samplers are exact, so a resumed run
// continues exactly and samplers compute what the learner does; the model's DType is recorded
// (LoadModel reads it back). They go in one model.safetensors or, above DefaultMaxShardBytes,
// in shards with model.safetensors.index.json, under the family's architecture name: what
// transformers and vLLM load. SaveWith writes other dtypes, the model's own by default (an
// export in the dtype it was published in).
func Save(dir string, m *model.Model, tok *tokenizer.Tokenizer, st *State) error {
	return SaveWith(dir, m, tok, st, SaveOptions{DType: "F32"})
}

// SaveOptions are Save's choices.
type SaveOptions struct {
	// DType is the safetensors dtype of the weights: "F32", "BF16" or "F16"; "" is the model's
	// DType, or F32 for a checkpoint with resume state. The value head and optimizer state stay
	// F32.
	DType string
	// MaxShardBytes is the largest shard of weights; 0 is DefaultMaxShardBytes.
	MaxShardBytes int64
}

// SaveWith is Save with the given options.
func SaveWith(dir string, m *model.Model, tok *tokenizer.Tokenizer, st *State, opt SaveOptions) error {
	if m != nil && opt.DType == "" && st == nil {
		opt.DType = m.DType
	}
	if opt.DType == "" {
		opt.DType = "F32"
	}
	if dtypeSize[opt.DType] == 0 {
		return fmt.Errorf("checkpoint: save %s: dtype %q, want F32, BF16 or F16", dir, opt.DType)
	}
	if opt.MaxShardBytes <= 0 {
		opt.MaxShardBytes = DefaultMaxShardBytes
	}
	if err := checkSave(m, tok, st); err != nil {
		return fmt.Errorf("checkpoint: save %s: %w", dir, err)
	}
	return saveAtomic(dir, func(tmp string) error { return writeFolder(tmp, m, tok, st, opt) })
}

// saveAtomic writes a checkpoint folder dir through write, which fills a fresh temporary folder
// beside it (and fsyncs what it writes); the folder is then swapped in whole, so a crash leaves
// the old checkpoint or the new one, never half of either (a crashed save's leftovers are
// recovered first).
func saveAtomic(dir string, write func(tmp string) error) error {
	dir = filepath.Clean(dir)
	parent, base := filepath.Dir(dir), filepath.Base(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("checkpoint: save %s: %w", dir, err)
	}
	if err := recoverCrashed(parent, base); err != nil {
		return fmt.Errorf("checkpoint: save %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+base+tmpInfix)
	if err != nil {
		return fmt.Errorf("checkpoint: save %s: %w", dir, err)
	}
	// MkdirTemp makes the folder private (0700); a checkpoint is shared like any output.
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("checkpoint: save %s: %w", dir, err)
	}
	if err := write(tmp); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("checkpoint: save %s: %w", dir, err)
	}
	if err := swapIn(tmp, dir, parent, base); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("checkpoint: save %s: %w", dir, err)
	}
	return nil
}

func checkSave(m *model.Model, tok *tokenizer.Tokenizer, st *State) error {
	switch {
	case m == nil:
		return errors.New("nil model")
	case tok == nil:
		return errors.New("nil tokenizer: other stacks cannot load a checkpoint without one")
	case tok.VocabSize() > m.Cfg.Vocab:
		return fmt.Errorf("tokenizer has %d ids, more than the model's vocabulary of %d", tok.VocabSize(), m.Cfg.Vocab)
	}
	if err := m.Cfg.Validate(); err != nil {
		return err
	}
	if st != nil {
		return checkState(st, m)
	}
	return nil
}

// writeFolder writes every file of the checkpoint into dir and fsyncs dir itself, so the
// directory entries are durable before the folder is renamed into place.
func writeFolder(dir string, m *model.Model, tok *tokenizer.Tokenizer, st *State, opt SaveOptions) error {
	params := m.Params.Tensors()
	var weights, head []Tensor
	for _, t := range params {
		if t.ValueHead() {
			head = append(head, Tensor{Name: t.Name, Shape: t.Shape, Data: t.Data})
		} else {
			weights = append(weights, Tensor{Name: t.Name, Shape: t.Shape, Data: t.Data})
		}
	}
	if err := writeWeights(dir, weights, opt.DType, m.DType, opt.MaxShardBytes); err != nil {
		return err
	}
	// The value head is training state, like the optimizer's moments: it goes with the resume
	// state only, so that a weights-only folder (what servers load) holds nothing but Llama files.
	if st != nil && len(head) > 0 {
		if err := WriteSafetensors(filepath.Join(dir, valueHeadFile), head, map[string]string{"format": "pt"}); err != nil {
			return err
		}
	}
	// Adapters go beside the base weights in PEFT's format: the folder is then both the base
	// model and, for PEFT or vLLM, the adapter on it.
	if m.HasLoRA() {
		if err := SaveAdapter(dir, m, ""); err != nil {
			return err
		}
	}
	if err := hook("weights", dir); err != nil {
		return err
	}
	ids := tokenIDs(tok)
	cfg, err := encodeConfig(m.Cfg, ids, opt.DType)
	if err != nil {
		return err
	}
	gen, err := encodeGenerationConfig(ids)
	if err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(dir, configFile), cfg); err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(dir, generationConfigFile), gen); err != nil {
		return err
	}
	if err := tok.Save(dir); err != nil {
		return err
	}
	if st != nil {
		if st.Optimizer != nil {
			_, _, trainable := m.Trainable() // the adapters' when the model has them
			moments := optimizerTensors(trainable, st.Optimizer)
			if err := WriteSafetensors(filepath.Join(dir, optimizerFile), moments, optimizerMetadata(st.Optimizer)); err != nil {
				return err
			}
		}
		if err := writeFileSync(filepath.Join(dir, trainerStateFile), encodeTrainerState(st)); err != nil {
			return err
		}
	}
	if err := hook("written", dir); err != nil {
		return err
	}
	return syncDir(dir)
}

// swapIn renames the finished tmp folder onto dir: the old dir is renamed away first (rename
// cannot replace a non-empty directory), the new one renamed in, the parent fsynced so both
// renames are durable, and only then the old one removed.
func swapIn(tmp, dir, parent, base string) error {
	old := ""
	if _, err := os.Lstat(dir); err == nil {
		f, err := os.CreateTemp(parent, "."+base+oldInfix)
		if err != nil {
			return err
		}
		old = f.Name()
		f.Close()
		os.Remove(old) // only the unique name is wanted; rename needs it free
		if err := os.Rename(dir, old); err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := hook("renamed-away", old); err != nil {
		return errors.Join(err, restore(old, dir))
	}
	if err := os.Rename(tmp, dir); err != nil {
		return errors.Join(err, restore(old, dir))
	}
	if err := syncDir(parent); err != nil {
		return err
	}
	if old != "" {
		// The new checkpoint is in place and durable; failing to delete the old one only
		// wastes disk, and the next Save removes it.
		os.RemoveAll(old)
	}
	return nil
}

// restore puts the old checkpoint back after a failed rename-in.
func restore(old, dir string) error {
	if old == "" {
		return nil
	}
	if err := os.Rename(old, dir); err != nil {
		return fmt.Errorf("the previous checkpoint is left at %s: %w", old, err)
	}
	return nil
}

// recoverCrashed cleans what a crashed Save of parent/base left behind. A ".old-" sibling with
// no dir means the crash came between the two renames: that folder is the last complete
// checkpoint, so it goes back to dir. Every ".tmp-" sibling is an unfinished (or unrenamed)
// write and is removed.
func recoverCrashed(parent, base string) error {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return err
	}
	dir := filepath.Join(parent, base)
	_, statErr := os.Lstat(dir)
	missing := errors.Is(statErr, os.ErrNotExist)
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(parent, name)
		switch {
		case strings.HasPrefix(name, "."+base+oldInfix) && e.IsDir() && missing:
			if err := os.Rename(path, dir); err != nil {
				return fmt.Errorf("restoring the previous checkpoint from %s: %w", path, err)
			}
			missing = false
		case strings.HasPrefix(name, "."+base+oldInfix), strings.HasPrefix(name, "."+base+tmpInfix):
			if err := os.RemoveAll(path); err != nil {
				return fmt.Errorf("removing leftover %s: %w", path, err)
			}
		}
	}
	return nil
}

// writeFileSync writes a small file and fsyncs it; the folder it is in is not yet visible.
func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return d.Close()
}
