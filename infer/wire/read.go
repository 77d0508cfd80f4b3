package wire

import (
	"strconv"
	"unicode/utf8"

	"github.com/agentrl/agentrl/infer"
)

// ReadRequest decodes data as encoding/json decodes it into an infer.Request, unknown fields
// refused or not (it takes none). ok false says that data is outside the subset it reads, not
// that data is wrong: decode it with encoding/json then.
func ReadRequest(data []byte) (req infer.Request, ok bool) {
	r := reader{b: data}
	ok = r.fields(func(key []byte) (bit uint8, ok bool) {
		switch string(key) {
		case "prompt":
			bit = 1
			req.Prompt, ok = r.int32s()
		case "max_tokens":
			bit = 2
			ok = r.int(&req.MaxTokens)
		case "sampling":
			bit = 4
			ok = r.sampling(&req.Sampling)
		case "stop":
			bit = 8
			req.Stop, ok = r.int32s()
		case "seed":
			bit = 16
			ok = r.uint64(&req.Seed)
		case "session":
			bit = 32
			ok = r.string(&req.Session)
		}
		return bit, ok
	})
	return req, ok && r.end()
}

// ReadCompletion decodes data as encoding/json decodes it into an infer.Completion; ok false as
// for ReadRequest.
func ReadCompletion(data []byte) (c infer.Completion, ok bool) {
	r := reader{b: data}
	ok = r.fields(func(key []byte) (bit uint8, ok bool) {
		switch string(key) {
		case "tokens":
			bit = 1
			c.Tokens, ok = r.int32s()
		case "logprobs":
			bit = 2
			c.Logprobs, ok = r.float32s()
		case "versions":
			bit = 4
			c.Versions, ok = r.int32s()
		case "finish":
			bit = 8
			var s string
			ok = r.string(&s)
			c.Finish = infer.FinishReason(s)
		}
		return bit, ok
	})
	return c, ok && r.end()
}

// reader reads the subset of JSON the package takes. Each method reports false for anything
// outside it, leaving the reader anywhere.
type reader struct {
	b []byte
	i int
}

