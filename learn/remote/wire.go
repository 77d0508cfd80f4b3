package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/agentrl/agentrl/learn"
)

// The binary bodies of docs/learner.md.
const (
	magic         = "ALRN"
	formatVersion = 1

	kindForward         = 1
	kindForwardBackward = 2
	kindForwardAnswer   = 3

	// forward request flags
	flagEntropies = 1
	flagValues    = 2
	flagReference = 4
	// forward_backward request flags, and forward answer flags
	flagDLogprobs  = 1
	flagDEntropies = 2
	flagDValues    = 4

	headerLen = 4 + 2 + 2 + 4
)

// request is a decoded forward or forward_backward request.
type request struct {
	kind  uint16
	flags uint32
	seqs  learn.Seqs
	coef  learn.Coefficients
}

func pad4(n int) int { return (n + 3) &^ 3 }

// requestLen is the byte length of a request of s sequences and n tokens with arrays float
// arrays.
func requestLen(s, n, arrays int) int {
	return pad4(headerLen+8+4*(s+1)+4*n+n) + 4*n*arrays
}

func appendHeader(b []byte, kind uint16, flags uint32) []byte {
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint16(b, formatVersion)
	b = binary.LittleEndian.AppendUint16(b, kind)
	return binary.LittleEndian.AppendUint32(b, flags)
}

