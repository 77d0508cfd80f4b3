package checkpoint

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
)

// Checkpoint is a loaded checkpoint folder.
type Checkpoint struct {
	Model     *model.Model
	Tokenizer *tokenizer.Tokenizer
	State     *State // nil when none was saved
}

// Load reads a checkpoint folder: weights and config, the LoRA adapters when
// adapter_config.json is present (LoadAdapter), the tokenizer, the value head when
// value_head.safetensors is present, and the resume state when trainer_state.json is (the
// optimizer's moments are then the adapters' for a model with adapters). The
// tokenizer may not have more ids than config.json's vocab_size (a larger embedding table is
// fine: models pad it).
func Load(dir string) (*Checkpoint, error) {
	m, err := LoadModel(dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, adapterConfigFile)); err == nil {
		if _, err := LoadAdapter(dir, m); err != nil {
			return nil, err
		}
	}
	if err := loadValueHead(filepath.Join(dir, valueHeadFile), m); err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %s: %w", dir, valueHeadFile, err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %w", dir, err)
	}
	if tok.VocabSize() > m.Cfg.Vocab {
		return nil, fmt.Errorf("checkpoint: load %s: tokenizer has %d ids but config.json vocab_size is %d", dir, tok.VocabSize(), m.Cfg.Vocab)
	}
	st, err := loadState(dir, m)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %w", dir, err)
	}
	return &Checkpoint{Model: m, Tokenizer: tok, State: st}, nil
}

// loadValueHead gives m the value head saved at path, if there is a file there: exactly the
// head's two tensors, with the shapes m's config implies, finite.
func loadValueHead(path string, m *model.Model) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	h, err := parseHeader(f, fi.Size())
	if err != nil {
		return err
	}
	m.AddValueHead()
	var want []Tensor
	for _, t := range m.Params.Tensors() {
		if t.ValueHead() {
			want = append(want, Tensor{Name: t.Name, Shape: t.Shape, Data: t.Data})
		}
	}
	if err := checkTensorSet(h, want, false); err != nil {
		return err
	}
	for _, t := range want {
		if err := h.readInto(f, h.entries[h.byName[t.Name]], t.Data); err != nil {
			return err
		}
		if err := checkFinite(t); err != nil {
			return err
		}
	}
	return nil
}

// LoadModel reads only config.json and the weights (no value head): model.safetensors, or the
// shards model.safetensors.index.json lists. Every tensor the config implies must be present
// with its shape (F32, or F16/BF16 converted to float32), and no other tensor may be: an unknown
// tensor means the files describe a model this one is not. A NaN or infinite weight is an error
// naming the file, the tensor and its first bad index (Load checks optimizer moments too). The
// model's DType is the dtype most of the weights were stored in.
//
// Each tensor is read straight into the model's float32 weights (F32 with one read, F16 and BF16
// through a 256 KiB conversion buffer), so loading takes the memory of the model's weights and
// nothing of the file's size besides.
func LoadModel(dir string) (*model.Model, error) {
	if err := refuseRemote(dir); err != nil { // remote.go
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, configFile))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %w", dir, err)
	}
	cfg, err := parseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %w", dir, err)
	}
	shards, err := weightFiles(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %w", dir, err)
	}
	defer func() {
		for _, s := range shards {
			s.f.Close()
		}
	}()
	m, err := loadWeights(shards, cfg)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %w", dir, err)
	}
	return m, nil
}

