package traj

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Text forms of floats in JSON. JSON has no NaN or infinity, so non-finite values travel as
// strings: "+Inf", "-Inf", "NaN" for the canonical quiet NaN, and "NaN:0x…" with the exact bit
// pattern for any other NaN, so every float32 and float64 bit pattern survives a JSONL round trip.
// Finite values are numbers in the shortest form that parses back to the same bits ("-0" keeps
// the sign of zero).

const (
	canonicalNaN32 uint32 = 0x7fc00000
	canonicalNaN64 uint64 = 0x7ff8000000000000
)

// appendFloat32JSON appends v as a JSON value.
func appendFloat32JSON(dst []byte, v float32) []byte {
	f := float64(v)
	switch {
	case math.IsInf(f, 1):
		return append(dst, `"+Inf"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Inf"`...)
	case v != v:
		bits := math.Float32bits(v)
		if bits == canonicalNaN32 {
			return append(dst, `"NaN"`...)
		}
		dst = append(dst, `"NaN:0x`...)
		dst = appendHex(dst, uint64(bits), 8)
		return append(dst, '"')
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 32)
}

// appendFloat64JSON appends v as a JSON value.
func appendFloat64JSON(dst []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(dst, `"+Inf"`...)
	case math.IsInf(v, -1):
		return append(dst, `"-Inf"`...)
	case v != v:
		bits := math.Float64bits(v)
		if bits == canonicalNaN64 {
			return append(dst, `"NaN"`...)
		}
		dst = append(dst, `"NaN:0x`...)
		dst = appendHex(dst, bits, 16)
		return append(dst, '"')
	}
	return strconv.AppendFloat(dst, v, 'g', -1, 64)
}

func appendHex(dst []byte, v uint64, digits int) []byte {
	const hex = "0123456789abcdef"
	for i := digits - 1; i >= 0; i-- {
		dst = append(dst, hex[(v>>(4*uint(i)))&0xf])
	}
	return dst
}

// parseFloatJSON parses one JSON value produced by appendFloat32JSON / appendFloat64JSON.
// bitSize is 32 or 64; the result holds a float32 exactly when bitSize is 32.
// tok is the raw JSON token: a number, or a string with its quotes.
func parseFloatJSON(tok []byte, bitSize int) (float64, uint64, bool, error) {
	if len(tok) >= 2 && tok[0] == '"' && tok[len(tok)-1] == '"' {
		s := string(tok[1 : len(tok)-1])
		switch {
		case s == "+Inf":
			return math.Inf(1), 0, false, nil
		case s == "-Inf":
			return math.Inf(-1), 0, false, nil
		case s == "NaN":
			if bitSize == 32 {
				return 0, uint64(canonicalNaN32), true, nil
			}
			return 0, canonicalNaN64, true, nil
		case strings.HasPrefix(s, "NaN:0x"):
			digits := s[len("NaN:0x"):]
			if len(digits) != bitSize/4 {
				return 0, 0, false, fmt.Errorf("NaN payload %q: want %d hex digits", s, bitSize/4)
			}
			bits, err := strconv.ParseUint(digits, 16, bitSize)
			if err != nil {
				return 0, 0, false, fmt.Errorf("NaN payload %q: %w", s, err)
			}
			isNaN := false
			if bitSize == 32 {
				f := math.Float32frombits(uint32(bits))
				isNaN = f != f
			} else {
				f := math.Float64frombits(bits)
				isNaN = f != f
			}
			if !isNaN {
				return 0, 0, false, fmt.Errorf("NaN payload %q is not a NaN", s)
			}
			return 0, bits, true, nil
		}
		return 0, 0, false, fmt.Errorf("float string %q: want a number, \"+Inf\", \"-Inf\", \"NaN\" or \"NaN:0x…\"", s)
	}
	if !isJSONNumber(tok) {
		return 0, 0, false, fmt.Errorf("float %q is not a JSON number", tok)
	}
	f, err := strconv.ParseFloat(string(tok), bitSize)
	if err != nil {
		return 0, 0, false, fmt.Errorf("float %q: %w", tok, err)
	}
	return f, 0, false, nil
}

// isJSONNumber reports whether b matches the JSON number grammar exactly; strconv.ParseFloat
// alone would also take "Inf", hex floats and underscores.
func isJSONNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return false
	}
	if b[i] == '0' {
		i++
	} else if b[i] >= '1' && b[i] <= '9' {
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	} else {
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	return i == len(b)
}

// float64JSON is a JSON value carrying a float64 bit-exactly.
type float64JSON float64

func (f float64JSON) MarshalJSON() ([]byte, error) { return appendFloat64JSON(nil, float64(f)), nil }

func (f *float64JSON) UnmarshalJSON(b []byte) error {
	v, bits, isNaN, err := parseFloatJSON(b, 64)
	if err != nil {
		return err
	}
	if isNaN {
		*f = float64JSON(math.Float64frombits(bits))
	} else {
		*f = float64JSON(v)
	}
	return nil
}

// Float64JSON returns v as a JSON value with the same conventions as the trajectory codec, so
// other wire formats (env/remote) carry rewards the same way.
func Float64JSON(v float64) []byte { return appendFloat64JSON(nil, v) }

// ParseFloat64JSON is the inverse of Float64JSON.
func ParseFloat64JSON(b []byte) (float64, error) {
	var f float64JSON
	if err := f.UnmarshalJSON(b); err != nil {
		return 0, fmt.Errorf("traj: %w", err)
	}
	return float64(f), nil
}