func (r *reader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// next skips white space and consumes c if it comes next.
func (r *reader) next(c byte) bool {
	r.ws()
	if r.i < len(r.b) && r.b[r.i] == c {
		r.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (r *reader) end() bool {
	r.ws()
	return r.i == len(r.b)
}

// null consumes a null literal if it comes next: encoding/json leaves the field at its zero
// value then (a nil slice).
func (r *reader) null() bool {
	r.ws()
	if len(r.b)-r.i >= 4 && string(r.b[r.i:r.i+4]) == "null" {
		r.i += 4
		return true
	}
	return false
}

// fields reads an object of at most 8 known keys: field reads the value of each key it knows and
// returns the key's bit, or 0 (or ok false) for a key it does not. A key read twice ends the read
// with false: encoding/json's merging of repeated keys is left to it.
func (r *reader) fields(field func(key []byte) (bit uint8, ok bool)) bool {
	var seen uint8
	return r.object(func(key []byte) bool {
		bit, ok := field(key)
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return ok
	})
}

// object reads an object whose values field reads; field is called with each key, the reader
// just past its colon, and returns false for a key it does not know.
func (r *reader) object(field func(key []byte) bool) bool {
	if !r.next('{') {
		return false
	}
	if r.next('}') {
		return true
	}
	for {
		key, ok := r.plain()
		if !ok || !r.next(':') || !field(key) {
			return false
		}
		if r.next(',') {
			continue
		}
		return r.next('}')
	}
}

// plain reads a string without escapes or control characters whose bytes are valid UTF-8: the
// strings encoding/json takes as they are.
func (r *reader) plain() ([]byte, bool) {
	if !r.next('"') {
		return nil, false
	}
	start := r.i
	ascii := true
	for ; r.i < len(r.b); r.i++ {
		switch c := r.b[r.i]; {
		case c == '"':
			s := r.b[start:r.i]
			r.i++
			return s, ascii || utf8.Valid(s)
		case c < 0x20 || c == '\\':
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

func (r *reader) string(dst *string) bool {
	if r.null() {
		return true
	}
	s, ok := r.plain()
	*dst = string(s)
	return ok
}

// number reads a JSON number's literal.
func (r *reader) number() ([]byte, bool) {
	r.ws()
	start := r.i
	if r.i < len(r.b) && r.b[r.i] == '-' {
		r.i++
	}
	switch {
	case r.i < len(r.b) && r.b[r.i] == '0':
		r.i++
	case r.digits() == 0:
		return nil, false
	}
	if r.i < len(r.b) && r.b[r.i] == '.' {
		r.i++
		if r.digits() == 0 {
			return nil, false
		}
	}
	if r.i < len(r.b) && (r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		r.i++
		if r.i < len(r.b) && (r.b[r.i] == '+' || r.b[r.i] == '-') {
			r.i++
		}
		if r.digits() == 0 {
			return nil, false
		}
	}
	return r.b[start:r.i], true
}

func (r *reader) digits() int {
	start := r.i
	for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
		r.i++
	}
	return r.i - start
}

// The numbers are parsed as encoding/json parses them into each type: ParseInt, ParseUint or
// ParseFloat at the type's size, an error (a fraction or exponent for an integer, a value out of
// range) being left to it.

func (r *reader) int(dst *int) bool {
	if r.null() {
		return true
	}
	lit, ok := r.number()
	if !ok {
		return false
	}
	v, err := strconv.ParseInt(string(lit), 10, strconv.IntSize)
	*dst = int(v)
	return err == nil
}

func (r *reader) uint64(dst *uint64) bool {
	if r.null() {
		return true
	}
	lit, ok := r.number()
	if !ok {
		return false
	}
	v, err := strconv.ParseUint(string(lit), 10, 64)
	*dst = v
	return err == nil
}

func (r *reader) float32(dst *float32) bool {
	if r.null() {
		return true
	}
	lit, ok := r.number()
	if !ok {
		return false
	}
	v, err := strconv.ParseFloat(string(lit), 32)
	*dst = float32(v)
	return err == nil
}

func (r *reader) int32s() ([]int32, bool) {
	if r.null() {
		return nil, true
	}
	out := make([]int32, 0, r.count())
	ok := r.array(func() bool {
		lit, ok := r.number()
		if !ok {
			return false
		}
		v, err := strconv.ParseInt(string(lit), 10, 32)
		out = append(out, int32(v))
		return err == nil
	})
	return out, ok
}

func (r *reader) float32s() ([]float32, bool) {
	if r.null() {
		return nil, true
	}
	out := make([]float32, 0, r.count())
	ok := r.array(func() bool {
		lit, ok := r.number()
		if !ok {
			return false
		}
		v, err := strconv.ParseFloat(string(lit), 32)
		out = append(out, float32(v))
		return err == nil
	})
	return out, ok
}

// count is the number of elements of the array of numbers that comes next, if it is one (a bound
// for the capacity of the slice to read it into).
func (r *reader) count() int {
	n := 1
	for _, c := range r.b[r.i:] {
		switch c {
		case ',':
			n++
		case ']':
			return n
		}
	}
	return 0
}

// array reads an array whose elements elem reads.
func (r *reader) array(elem func() bool) bool {
	if !r.next('[') {
		return false
	}
	if r.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if r.next(',') {
			continue
		}
		return r.next(']')
	}
}

func (r *reader) sampling(s *infer.Sampling) bool {
	if r.null() {
		return true
	}
	return r.fields(func(key []byte) (bit uint8, ok bool) {
		switch string(key) {
		case "temperature":
			bit = 1
			ok = r.float32(&s.Temperature)
		case "top_k":
			bit = 2
			ok = r.int(&s.TopK)
		case "top_p":
			bit = 4
			ok = r.float32(&s.TopP)
		}
		return bit, ok
	})
}