func appendFloats(b []byte, x []float32) []byte {
	for _, v := range x {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// encodeRequest writes a forward (coef nil) or forward_backward request into dst's storage.
func encodeRequest(dst []byte, s *learn.Seqs, kind uint16, flags uint32, coef *learn.Coefficients) []byte {
	n, ns := len(s.Tokens), s.NumSeqs()
	arrays := 0
	if coef != nil {
		arrays = bits(flags)
	}
	b := dst[:0]
	if cap(b) < requestLen(ns, n, arrays) {
		b = make([]byte, 0, requestLen(ns, n, arrays))
	}
	b = appendHeader(b, kind, flags)
	b = binary.LittleEndian.AppendUint32(b, uint32(ns))
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	for _, o := range s.Offsets {
		b = binary.LittleEndian.AppendUint32(b, uint32(o))
	}
	for _, t := range s.Tokens {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	for _, m := range s.Mask {
		if m {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	if coef != nil {
		b = appendFloats(b, coef.DLogprobs)
		if flags&flagDEntropies != 0 {
			b = appendFloats(b, coef.DEntropies)
		}
		if flags&flagDValues != 0 {
			b = appendFloats(b, coef.DValues)
		}
	}
	return b
}

func bits(f uint32) int {
	n := 0
	for ; f != 0; f &= f - 1 {
		n++
	}
	return n
}

// checkHeader reads the fixed header and checks its magic, version and kind.
func checkHeader(b []byte, wantKind ...uint16) (uint16, uint32, error) {
	if len(b) < headerLen {
		return 0, 0, fmt.Errorf("body of %d bytes is shorter than the %d-byte header", len(b), headerLen)
	}
	if string(b[:4]) != magic {
		return 0, 0, fmt.Errorf("body does not start with %q", magic)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != formatVersion {
		return 0, 0, fmt.Errorf("format version %d, this build reads %d", v, formatVersion)
	}
	kind := binary.LittleEndian.Uint16(b[6:])
	for _, k := range wantKind {
		if kind == k {
			return kind, binary.LittleEndian.Uint32(b[8:]), nil
		}
	}
	return 0, 0, fmt.Errorf("body kind %d, expected %v", kind, wantKind)
}

// maxTokens bounds a body's token count before anything is allocated.
const maxTokens = 1 << 28

// decodeRequest reads a forward or forward_backward request, checking every count, offset and
// flag; vocab > 0 bounds the token ids.
func decodeRequest(b []byte, vocab int) (*request, error) {
	kind, flags, err := checkHeader(b, kindForward, kindForwardBackward)
	if err != nil {
		return nil, err
	}
	arrays := 0
	switch kind {
	case kindForward:
		if flags&^(flagEntropies|flagValues|flagReference) != 0 {
			return nil, fmt.Errorf("forward request has unknown flags %#x", flags)
		}
	case kindForwardBackward:
		if flags&^(flagDLogprobs|flagDEntropies|flagDValues) != 0 || flags&flagDLogprobs == 0 {
			return nil, fmt.Errorf("forward_backward request has flags %#x (1 must be set, only 1, 2 and 4 are defined)", flags)
		}
		arrays = bits(flags)
	}
	if len(b) < headerLen+8 {
		return nil, errors.New("body ends inside its counts")
	}
	ns := int(binary.LittleEndian.Uint32(b[headerLen:]))
	n := int(binary.LittleEndian.Uint32(b[headerLen+4:]))
	if ns < 1 || ns > maxTokens || n > maxTokens {
		return nil, fmt.Errorf("body counts %d sequences and %d tokens", ns, n)
	}
	if want := requestLen(ns, n, arrays); len(b) != want {
		return nil, fmt.Errorf("body of %d sequences and %d tokens must be %d bytes, got %d", ns, n, want, len(b))
	}
	r := &request{kind: kind, flags: flags}
	s := &r.seqs
	p := headerLen + 8
	s.Offsets = make([]int, ns+1)
	for i := range s.Offsets {
		s.Offsets[i] = int(binary.LittleEndian.Uint32(b[p:]))
		p += 4
	}
	s.Tokens = make([]int32, n)
	for i := range s.Tokens {
		t := int32(binary.LittleEndian.Uint32(b[p:]))
		if t < 0 || (vocab > 0 && int(t) >= vocab) {
			return nil, fmt.Errorf("token %d is id %d, outside the vocabulary of %d", i, t, vocab)
		}
		s.Tokens[i] = t
		p += 4
	}
	s.Mask = make([]bool, n)
	for i := range s.Mask {
		switch b[p] {
		case 0:
		case 1:
			s.Mask[i] = true
		default:
			return nil, fmt.Errorf("mask byte %d is %d, not 0 or 1", i, b[p])
		}
		p++
	}
	for ; p%4 != 0; p++ {
		if b[p] != 0 {
			return nil, errors.New("non-zero padding after the mask")
		}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if kind == kindForwardBackward {
		read := func() ([]float32, error) {
			x := make([]float32, n)
			for i := range x {
				x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[p:]))
				p += 4
				if math.IsNaN(float64(x[i])) || math.IsInf(float64(x[i]), 0) {
					return nil, fmt.Errorf("coefficient %d is %v", i, x[i])
				}
			}
			return x, nil
		}
		if r.coef.DLogprobs, err = read(); err != nil {
			return nil, err
		}
		if flags&flagDEntropies != 0 {
			if r.coef.DEntropies, err = read(); err != nil {
				return nil, err
			}
		}
		if flags&flagDValues != 0 {
			if r.coef.DValues, err = read(); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

// encodeAnswer writes a forward answer.
func encodeAnswer(dst []byte, flags uint32, out *learn.Outputs) []byte {
	n := len(out.Logprobs)
	b := dst[:0]
	b = appendHeader(b, kindForwardAnswer, flags)
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	b = appendFloats(b, out.Logprobs)
	if flags&flagDEntropies != 0 {
		b = appendFloats(b, out.Entropies)
	}
	if flags&flagDValues != 0 {
		b = appendFloats(b, out.Values)
	}
	return b
}

// decodeAnswer reads a forward answer for a request of n tokens that asked for the arrays of
// flags into out, whose asked slices have n entries. Every float must be finite.
func decodeAnswer(b []byte, n int, flags uint32, out *learn.Outputs) error {
	_, got, err := checkHeader(b, kindForwardAnswer)
	if err != nil {
		return err
	}
	if got != flags {
		return fmt.Errorf("answer carries arrays %#x, asked for %#x", got, flags)
	}
	if len(b) < headerLen+4 {
		return errors.New("answer ends inside its token count")
	}
	if m := binary.LittleEndian.Uint32(b[headerLen:]); int64(m) != int64(n) {
		return fmt.Errorf("answer has %d tokens, the request %d", m, n)
	}
	if want := headerLen + 4 + 4*n*bits(flags); len(b) != want {
		return fmt.Errorf("answer of %d tokens must be %d bytes, got %d", n, want, len(b))
	}
	p := headerLen + 4
	read := func(name string, x []float32) error {
		if len(x) != n {
			return fmt.Errorf("room for %d %s, the answer has %d", len(x), name, n)
		}
		for i := range x {
			v := math.Float32frombits(binary.LittleEndian.Uint32(b[p:]))
			p += 4
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("the learner's %s at token %d is %v", name, i, v)
			}
			x[i] = v
		}
		return nil
	}
	if err := read("logprobs", out.Logprobs); err != nil {
		return err
	}
	if flags&flagDEntropies != 0 {
		if err := read("entropies", out.Entropies); err != nil {
			return err
		}
	}
	if flags&flagDValues != 0 {
		if err := read("values", out.Values); err != nil {
			return err
		}
	}
	return nil
}
