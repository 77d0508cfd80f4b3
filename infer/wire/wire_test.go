package wire

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/agentrl/agentrl/infer"
)

// floats are the float32s whose formatting differs: zeros, the exponent thresholds, the
// extremes, subnormals, and logprobs as the sampler gives them.
var floats = []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.5, 1e-6, 9.99999e-7, -1e-7, 1e20, 1e21, -1e21, 123456789,
	math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 1.17549435e-38, -2.3025851, -0.0001234, -17.5, 3.4028234e38}

func randFloat(rng *rand.Rand) float32 {
	switch rng.IntN(3) {
	case 0:
		return floats[rng.IntN(len(floats))]
	case 1:
		return math.Float32frombits(rng.Uint32()) // any bits; non-finite ones are skipped by the caller
	}
	return -float32(rng.ExpFloat64() * 5)
}

func randInts(rng *rand.Rand) []int32 {
	switch rng.IntN(4) {
	case 0:
		return nil
	case 1:
		return []int32{}
	}
	v := make([]int32, rng.IntN(40))
	for i := range v {
		v[i] = int32(rng.Uint32())
		if rng.IntN(2) == 0 {
			v[i] = int32(rng.IntN(2048))
		}
	}
	return v
}

func randRequest(rng *rand.Rand) infer.Request {
	sessions := []string{"", "17", "episode-3/turn 2", "ü", "<tag>", "a\"b", "tab\there", "\u2028"}
	return infer.Request{
		Prompt: randInts(rng), Stop: randInts(rng), MaxTokens: rng.IntN(5000) - 10,
		Sampling: infer.Sampling{Temperature: randFloat(rng), TopK: rng.IntN(100) - 2, TopP: randFloat(rng)},
		Seed:     rng.Uint64(), Session: sessions[rng.IntN(len(sessions))],
	}
}

func randCompletion(rng *rand.Rand) infer.Completion {
	c := infer.Completion{Tokens: randInts(rng), Versions: randInts(rng), Finish: []infer.FinishReason{"stop", "length", "", "odd <&>"}[rng.IntN(4)]}
	if rng.IntN(5) > 0 {
		c.Logprobs = make([]float32, rng.IntN(40))
		for i := range c.Logprobs {
			c.Logprobs[i] = randFloat(rng)
		}
	}
	return c
}

func TestAppendIsMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		req := randRequest(rng)
		want, werr := json.Marshal(req)
		got, gerr := AppendRequest(nil, req)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%+v: Marshal error %v, AppendRequest error %v", req, werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("%+v:\nAppendRequest %s\nMarshal       %s", req, got, want)
		}
		c := randCompletion(rng)
		want, werr = json.Marshal(c)
		got, gerr = AppendCompletion(nil, c)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%+v: Marshal error %v, AppendCompletion error %v", c, werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("%+v:\nAppendCompletion %s\nMarshal          %s", c, got, want)
		}
	}
}

// Everything written reads back through the fast path as the value written.
func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		req := randRequest(rng)
		if b, err := AppendRequest(nil, req); err == nil {
			got, ok := ReadRequest(b)
			if req.Session != "" && !plainASCII(req.Session) {
				ok = true // written escaped: outside the subset, read by encoding/json
				got = req
			}
			if !ok || !reflect.DeepEqual(got, req) {
				t.Fatalf("%s read back as %+v (ok %v), want %+v", b, got, ok, req)
			}
		}
		c := randCompletion(rng)
		if b, err := AppendCompletion(nil, c); err == nil {
			got, ok := ReadCompletion(b)
			if !plainASCII(string(c.Finish)) {
				ok, got = true, c
			}
			if !ok || !reflect.DeepEqual(got, c) {
				t.Fatalf("%s read back as %+v (ok %v), want %+v", b, got, ok, c)
			}
		}
	}
}

func plainASCII(s string) bool {
	var b []byte
	return bytes.Equal(appendString(b, s), append(append([]byte{'"'}, s...), '"'))
}

// The shapes the fast path leaves to encoding/json, and some it takes.
func TestReadSubset(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{`{"prompt":[1,2],"max_tokens":3,"sampling":{"temperature":1,"top_k":0,"top_p":0},"stop":null,"seed":7}`, true},
		{" \n{ \"prompt\" : [ 1 , 2 ] , \"session\" : \"é\" }\t", true},
		{`{}`, true},
		{`{"prompt":null,"sampling":null,"seed":null,"session":null}`, true},
		{`{"Prompt":[1]}`, false},              // case-folded key
		{`{"prompt":[1],"prompt":[2]}`, false}, // repeated key
		{`{"prompt":[1],"extra":1}`, false},    // unknown key
		{`{"prompt":[1.0]}`, false},            // a fraction for an integer
		{`{"prompt":[1e2]}`, false},            // an exponent for an integer
		{`{"prompt":[2147483648]}`, false},     // out of int32
		{`{"prompt":[01]}`, false},             // not JSON
		{`{"prompt":[-]}`, false},              // not JSON
		{`{"prompt":[1,]}`, false},             // not JSON
		{`{"prompt":[1]} {}`, false},           // a second value
		{`{"prompt":[1]`, false},               // cut
		{`{"seed":-1}`, false},                 // negative unsigned
		{`{"session":"a\"b"}`, false},          // an escape
		{"{\"session\":\"\xff\"}", false},      // not UTF-8
		{`{"sampling":{"top_p":1e39}}`, false}, // out of float32
		{`{"sampling":{"top_p":.5}}`, false},   // not JSON
		{`{"sampling":{"top_p":1,"top_p":1}}`, false},
		{`[]`, false},
		{``, false},
	} {
		_, ok := ReadRequest([]byte(c.in))
		if ok != c.ok {
			t.Errorf("ReadRequest(%q) ok %v, want %v", c.in, ok, c.ok)
		}
		checkRequest(t, []byte(c.in))
	}
}

