package checkpoint

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/agentrl/agentrl/model"
)

// withValueHead is a tiny model with a value head holding distinct values.
func withValueHead(t *testing.T, tied bool, seed uint64) *model.Model {
	t.Helper()
	m := newModel(t, tinyConfig(tied), seed)
	m.AddValueHead()
	for i := range m.Params.Value {
		m.Params.Value[i] = float32(i+1) / 16
	}
	m.Params.ValueBias[0] = -0.25
	return m
}

// A checkpoint with resume state keeps the value head in value_head.safetensors, beside a
// model.safetensors that holds exactly the Llama tensors; it loads back bit for bit, with the
// head's optimizer moments.
func TestValueHeadRoundTrip(t *testing.T) {
	for _, tied := range []bool{true, false} {
		m := withValueHead(t, tied, 21)
		st := &State{Optimizer: randomState(m.NumParams(), 22), Extra: json.RawMessage(`{"step":2}`)}
		dir := filepath.Join(t.TempDir(), "ckpt")
		mustSave(t, dir, m, st)

		weights, _, err := ReadSafetensors(filepath.Join(dir, weightsFile))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for n := range weights {
			names = append(names, n)
		}
		var llama []string
		for _, tn := range llamaTensors(m.Cfg) {
			llama = append(llama, tn.Name)
		}
		sort.Strings(names)
		sort.Strings(llama)
		if !slices.Equal(names, llama) {
			t.Fatalf("tied=%v: model.safetensors holds %v, want the Llama tensors %v", tied, names, llama)
		}
		head, _, err := ReadSafetensors(filepath.Join(dir, valueHeadFile))
		if err != nil {
			t.Fatal(err)
		}
		if len(head) != 2 || !slices.Equal(head[model.ValueHeadWeight].Shape, []int{1, 16}) || !slices.Equal(head[model.ValueHeadBias].Shape, []int{1}) ||
			head[model.ValueHeadBias].Data[0] != -0.25 {
			t.Fatalf("tied=%v: value_head.safetensors holds %v", tied, head)
		}

		ck, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !ck.Model.HasValueHead() {
			t.Fatal("the value head was not loaded")
		}
		if i := firstDiff(ck.Model.Params.Data, m.Params.Data); i >= 0 {
			t.Fatalf("tied=%v: weight %d differs after the round trip", tied, i)
		}
		o := ck.State.Optimizer
		if firstDiff(o.M, st.Optimizer.M) >= 0 || firstDiff(o.V, st.Optimizer.V) >= 0 {
			t.Fatalf("tied=%v: optimizer moments differ after the round trip", tied)
		}
		checkSameLogprobs(t, m, ck.Model)

		// LoadModel reads the Llama weights only.
		lm, err := LoadModel(dir)
		if err != nil {
			t.Fatal(err)
		}
		if lm.HasValueHead() || firstDiff(lm.Params.Data, m.Params.Data[:lm.NumParams()]) >= 0 {
			t.Fatalf("tied=%v: LoadModel: head %v or weights differ", tied, lm.HasValueHead())
		}
	}
}

// A weights-only checkpoint of a model with a value head is a plain Llama folder: no value head
// file, and it loads as a model without one.
func TestValueHeadNotInWeightsOnlyCheckpoint(t *testing.T) {
	m := withValueHead(t, true, 23)
	dir := filepath.Join(t.TempDir(), "best")
	mustSave(t, dir, m, nil)
	if _, err := os.Stat(filepath.Join(dir, valueHeadFile)); !os.IsNotExist(err) {
		t.Fatalf("%s written without resume state (stat: %v)", valueHeadFile, err)
	}
	ck, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Model.HasValueHead() {
		t.Fatal("a weights-only checkpoint loaded with a value head")
	}
	if firstDiff(ck.Model.Params.Data, m.Params.Data[:ck.Model.NumParams()]) >= 0 {
		t.Fatal("weights differ")
	}
	checkSameLogprobs(t, m, ck.Model)
}

// A value head file that does not fit the model is refused, naming the file.
func TestValueHeadFileRefusals(t *testing.T) {
	m := withValueHead(t, true, 24)
	st := &State{Extra: json.RawMessage(`{}`)}
	cases := []struct {
		name    string
		tensors []Tensor
		want    []string
	}{
		{"wrong shape", []Tensor{{Name: model.ValueHeadWeight, Shape: []int{1, 8}, Data: make([]float32, 8)}, {Name: model.ValueHeadBias, Shape: []int{1}, Data: []float32{0}}}, []string{valueHeadFile, "shape"}},
		{"missing bias", []Tensor{{Name: model.ValueHeadWeight, Shape: []int{1, 16}, Data: make([]float32, 16)}}, []string{valueHeadFile, "missing", model.ValueHeadBias}},
		{"stranger", []Tensor{{Name: model.ValueHeadWeight, Shape: []int{1, 16}, Data: make([]float32, 16)}, {Name: model.ValueHeadBias, Shape: []int{1}, Data: []float32{0}}, {Name: "v_head.summary.weight", Shape: []int{1}, Data: []float32{0}}}, []string{"unexpected", "v_head.summary.weight"}},
		{"not finite", []Tensor{{Name: model.ValueHeadWeight, Shape: []int{1, 16}, Data: make([]float32, 16)}, {Name: model.ValueHeadBias, Shape: []int{1}, Data: []float32{float32(math.Inf(1))}}}, []string{model.ValueHeadBias, "non-finite"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ckpt")
			mustSave(t, dir, m, st)
			if err := WriteSafetensors(filepath.Join(dir, valueHeadFile), c.tensors, nil); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir)
			expectErr(t, err, c.want...)
		})
	}
}

// The independent reader parses value_head.safetensors, and model.safetensors of a model with a
// value head holds the Llama tensors only.
func TestPeerReadsValueHead(t *testing.T) {
	python3(t)
	m := withValueHead(t, false, 25)
	st := &State{Optimizer: randomState(m.NumParams(), 26)}
	dir := filepath.Join(t.TempDir(), "ckpt")
	mustSave(t, dir, m, st)
	llama, head := map[string]Tensor{}, map[string]Tensor{}
	for _, p := range m.Params.Tensors() {
		if p.ValueHead() {
			head[p.Name] = Tensor{Shape: p.Shape, Data: p.Data}
		} else {
			llama[p.Name] = Tensor{Shape: p.Shape, Data: p.Data}
		}
	}
	comparePeer(t, peerRead(t, filepath.Join(dir, weightsFile)), llama, map[string]string{"format": "pt"})
	comparePeer(t, peerRead(t, filepath.Join(dir, valueHeadFile)), head, map[string]string{"format": "pt"})
	want := map[string]Tensor{}
	for _, tn := range optimizerTensors(m.Params.Tensors(), st.Optimizer) {
		want[tn.Name] = tn
	}
	comparePeer(t, peerRead(t, filepath.Join(dir, optimizerFile)), want, optimizerMetadata(st.Optimizer))
}
