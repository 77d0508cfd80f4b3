package wire

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/infer"
)

func TestBinaryRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range 200 {
		c := randCompletion(rng)
		n := len(c.Tokens)
		c.Logprobs, c.Versions = c.Logprobs[:0:0], c.Versions[:0:0]
		for range n {
			c.Logprobs = append(c.Logprobs, randFloat(rng))
			c.Versions = append(c.Versions, rng.Int32()-rng.Int32())
		}
		if n == 0 {
			c.Tokens, c.Logprobs, c.Versions = nil, nil, nil
		}
		b, err := AppendBinaryCompletion([]byte("x"), c)
		if !finiteAll(c.Logprobs) {
			if err == nil {
				t.Fatalf("case %d: a non-finite logprob was written", i)
			}
			continue
		}
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if want := 1 + 9 + 12*n + len(c.Finish); len(b) != want {
			t.Fatalf("case %d: %d bytes, want %d", i, len(b), want)
		}
		got, err := ReadBinaryCompletion(b[1:])
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !reflect.DeepEqual(bitsOf(got), bitsOf(c)) {
			t.Fatalf("case %d: read %+v, wrote %+v", i, got, c)
		}
	}
}

func finiteAll(v []float32) bool {
	for _, f := range v {
		if !finite(f) {
			return false
		}
	}
	return true
}

// bitsOf is c with its logprobs as bits, so that -0 and 0 differ and the comparison is exact.
func bitsOf(c infer.Completion) any {
	bits := make([]uint32, len(c.Logprobs))
	for i, f := range c.Logprobs {
		bits[i] = math.Float32bits(f)
	}
	return struct {
		T    []int32
		L    []uint32
		V    []int32
		F    infer.FinishReason
		None bool
	}{c.Tokens, bits, c.Versions, c.Finish, c.Tokens == nil}
}

func TestBinaryRefusals(t *testing.T) {
	ok := infer.Completion{Tokens: []int32{1, 2}, Logprobs: []float32{-1, -2}, Versions: []int32{3, 3}, Finish: infer.FinishStop}
	for name, c := range map[string]infer.Completion{
		"short logprobs": {Tokens: []int32{1, 2}, Logprobs: []float32{-1}, Versions: []int32{3, 3}},
		"short versions": {Tokens: []int32{1, 2}, Logprobs: []float32{-1, -2}, Versions: []int32{3}},
		"NaN":            {Tokens: []int32{1}, Logprobs: []float32{float32(math.NaN())}, Versions: []int32{3}},
		"-Inf":           {Tokens: []int32{1}, Logprobs: []float32{float32(math.Inf(-1))}, Versions: []int32{3}},
		"long finish":    {Finish: infer.FinishReason(strings.Repeat("x", 256))},
	} {
		if _, err := AppendBinaryCompletion(nil, c); err == nil {
			t.Errorf("%s: written", name)
		}
	}
	good, err := AppendBinaryCompletion(nil, ok)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"empty":         nil,
		"magic":         append([]byte("ARLD"), good[4:]...),
		"truncated":     good[:len(good)-1],
		"trailing":      append(bytes.Clone(good), 0),
		"huge n":        append(append([]byte("ARLC"), 0xff, 0xff, 0xff, 0x7f), good[8:]...),
		"n over data":   append(append([]byte("ARLC"), 3, 0, 0, 0), good[8:]...),
		"finish length": append(bytes.Clone(good[:len(good)-5]), 9, 's', 't', 'o', 'p'),
	} {
		if c, err := ReadBinaryCompletion(data); !errors.Is(err, errBinary) {
			t.Errorf("%s: read %+v, %v", name, c, err)
		}
	}
}

// FuzzReadBinaryCompletion: whatever is read writes back as the same bytes, and nothing panics.
func FuzzReadBinaryCompletion(f *testing.F) {
	rng := rand.New(rand.NewPCG(13, 14))
	for range 8 {
		c := randCompletion(rng)
		c.Logprobs, c.Versions = c.Logprobs[:0], c.Versions[:0]
		for range c.Tokens {
			c.Logprobs, c.Versions = append(c.Logprobs, -rng.Float32()), append(c.Versions, 1)
		}
		if b, err := AppendBinaryCompletion(nil, c); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("ARLC\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ReadBinaryCompletion(data)
		if err != nil {
			return
		}
		b, err := AppendBinaryCompletion(nil, c)
		if err != nil {
			if finiteAll(c.Logprobs) {
				t.Fatalf("%q read as %+v, which does not write back: %v", data, c, err)
			}
			return
		}
		if !bytes.Equal(b, data) {
			t.Fatalf("%q read as %+v, which writes back as %q", data, c, b)
		}
	})
}