// checkRequest: what ReadRequest takes, encoding/json decodes, strictly, to the same value.
func checkRequest(t *testing.T, data []byte) {
	got, ok := ReadRequest(data)
	if !ok {
		return
	}
	var want infer.Request
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&want); err != nil || dec.More() {
		t.Fatalf("ReadRequest took %q, which encoding/json refuses: %v", data, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: ReadRequest %+v, encoding/json %+v", data, got, want)
	}
}

func checkCompletion(t *testing.T, data []byte) {
	got, ok := ReadCompletion(data)
	if !ok {
		return
	}
	var want infer.Completion
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("ReadCompletion took %q, which encoding/json refuses: %v", data, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: ReadCompletion %+v, encoding/json %+v", data, got, want)
	}
}

func FuzzReadRequest(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 8 {
		b, err := AppendRequest(nil, randRequest(rng))
		if err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"prompt":[1,-0,2147483647],"sampling":{"temperature":1E-3,"top_p":0.9e0}, "session":"é"}`))
	f.Fuzz(func(t *testing.T, data []byte) { checkRequest(t, data) })
}

func FuzzReadCompletion(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 8 {
		b, err := AppendCompletion(nil, randCompletion(rng))
		if err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"tokens":[5,6],"logprobs":[-0.5,-1e-7],"versions":[1,2],"finish":"stop"}`))
	f.Fuzz(func(t *testing.T, data []byte) { checkCompletion(t, data) })
}

// FuzzAppend writes arbitrary values: the bytes are encoding/json's.
func FuzzAppend(f *testing.F) {
	f.Add(uint32(0x3f800000), uint32(0), int32(7), -3, uint64(1), "s", "stop")
	f.Fuzz(func(t *testing.T, fa, fb uint32, tok int32, n int, seed uint64, session, finish string) {
		a, b := math.Float32frombits(fa), math.Float32frombits(fb)
		req := infer.Request{Prompt: []int32{tok, -tok}, MaxTokens: n, Sampling: infer.Sampling{Temperature: a, TopK: n, TopP: b}, Seed: seed, Session: session}
		want, werr := json.Marshal(req)
		got, gerr := AppendRequest(nil, req)
		if (werr == nil) != (gerr == nil) || (werr == nil && !bytes.Equal(got, want)) {
			t.Fatalf("%+v: AppendRequest %s (%v), Marshal %s (%v)", req, got, gerr, want, werr)
		}
		c := infer.Completion{Tokens: []int32{tok}, Logprobs: []float32{a, b}, Versions: []int32{int32(n)}, Finish: infer.FinishReason(finish)}
		want, werr = json.Marshal(c)
		got, gerr = AppendCompletion(nil, c)
		if (werr == nil) != (gerr == nil) || (werr == nil && !bytes.Equal(got, want)) {
			t.Fatalf("%+v: AppendCompletion %s (%v), Marshal %s (%v)", c, got, gerr, want, werr)
		}
	})
}

func BenchmarkWire(b *testing.B) {
	rng := rand.New(rand.NewPCG(9, 10))
	req := infer.Request{Prompt: make([]int32, 32), MaxTokens: 32, Sampling: infer.Sampling{Temperature: 1}, Seed: 12345, Session: "1234"}
	c := infer.Completion{Tokens: make([]int32, 32), Logprobs: make([]float32, 32), Versions: make([]int32, 32), Finish: "length"}
	for i := range 32 {
		req.Prompt[i] = int32(rng.IntN(512))
		c.Tokens[i], c.Logprobs[i], c.Versions[i] = int32(rng.IntN(512)), -float32(rng.ExpFloat64()*3), 3
	}
	rb, _ := json.Marshal(req)
	cb, _ := json.Marshal(c)
	b.Run("request/json", func(b *testing.B) {
		for b.Loop() {
			out, _ := json.Marshal(req)
			var r infer.Request
			dec := json.NewDecoder(bytes.NewReader(out))
			dec.DisallowUnknownFields()
			_ = dec.Decode(&r)
		}
	})
	b.Run("request/wire", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf, _ = AppendRequest(buf[:0], req)
			ReadRequest(buf)
		}
	})
	b.Run("completion/json", func(b *testing.B) {
		for b.Loop() {
			out, _ := json.Marshal(c)
			var r infer.Completion
			_ = json.Unmarshal(out, &r)
		}
	})
	b.Run("completion/wire", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf, _ = AppendCompletion(buf[:0], c)
			ReadCompletion(buf)
		}
	})
	b.Run("completion/binary", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf, _ = AppendBinaryCompletion(buf[:0], c)
			_, _ = ReadBinaryCompletion(buf)
		}
	})
	_, _ = rb, cb
}
