package remote

import (
	"math"
	"testing"

	"github.com/agentrl/agentrl/learn"
)

func answerSeeds() [][]byte {
	out := learn.Outputs{Logprobs: []float32{0, -1.5, -0.25}, Entropies: []float32{0, 2, 1}, Values: []float32{0, 0.5, -3}}
	return [][]byte{
		encodeAnswer(nil, flagDLogprobs, &out),
		encodeAnswer(nil, flagDLogprobs|flagDEntropies, &out),
		encodeAnswer(nil, flagDLogprobs|flagDEntropies|flagDValues, &out),
		encodeAnswer(nil, flagDLogprobs, &learn.Outputs{Logprobs: []float32{float32(math.NaN()), 0, 0}}),
		[]byte("ALRN"),
		{},
	}
}

// FuzzDecodeAnswer: any body either decodes into finite values of the asked size or is an
// error; never a panic.
func FuzzDecodeAnswer(f *testing.F) {
	for _, s := range answerSeeds() {
		f.Add(s, uint8(3), uint8(7))
	}
	f.Fuzz(func(t *testing.T, body []byte, n, flags uint8) {
		fl := uint32(flags&7) | flagDLogprobs
		k := int(n % 16)
		out := learn.Outputs{Logprobs: make([]float32, k)}
		if fl&flagDEntropies != 0 {
			out.Entropies = make([]float32, k)
		}
		if fl&flagDValues != 0 {
			out.Values = make([]float32, k)
		}
		if err := decodeAnswer(body, k, fl, &out); err != nil {
			return
		}
		for _, x := range [][]float32{out.Logprobs, out.Entropies, out.Values} {
			for _, v := range x {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("decoded a non-finite value %v", v)
				}
			}
		}
		if got := encodeAnswer(nil, fl, &out); string(got) != string(body) {
			t.Fatal("a decoded answer does not encode back to its body")
		}
	})
}

// FuzzDecodeRequest: the learner side's decoder of forward and forward_backward bodies.
func FuzzDecodeRequest(f *testing.F) {
	s := oneSeq()
	f.Add(encodeRequest(nil, s, kindForward, flagEntropies|flagValues, nil))
	f.Add(encodeRequest(nil, s, kindForwardBackward, flagDLogprobs|flagDEntropies,
		&learn.Coefficients{DLogprobs: []float32{0, 0, 1, 2}, DEntropies: []float32{0, 0, 0.1, 0.1}}))
	f.Add(encodeRequest(nil, &learn.Seqs{Tokens: []int32{1, 2, 3}, Offsets: []int{0, 1, 3}, Mask: []bool{true, false, true}}, kindForward, 0, nil))
	f.Add([]byte("ALRN\x01\x00\x01\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decodeRequest(body, 32)
		if err != nil {
			return
		}
		if err := r.seqs.Validate(); err != nil {
			t.Fatalf("decoded an invalid batch: %v", err)
		}
		var co *learn.Coefficients
		if r.kind == kindForwardBackward {
			co = &r.coef
		}
		if got := encodeRequest(nil, &r.seqs, r.kind, r.flags, co); string(got) != string(body) {
			t.Fatal("a decoded request does not encode back to its body")
		}
	})
}