// LoadWeights is LoadModel and, when the folder holds an adapter (adapter_config.json), its
// LoRA adapters on the model (LoadAdapter): what a server serves from a folder of a base and an
// adapter.
func LoadWeights(dir string) (*model.Model, error) {
	m, err := LoadModel(dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, adapterConfigFile)); err == nil {
		if _, err := LoadAdapter(dir, m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// loadWeights validates the headers against cfg before allocating the model, so files that do
// not match cost no more than their headers, then reads each tensor into its view.
func loadWeights(shards []shard, cfg model.Config) (*model.Model, error) {
	h, owner, err := mergedHeader(shards)
	if err != nil {
		return nil, err
	}
	where := func(name string) string { return shards[owner[h.byName[name]]].name }
	one := len(shards) == 1
	named := func(err error) error { // a single file is named by the error's prefix
		if one {
			return fmt.Errorf("%s: %w", shards[0].name, err)
		}
		return err
	}
	// The header is checked against names and shapes derived from cfg before the model is
	// allocated: once they match, the model's size is bounded by the files'. The tensor count
	// comes first so that a corrupt layer count cannot make the expected list itself huge.
	if n := llamaTensorCount(cfg); n > 2*len(h.entries)+16 {
		return nil, named(fmt.Errorf("has %d tensors, config.json implies %d", len(h.entries), n))
	}
	want := llamaTensors(cfg)
	for _, t := range want { // a shape that contradicts config.json, named with its file
		if i, ok := h.byName[t.Name]; ok && !slices.Equal(h.entries[i].shape, t.Shape) {
			return nil, fmt.Errorf("%s: tensor %q has shape %v, config.json implies %v", where(t.Name), t.Name, h.entries[i].shape, t.Shape)
		}
	}
	if err := checkTensorSet(h, want, false); err != nil {
		return nil, named(tiedHint(err, h, cfg))
	}
	// Every weight is read from the files below.
	m, err := model.NewZero(cfg)
	if err != nil {
		return nil, err
	}
	m.DType = weightsDType(h)
	if src := shards[0].h.metadata[sourceDTypeKey]; dtypeSize[src] != 0 {
		m.DType = src
	}
	for _, t := range m.Params.Tensors() {
		i := h.byName[t.Name]
		s := shards[owner[i]]
		if err := s.h.readInto(s.f, s.h.entries[s.h.byName[t.Name]], t.Data); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		if err := checkFinite(Tensor{Name: t.Name, Shape: t.Shape, Data: t.Data}); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return m, nil
}

// checkFinite refuses a tensor holding NaN or ±Inf, naming it and its first bad value: weights
// like that make every logit non-finite, so a policy loaded from them could never act. It is one
// pass over values just read.
func checkFinite(t Tensor) error {
	i := firstNonFinite(t.Data)
	if i < 0 {
		return nil
	}
	at := ""
	if len(t.Shape) > 1 {
		idx := make([]int, len(t.Shape))
		for r, k := len(t.Shape)-1, i; r >= 0; r-- {
			idx[r], k = k%t.Shape[r], k/t.Shape[r]
		}
		at = fmt.Sprintf(" %v", idx)
	}
	return fmt.Errorf("tensor %q holds a non-finite value at index %d%s: %v (the checkpoint is broken: use an earlier one)", t.Name, i, at, t.Data[i])
}

// firstNonFinite is the index of the first NaN or ±Inf in x (all exponent bits set), or -1.
func firstNonFinite(x []float32) int {
	const exp = 0x7f800000
	for i, v := range x {
		if math.Float32bits(v)&exp == exp {
			return i
		}
	}
	return -1
}

// checkTensorSet requires h to hold exactly the tensors of want with their shapes; f32Only
// refuses half-precision entries. Errors list every missing and unexpected name.
func checkTensorSet(h *stHeader, want []Tensor, f32Only bool) error {
	var missing, unexpected []string
	wanted := make(map[string]bool, len(want))
	for _, t := range want {
		wanted[t.Name] = true
		i, ok := h.byName[t.Name]
		if !ok {
			missing = append(missing, t.Name)
			continue
		}
		e := h.entries[i]
		if !slices.Equal(e.shape, t.Shape) {
			return fmt.Errorf("tensor %q has shape %v, config.json implies %v", t.Name, e.shape, t.Shape)
		}
		if f32Only && e.dtype != "F32" {
			return fmt.Errorf("tensor %q has dtype %s, want F32", t.Name, e.dtype)
		}
	}
	for _, e := range h.entries {
		if !wanted[e.name] {
			unexpected = append(unexpected, e.name)
		}
	}
	sort.Strings(unexpected)
	var errs []error
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("missing tensors: %s", nameList(missing)))
	}
	if len(unexpected) > 0 {
		errs = append(errs, fmt.Errorf("unexpected tensors: %s", nameList(unexpected)))
	}
	return errors.Join(errs...)
}

// tiedHint explains the commonest mismatch: lm_head.weight present or absent against
// tie_word_embeddings.
func tiedHint(err error, h *stHeader, cfg model.Config) error {
	_, hasHead := h.byName["lm_head.weight"]
	switch {
	case hasHead && cfg.TieEmbeddings:
		return fmt.Errorf("%w (config.json says tie_word_embeddings true, so lm_head.weight must be absent)", err)
	case !hasHead && !cfg.TieEmbeddings:
		return fmt.Errorf("%w (config.json says tie_word_embeddings false, so lm_head.weight is required)", err)
	}
	return err
}

// nameList quotes up to ten names and counts the rest.
func nameList(names []string) string {
	const show = 10
	q := make([]string, 0, min(len(names), show))
	for _, n := range names[:min(len(names), show)] {
		q = append(q, fmt.Sprintf("%q", n))
	}
	s := strings.Join(q, ", ")
	if len(names) > show {
		s += fmt.Sprintf(" and %d more", len(names)-show)
	}
	return s
}

// loadState reads trainer_state.json and, when it says there is one, optimizer.safetensors.
// A folder without trainer_state.json has no state (a weights-only or foreign checkpoint).
func loadState(dir string, m *model.Model) (*State, error) {
	data, err := os.ReadFile(filepath.Join(dir, trainerStateFile))
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(dir, optimizerFile)); err == nil {
			return nil, fmt.Errorf("%s is present without %s", optimizerFile, trainerStateFile)
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ts, err := parseTrainerState(data)
	if err != nil {
		return nil, err
	}
	st := &State{Extra: ts.Extra}
	if ts.Optimizer {
		path := filepath.Join(dir, optimizerFile)
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s records optimizer state but %s is missing", trainerStateFile, optimizerFile)
		}
		if st.Optimizer, err = loadOptimizer(path, m); err != nil {
			return nil, fmt.Errorf("%s: %w", optimizerFile, err)
		}
	}
	return st, nil
}
