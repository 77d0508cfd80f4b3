package traj

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// JSON has no way to hold bytes that are not UTF-8, yet model text can contain them (a byte-level
// tokenizer may split a character at a turn boundary). Such strings are written as {"b64":"…"}
// (standard base64) so the round trip stays exact; valid UTF-8 is written as an ordinary string.

// appendStringJSON appends s as a JSON string, or as {"b64":…} when s is not valid UTF-8.
func appendStringJSON(dst []byte, s string) []byte {
	if !utf8.ValidString(s) {
		dst = append(dst, `{"b64":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, []byte(s))
		return append(dst, `"}`...)
	}
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < 0x7f {
			continue
		}
		if c >= 0x80 { // multi-byte UTF-8 passes through, except the JS line separators
			if c == 0xe2 && i+2 < len(s) && s[i+1] == 0x80 && (s[i+2] == 0xa8 || s[i+2] == 0xa9) {
				dst = append(dst, s[start:i]...)
				dst = append(dst, `\u202`...)
				dst = append(dst, hex[s[i+2]&0xf])
				i += 2
				start = i + 1
			}
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// stringJSON decodes what appendStringJSON writes.
type stringJSON string

func (s *stringJSON) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' {
		var obj struct {
			B64 *string `json:"b64"`
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&obj); err != nil {
			return fmt.Errorf("string object: %w", err)
		}
		if obj.B64 == nil {
			return errors.New(`string object without "b64"`)
		}
		raw, err := base64.StdEncoding.DecodeString(*obj.B64)
		if err != nil {
			return fmt.Errorf("string object: %w", err)
		}
		*s = stringJSON(raw)
		return nil
	}
	var plain string
	if err := json.Unmarshal(b, &plain); err != nil {
		return err
	}
	*s = stringJSON(plain)
	return nil
}

// float32sJSON decodes a JSON array of float32 values written by appendFloat32JSON. It scans the
// array itself rather than calling an unmarshaler per element: logprobs are the bulk of a line.
type float32sJSON []float32

func (fs *float32sJSON) UnmarshalJSON(b []byte) error {
	// encoding/json has already checked that b is one well-formed JSON value.
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return fmt.Errorf("want an array of floats, got %.20q", b)
	}
	out := make([]float32, 0, bytes.Count(b, []byte{','})+1)
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		*fs = out
		return nil
	}
	for {
		j := i
		if j < len(b) && b[j] == '"' {
			j++
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			j++
		} else {
			for j < len(b) && b[j] != ',' && b[j] != ']' && !isSpace(b[j]) {
				j++
			}
		}
		if j > len(b) {
			return errors.New("unterminated string in float array")
		}
		v, bits, isNaN, err := parseFloatJSON(b[i:j], 32)
		if err != nil {
			return fmt.Errorf("element %d: %w", len(out), err)
		}
		if isNaN {
			out = append(out, math.Float32frombits(uint32(bits)))
		} else {
			out = append(out, float32(v))
		}
		i = skipSpace(b, j)
		if i >= len(b) {
			return errors.New("unterminated float array")
		}
		if b[i] == ']' {
			break
		}
		if b[i] != ',' {
			return fmt.Errorf("element %d: want ',' or ']', got %q", len(out), b[i])
		}
		i = skipSpace(b, i+1)
	}
	*fs = out
	return nil
}

// int32sJSON decodes a JSON array of integers without reflection per element.
type int32sJSON []int32

func (is *int32sJSON) UnmarshalJSON(b []byte) error {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return fmt.Errorf("want an array of integers, got %.20q", b)
	}
	out := make([]int32, 0, bytes.Count(b, []byte{','})+1)
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		*is = out
		return nil
	}
	for {
		j := i
		for j < len(b) && b[j] != ',' && b[j] != ']' && !isSpace(b[j]) {
			j++
		}
		v, err := strconv.ParseInt(string(b[i:j]), 10, 32)
		if err != nil {
			return fmt.Errorf("element %d: %w", len(out), err)
		}
		out = append(out, int32(v))
		i = skipSpace(b, j)
		if i >= len(b) {
			return errors.New("unterminated integer array")
		}
		if b[i] == ']' {
			break
		}
		if b[i] != ',' {
			return fmt.Errorf("element %d: want ',' or ']', got %q", len(out), b[i])
		}
		i = skipSpace(b, i+1)
	}
	*is = out
	return nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// StringJSON returns s as a JSON value with the same conventions as the trajectory codec (valid
// UTF-8 as a string, anything else as {"b64":…}), so other wire formats (env/remote) carry model
// text exactly, the same way.
func StringJSON(s string) []byte { return appendStringJSON(nil, s) }

// ParseStringJSON is the inverse of StringJSON.
func ParseStringJSON(b []byte) (string, error) {
	var s stringJSON
	if err := s.UnmarshalJSON(b); err != nil {
		return "", fmt.Errorf("traj: %w", err)
	}
	return string(s), nil
}
