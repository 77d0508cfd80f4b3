package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
)

// Files of a checkpoint whose weights live on a training service (SaveRemote).
const (
	remoteWeightsFile = "remote_weights.json"
	remoteNoteFile    = "WEIGHTS.md"
	maxRemoteFile     = 1 << 20
)

// RemoteWeights names the weights of a checkpoint that does not hold them: a run trained on a
// Tinker service (learner.backend tinker) keeps its adapter and optimizer there.
type RemoteWeights struct {
	Service   string `json:"service"` // "tinker"
	URL       string `json:"url"`
	BaseModel string `json:"base_model"`
	Rank      int    `json:"rank"`
	ModelID   string `json:"model_id"`
	// Weights is the tinker:// path of the training state (save_weights: the adapter and the
	// optimizer's moments) that a resumed run loads; empty for a checkpoint of sampler weights
	// alone (the best policy).
	Weights string `json:"weights,omitempty"`
	// Sampler is the tinker:// path of the sampler weights of the checkpoint's policy version.
	Sampler        string `json:"sampler"`
	Version        int32  `json:"version"`
	OptimizerSteps int64  `json:"optimizer_steps"`
}

func (w RemoteWeights) validate() error {
	if w.Service != "tinker" || w.URL == "" || w.BaseModel == "" || w.ModelID == "" || w.Rank < 1 {
		return fmt.Errorf("%s: service %q, url %q, base_model %q, model_id %q, rank %d: a Tinker service, its base model, the model trained and the adapter's rank are required", remoteWeightsFile, w.Service, w.URL, w.BaseModel, w.ModelID, w.Rank)
	}
	for _, p := range []struct{ name, path, kind string }{{"weights", w.Weights, "/weights/"}, {"sampler", w.Sampler, "/sampler_weights/"}} {
		if p.path == "" && p.name == "weights" {
			continue
		}
		if !strings.HasPrefix(p.path, "tinker://") || !strings.Contains(p.path, p.kind) {
			return fmt.Errorf("%s: %s %q is not a tinker:// path of %s", remoteWeightsFile, p.name, p.path, strings.Trim(p.kind, "/"))
		}
	}
	if w.Version < 0 || w.OptimizerSteps < 0 {
		return fmt.Errorf("%s: version %d and optimizer_steps %d must not be negative", remoteWeightsFile, w.Version, w.OptimizerSteps)
	}
	return nil
}

// RemoteWeightsError is what reading the weights of a folder written by SaveRemote returns: it
// says where they are.
type RemoteWeightsError struct {
	Dir     string
	Weights RemoteWeights
}

func (e *RemoteWeightsError) Error() string {
	w := e.Weights
	where := w.Sampler
	if w.Weights != "" {
		where = w.Weights + " (training state) and " + w.Sampler + " (sampler weights)"
	}
	return fmt.Sprintf("checkpoint %s holds no weights: they live on the Tinker service at %s as %s, a LoRA adapter of rank %d on %s; "+
		"nothing can load, serve or export them from this folder (resume the run with agentrl train --resume, or download the adapter with Tinker's SDK)",
		e.Dir, w.URL, where, w.Rank, w.BaseModel)
}

// ErrRemoteWeights is matched by every RemoteWeightsError (errors.Is).
var ErrRemoteWeights = errors.New("checkpoint: the weights live on a training service")

func (e *RemoteWeightsError) Is(target error) bool { return target == ErrRemoteWeights }

