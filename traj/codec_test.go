package traj

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

type codec struct {
	name   string
	encode func(*Trajectory) ([]byte, error)
	decode func([]byte) (*Trajectory, error)
}

var codecs = []codec{
	{"binary", func(t *Trajectory) ([]byte, error) { return t.MarshalBinary() },
		func(b []byte) (*Trajectory, error) { t := new(Trajectory); return t, t.UnmarshalBinary(b) }},
	{"json", func(t *Trajectory) ([]byte, error) { return t.AppendJSON(nil) },
		func(b []byte) (*Trajectory, error) { t := new(Trajectory); return t, t.UnmarshalJSON(b) }},
	{"encoding/json", func(t *Trajectory) ([]byte, error) { return json.Marshal(t) },
		func(b []byte) (*Trajectory, error) { t := new(Trajectory); return t, json.Unmarshal(b, t) }},
}

func roundTripCases() map[string]*Trajectory {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := map[string]*Trajectory{
		"empty":        {Status: StatusTruncated},
		"one token":    {Tokens: []int32{7}, Roles: []Role{RoleUser}, LossMask: []bool{false}, Logprobs: []float32{0}, Versions: []int32{NoVersion}},
		"odd values":   oddTrajectory(),
		"multi-turn":   genTrajectory(rng, 4096, 151_000),
		"small vocab":  genTrajectory(rng, 700, 300),
		"all-assist":   {Tokens: []int32{1, 2}, Roles: []Role{RoleAssistant, RoleAssistant}, LossMask: []bool{true, true}, Logprobs: []float32{-1, -2}, Versions: []int32{3, 3}},
		"mask starts1": {Tokens: []int32{1, 2}, Roles: []Role{RoleAssistant, RoleEnv}, LossMask: []bool{true, false}, Logprobs: []float32{-1, 0}, Versions: []int32{3, NoVersion}},
	}
	for i := 0; i < 20; i++ {
		cases["random "+string(rune('a'+i))] = genTrajectory(rng, 1+rng.IntN(3000), 1+rng.Int32N(200_000))
	}
	return cases
}

func TestRoundTrip(t *testing.T) {
	for name, tr := range roundTripCases() {
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
				if !Equal(tr, got) {
					t.Fatalf("round trip changed the trajectory:\nwant %+v\ngot  %+v", tr, got)
				}
				again, err := c.encode(got)
				if err != nil || !bytes.Equal(b, again) {
					t.Fatalf("re-encoding differs (err %v)", err)
				}
			})
		}
	}
}

func TestEqualDetectsDifferences(t *testing.T) {
	base := oddTrajectory()
	mutations := map[string]func(*Trajectory){
		"logprob NaN payload": func(t *Trajectory) { t.Logprobs[5] = t.Logprobs[4] },
		"signed zero":         func(t *Trajectory) { t.Logprobs[1] = 0 },
		"token":               func(t *Trajectory) { t.Tokens[3]++ },
		"turn reward":         func(t *Trajectory) { t.Turns[0].Reward = 0 },
		"tool call":           func(t *Trajectory) { t.Turns[1].ToolCalls[0].Error = "" },
		"meta":                func(t *Trajectory) { t.Meta = t.Meta[:1] },
		"timings":             func(t *Trajectory) { t.Timings.Tokenize++ },
	}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			other := oddTrajectory()
			mutate(other)
			if Equal(base, other) {
				t.Fatal("Equal missed the difference")
			}
		})
	}
	if !Equal(&Trajectory{}, &Trajectory{Tokens: []int32{}, Meta: []KV{}}) {
		t.Fatal("nil and empty slices should be equal")
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	bad := map[string]*Trajectory{
		"length mismatch": {Tokens: []int32{1}, Roles: []Role{}, LossMask: []bool{false}, Logprobs: []float32{0}, Versions: []int32{0}},
		"mask on user":    {Tokens: []int32{1}, Roles: []Role{RoleUser}, LossMask: []bool{true}, Logprobs: []float32{0}, Versions: []int32{0}},
		"unknown role":    {Tokens: []int32{1}, Roles: []Role{9}, LossMask: []bool{false}, Logprobs: []float32{0}, Versions: []int32{0}},
		"unknown status":  {Status: 7},
		"turn past end":   {Turns: []Turn{{Start: 0, End: 1, ObsEnd: 1}}},
	}
	for name, tr := range bad {
		for _, c := range codecs {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				if _, err := c.encode(tr); err == nil {
					t.Fatal("encode accepted an invalid trajectory")
				}
			})
		}
	}
}

func TestBinaryDecodeErrors(t *testing.T) {
	good, err := genTrajectory(rand.New(rand.NewPCG(3, 4)), 300, 5000).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	odd, err := oddTrajectory().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	with := func(b []byte, i int, v byte) []byte { c := bytes.Clone(b); c[i] = v; return c }
	cases := map[string]struct {
		in   []byte
		want string
	}{
		"nil":           {nil, "bad magic"},
		"bad magic":     {with(good, 0, 'X'), "bad magic"},
		"version 3":     {with(good, 4, 3), "unknown format version 3"},
		"trailing byte": {append(bytes.Clone(good), 0), "trailing"},
		"huge count":    {append([]byte("ATRJ\x01"), 0xff, 0xff, 0xff, 0xff, 0x0f), "exceeds"},
		"varint overflow": {append([]byte("ATRJ\x01\x00\x00"), bytes.Repeat([]byte{0xff}, 11)...),
			"overflows"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var tr Trajectory
			err := tr.UnmarshalBinary(c.in)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to mention %q", err, c.want)
			}
		})
	}
	// Every proper prefix is truncated input and must fail, for both encodings.
	for _, b := range [][]byte{good, odd} {
		for i := 0; i < len(b); i++ {
			var tr Trajectory
			if err := tr.UnmarshalBinary(b[:i]); err == nil {
				t.Fatalf("prefix of %d/%d bytes decoded without error", i, len(b))
			}
		}
	}
}

