package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/optim"
)

// State is what resuming needs beside the weights.
type State struct {
	Optimizer *optim.State    // nil = no optimizer state saved
	Extra     json.RawMessage // opaque to this package: the pipeline's step, phase, file offsets, RNG positions
}

// stateFormatVersion is trainer_state.json's format_version; Load refuses other versions rather
// than guess at a layout it does not know.
const stateFormatVersion = 1

// Moment tensor name prefixes in optimizer.safetensors, as torch's AdamW names its state.
const (
	firstMomentPrefix  = "exp_avg."
	secondMomentPrefix = "exp_avg_sq."
)

// trainerState is trainer_state.json. Optimizer records whether optimizer.safetensors belongs to
// the checkpoint, so a missing file is an error instead of a silent fresh optimizer.
type trainerState struct {
	FormatVersion int             `json:"format_version"`
	Optimizer     bool            `json:"optimizer"`
	Extra         json.RawMessage `json:"extra"`
}

// checkState validates st against the model before anything is written.
func checkState(st *State, m *model.Model) error {
	if len(st.Extra) > 0 && !json.Valid(st.Extra) {
		return errors.New("State.Extra is not valid JSON")
	}
	if o := st.Optimizer; o != nil {
		params, _, _ := m.Trainable()
		n := len(params)
		if len(o.M) != n || len(o.V) != n {
			return fmt.Errorf("optimizer state has %d/%d moments for a model of %d parameters", len(o.M), len(o.V), n)
		}
		if o.Step < 0 {
			return fmt.Errorf("optimizer state has a negative step %d", o.Step)
		}
	}
	return nil
}

// encodeTrainerState writes Extra byte for byte (encoding/json would re-compact it).
func encodeTrainerState(st *State) []byte {
	extra := []byte(st.Extra)
	if len(extra) == 0 {
		extra = []byte("null")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "{\"format_version\": %d, \"optimizer\": %t, \"extra\": ", stateFormatVersion, st.Optimizer != nil)
	b.Write(extra)
	b.WriteString("}\n")
	return b.Bytes()
}

func parseTrainerState(data []byte) (*trainerState, error) {
	var ts trainerState
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ts); err != nil {
		return nil, fmt.Errorf("%s: %w", trainerStateFile, err)
	}
	if ts.FormatVersion != stateFormatVersion {
		return nil, fmt.Errorf("%s: format_version %d, this build reads %d", trainerStateFile, ts.FormatVersion, stateFormatVersion)
	}
	if isNull(ts.Extra) {
		ts.Extra = nil
	}
	return &ts, nil
}

// optimizerTensors views the moments as one tensor per parameter tensor, first moments then
// second moments, without copying.
func optimizerTensors(params []model.NamedTensor, o *optim.State) []Tensor {
	out := make([]Tensor, 0, 2*len(params))
	for _, pass := range []struct {
		prefix string
		data   []float32
	}{{firstMomentPrefix, o.M}, {secondMomentPrefix, o.V}} {
		for _, t := range params {
			out = append(out, Tensor{Name: pass.prefix + t.Name, Shape: t.Shape, Data: pass.data[t.Offset : t.Offset+len(t.Data)]})
		}
	}
	return out
}

func optimizerMetadata(o *optim.State) map[string]string {
	return map[string]string{"format": "pt", "step": strconv.FormatInt(o.Step, 10)}
}

// loadOptimizer reads optimizer.safetensors for model m. Moments must be F32: resuming from
// rounded moments would not continue the run exactly.
func loadOptimizer(path string, m *model.Model) (*optim.State, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	h, err := parseHeader(f, fi.Size())
	if err != nil {
		return nil, err
	}
	stepText, ok := h.metadata["step"]
	if !ok {
		return nil, errors.New("__metadata__ has no step")
	}
	step, err := strconv.ParseInt(stepText, 10, 64)
	if err != nil || step < 0 {
		return nil, fmt.Errorf("__metadata__ step %q is not a non-negative integer", stepText)
	}
	params, _, tensors := m.Trainable() // the adapters' moments when the model has adapters
	n := len(params)
	o := &optim.State{Step: step, M: make([]float32, n), V: make([]float32, n)}
	want := optimizerTensors(tensors, o)
	if err := checkTensorSet(h, want, true); err != nil {
		return nil, err
	}
	for _, t := range want {
		if err := h.readInto(f, h.entries[h.byName[t.Name]], t.Data); err != nil {
			return nil, err
		}
		if err := checkFinite(t); err != nil {
			return nil, err
		}
	}
	return o, nil
}