// SaveRemote writes a checkpoint folder whose weights live on a training service: the base
// model's config.json, the tokenizer, trainer_state.json with st (whose optimizer must be nil:
// the optimizer is on the service too), remote_weights.json (w) and WEIGHTS.md, which says in
// words where the weights are. It holds no weights file, so nothing mistakes the base model for
// the trained one: LoadModel, Load and LoadWeights return a RemoteWeightsError.
func SaveRemote(dir string, cfg model.Config, tok *tokenizer.Tokenizer, st *State, w RemoteWeights) error {
	switch {
	case tok == nil:
		return fmt.Errorf("checkpoint: save %s: nil tokenizer", dir)
	case st != nil && st.Optimizer != nil:
		return fmt.Errorf("checkpoint: save %s: the optimizer of remote weights stays on their service", dir)
	}
	if err := w.validate(); err != nil {
		return fmt.Errorf("checkpoint: save %s: %w", dir, err)
	}
	if st != nil && len(st.Extra) > 0 && !json.Valid(st.Extra) {
		return fmt.Errorf("checkpoint: save %s: State.Extra is not valid JSON", dir)
	}
	return saveAtomic(dir, func(tmp string) error {
		conf, err := encodeConfig(cfg, tokenIDs(tok), "F32")
		if err != nil {
			return err
		}
		if err := writeFileSync(filepath.Join(tmp, configFile), conf); err != nil {
			return err
		}
		if err := tok.Save(tmp); err != nil {
			return err
		}
		rw, err := json.MarshalIndent(w, "", "  ")
		if err != nil {
			return err
		}
		if err := writeFileSync(filepath.Join(tmp, remoteWeightsFile), append(rw, '\n')); err != nil {
			return err
		}
		if err := writeFileSync(filepath.Join(tmp, remoteNoteFile), []byte(remoteNote(w))); err != nil {
			return err
		}
		if st != nil {
			if err := writeFileSync(filepath.Join(tmp, trainerStateFile), encodeTrainerState(st)); err != nil {
				return err
			}
		}
		return syncDir(tmp)
	})
}

func remoteNote(w RemoteWeights) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# The weights of this checkpoint are not in this folder\n\n")
	fmt.Fprintf(&b, "They live on the Tinker service at %s: a LoRA adapter of rank %d on %s, trained as model %s.\n\n", w.URL, w.Rank, w.BaseModel, w.ModelID)
	if w.Weights != "" {
		fmt.Fprintf(&b, "- training state (adapter and optimizer, what `agentrl train --resume` loads): `%s`\n", w.Weights)
	}
	fmt.Fprintf(&b, "- sampler weights of policy version %d: `%s`\n\n", w.Version, w.Sampler)
	fmt.Fprintf(&b, "This folder holds the run's progress, the tokenizer and the base model's config.json, no weights file: "+
		"`agentrl serve`, `agentrl eval` and exports refuse it. Download the adapter with Tinker's SDK to use it elsewhere.\n")
	return b.String()
}

// RemoteCheckpoint is a folder written by SaveRemote.
type RemoteCheckpoint struct {
	Tokenizer *tokenizer.Tokenizer
	State     *State // nil when none was saved
	Weights   RemoteWeights
}

// remoteWeights reads dir's remote_weights.json: (nil, nil) when it has none.
func remoteWeights(dir string) (*RemoteWeights, error) {
	data, err := readLimited(filepath.Join(dir, remoteWeightsFile), maxRemoteFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", remoteWeightsFile, err)
	}
	return decodeRemoteWeights(data)
}

// decodeRemoteWeights parses and checks remote_weights.json.
func decodeRemoteWeights(data []byte) (*RemoteWeights, error) {
	if len(data) > maxRemoteFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", remoteWeightsFile, maxRemoteFile)
	}
	var w RemoteWeights
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%s: %w", remoteWeightsFile, err)
	}
	if err := w.validate(); err != nil {
		return nil, err
	}
	return &w, nil
}

// ReadRemote reads a folder written by SaveRemote: (nil, nil) for a folder that holds its
// weights.
func ReadRemote(dir string) (*RemoteCheckpoint, error) {
	w, err := remoteWeights(dir)
	if err != nil || w == nil {
		if err != nil {
			err = fmt.Errorf("checkpoint: load %s: %w", dir, err)
		}
		return nil, err
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %w", dir, err)
	}
	rc := &RemoteCheckpoint{Tokenizer: tok, Weights: *w}
	data, err := os.ReadFile(filepath.Join(dir, trainerStateFile))
	if errors.Is(err, os.ErrNotExist) {
		return rc, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %w", dir, err)
	}
	ts, err := parseTrainerState(data)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %w", dir, err)
	}
	if ts.Optimizer {
		return nil, fmt.Errorf("checkpoint: load %s: %s records a local optimizer beside remote weights", dir, trainerStateFile)
	}
	rc.State = &State{Extra: ts.Extra}
	return rc, nil
}

// refuseRemote is LoadModel's first check: a folder of remote weights is refused by where they are.
func refuseRemote(dir string) error {
	w, err := remoteWeights(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: load %s: %w", dir, err)
	}
	if w != nil {
		return &RemoteWeightsError{Dir: dir, Weights: *w}
	}
	return nil
}