func TestJSONDecodeErrors(t *testing.T) {
	good := `{"v":1,"id":"x","env":"e","task_seed":1,"group_id":2,"tokens":[5,6],"roles":"ua","loss_mask":"01","logprobs":[0,-1.5],"versions":[-1,3],"turns":[{"start":1,"end":2,"obs_end":2,"reward":1}],"reward":1,"status":"ok","error":"","timings":{"generate_ns":1,"env_ns":2,"tokenize_ns":3,"total_ns":4}}`
	var ok Trajectory
	if err := ok.UnmarshalJSON([]byte(good)); err != nil {
		t.Fatalf("good line: %v", err)
	}
	cases := map[string]struct{ in, want string }{
		"unknown field":   {strings.Replace(good, `"env":"e"`, `"env":"e","extra":1`, 1), "unknown field"},
		"unknown nested":  {strings.Replace(good, `"reward":1}`, `"reward":1,"x":2}`, 1), "unknown field"},
		"version 2":       {strings.Replace(good, `"v":1`, `"v":2`, 1), "unknown format version 2"},
		"missing version": {strings.Replace(good, `"v":1,`, ``, 1), `missing "v"`},
		"trailing":        {good + `{}`, "trailing"},
		"bad role":        {strings.Replace(good, `"ua"`, `"ux"`, 1), "role letter"},
		"bad mask":        {strings.Replace(good, `"01"`, `"02"`, 1), "loss mask"},
		"short roles":     {strings.Replace(good, `"ua"`, `"u"`, 1), "lengths differ"},
		"mask on user":    {strings.Replace(good, `"01"`, `"11"`, 1), "loss mask set"},
		"bad float":       {strings.Replace(good, `-1.5`, `"inf"`, 1), "float string"},
		"nan not nan":     {strings.Replace(good, `-1.5`, `"NaN:0x3f800000"`, 1), "not a NaN"},
		"float as int":    {strings.Replace(good, `[5,6]`, `[5,6.5]`, 1), "element 1"},
		"token overflow":  {strings.Replace(good, `[5,6]`, `[5,2147483648]`, 1), "out of range"},
		"bad status":      {strings.Replace(good, `"ok"`, `"fine"`, 1), "unknown status"},
		"turn range":      {strings.Replace(good, `"obs_end":2`, `"obs_end":3`, 1), "bad range"},
		"not json":        {`{"v":1,`, "unexpected EOF"},
		"bad b64":         {strings.Replace(good, `"id":"x"`, `"id":{"b64":"!!"}`, 1), "illegal base64"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var tr Trajectory
			err := tr.UnmarshalJSON([]byte(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to mention %q", err, c.want)
			}
		})
	}
}

func TestJSONNonFiniteForms(t *testing.T) {
	b, err := oddTrajectory().AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"+Inf"`, `"-Inf"`, `"NaN"`, `"NaN:0x7fc00001"`, `"NaN:0x7ff0000000000001"`, `-0`, `{"b64":`, `\u2028`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("JSON form lacks %s", want)
		}
	}
	if !json.Valid(b) {
		t.Fatal("JSON form is not valid JSON")
	}
}

func TestJSONL(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ts := []*Trajectory{genTrajectory(rng, 500, 1000), oddTrajectory(), {}}
	var buf bytes.Buffer
	if err := WriteJSONL(&buf, ts...); err != nil {
		t.Fatal(err)
	}
	full := buf.Bytes()
	read := func(b []byte) ([]*Trajectory, error) {
		r := NewJSONLReader(bytes.NewReader(b))
		var out []*Trajectory
		for {
			tr, err := r.Read()
			if err != nil {
				if err.Error() == "EOF" {
					return out, nil
				}
				return out, err
			}
			out = append(out, tr)
		}
	}
	got, err := read(append([]byte("\n"), full...))
	if err != nil || len(got) != len(ts) {
		t.Fatalf("read %d trajectories, err %v", len(got), err)
	}
	for i := range ts {
		if !Equal(ts[i], got[i]) {
			t.Fatalf("trajectory %d changed", i)
		}
	}
	// Cut inside the last line: the earlier lines survive, the torn one is reported as such.
	cut := full[:len(full)-10]
	got, err = read(cut)
	if len(got) != 2 || !isTorn(err) {
		t.Fatalf("torn jsonl: got %d, err %v", len(got), err)
	}
	// Damage inside a complete line is not a torn tail.
	bad := bytes.Replace(bytes.Clone(full), []byte(`"v":1`), []byte(`"v":9`), 1)
	if _, err = read(bad); err == nil || isTorn(err) {
		t.Fatalf("damaged line: err %v", err)
	}
}
