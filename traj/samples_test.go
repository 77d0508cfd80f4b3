package traj

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// multiSample is genTrajectory's episode cut into samples: each later sample starts with a
// rebuilt context (system and user tokens, then what the template re-rendered) before its turns.
func multiSample(rng *rand.Rand, samples, n int, vocab int32) *Trajectory {
	t := genTrajectory(rng, n, vocab)
	for k := 1; k < samples; k++ {
		t.AppendSamples(genTrajectory(rng, n, vocab))
	}
	return t
}

func TestSamplesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	cases := map[string]*Trajectory{
		"two":   multiSample(rng, 2, 300, 5000),
		"five":  multiSample(rng, 5, 120, 151_000),
		"short": {Tokens: []int32{1, 2}, Roles: []Role{RoleUser, RoleUser}, LossMask: []bool{false, false}, Logprobs: []float32{0, 0}, Versions: []int32{NoVersion, NoVersion}, Samples: []int{1}},
	}
	odd := oddTrajectory()
	odd.Samples = []int{6, 7}
	cases["odd"] = odd
	for name, tr := range cases {
		if err := tr.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, c := range codecs {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				b, err := c.encode(tr)
				if err != nil {
					t.Fatalf("encode: %v", err)
				}
				got, err := c.decode(b)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if !Equal(tr, got) || got.NumSamples() != tr.NumSamples() {
					t.Fatalf("round trip changed the trajectory: samples %v, want %v", got.Samples, tr.Samples)
				}
				again, err := c.encode(got)
				if err != nil || !bytes.Equal(b, again) {
					t.Fatalf("re-encoding differs (err %v)", err)
				}
			})
		}
	}
	b, err := cases["two"].MarshalBinary()
	if err != nil || b[4] != BinaryVersion {
		t.Fatalf("a multi-sample record is written as version %d (err %v), want %d", b[4], err, BinaryVersion)
	}
	if one, _ := genTrajectory(rng, 50, 500).MarshalBinary(); one[4] != 1 {
		t.Fatalf("a one-sample record is written as version %d, want 1", one[4])
	}
}

// TestBeforeSamplesFiles reads files written by the build before samples existed (testdata,
// a binary stream and JSONL): they decode, are single-sample episodes, and re-encode to the same
// bytes, so recordings of earlier runs replay unchanged.
func TestBeforeSamplesFiles(t *testing.T) {
	raw, err := os.ReadFile("testdata/before-samples.atrs")
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var ts []*Trajectory
	for {
		tr, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if tr.NumSamples() != 1 || tr.Samples != nil {
			t.Fatalf("%s: an earlier record decodes with samples %v", tr.ID, tr.Samples)
		}
		ts = append(ts, tr)
	}
	if len(ts) != 3 {
		t.Fatalf("read %d records, want 3", len(ts))
	}
	var bin bytes.Buffer
	w, err := NewWriter(&bin, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range ts {
		if err := w.Write(tr); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bin.Bytes(), raw) {
		t.Fatal("re-encoding an earlier binary stream changed its bytes")
	}
	js, err := os.ReadFile("testdata/before-samples.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	jr := NewJSONLReader(bytes.NewReader(js))
	var out bytes.Buffer
	for i := 0; ; i++ {
		tr, err := jr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !Equal(tr, ts[i]) {
			t.Fatalf("record %d: the JSONL and binary files disagree", i)
		}
		if err := WriteJSONL(&out, tr); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(out.Bytes(), js) {
		t.Fatal("re-encoding an earlier JSONL file changed its bytes")
	}
}

func TestSamplesInvalid(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	base := func() *Trajectory { return multiSample(rng, 2, 200, 500) }
	bad := map[string]func(*Trajectory){
		"at zero":     func(t *Trajectory) { t.Samples = []int{0} },
		"at the end":  func(t *Trajectory) { t.Samples = []int{len(t.Tokens)} },
		"descending":  func(t *Trajectory) { t.Samples = []int{t.Samples[0], t.Samples[0] - 1} },
		"repeated":    func(t *Trajectory) { t.Samples = []int{t.Samples[0], t.Samples[0]} },
		"turn across": func(t *Trajectory) { t.Samples = []int{t.Turns[0].Start + 1} },
	}
	for name, mutate := range bad {
		tr := base()
		mutate(tr)
		if err := tr.Validate(); err == nil {
			t.Errorf("%s: Validate accepted samples %v", name, tr.Samples)
		}
	}
	a := base()
	b := *a
	b.Samples = []int{a.Samples[0] + 1}
	if Equal(a, &b) {
		t.Fatal("Equal ignores samples")
	}

	good, err := base().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	// The samples section of a two-sample record is its count (1) and one delta just before
	// the 8-byte reward; find it from the end: reward 8, status 1, error 1, timings, meta.
	one, _ := (&Trajectory{Tokens: []int32{1, 2}, Roles: []Role{RoleUser, RoleUser}, LossMask: []bool{false, false},
		Logprobs: []float32{0, 0}, Versions: []int32{NoVersion, NoVersion}, Samples: []int{1}}).MarshalBinary()
	// magic+v 5, id 1, env 1, seed 1, group 1, n 1, tokens 2, roles 2, mask 1, logprobs 2, versions 2, turns 1 → 20
	if one[20] != 1 || one[21] != 1 {
		t.Fatalf("samples section at byte 20 is % x, want 01 01", one[20:22])
	}
	cases := map[string][]byte{
		"no samples in v2": append(append(bytes.Clone(one[:20]), 0), one[22:]...),
		"start past end":   append(append(bytes.Clone(one[:20]), 1, 2), one[22:]...),
		"start zero":       append(append(bytes.Clone(one[:20]), 1, 0), one[22:]...),
		"truncated":        good[:len(good)/2],
	}
	for name, in := range cases {
		var tr Trajectory
		if err := tr.UnmarshalBinary(in); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	for name, in := range map[string]string{
		"empty samples": `{"v":1,"status":"ok","samples":[]}`,
		"out of range":  `{"v":1,"status":"ok","samples":[1]}`,
	} {
		var tr Trajectory
		if err := tr.UnmarshalJSON([]byte(in)); err == nil || !strings.Contains(err.Error(), "sample") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}
