// Package wire is the JSON of the agentrl generate route (POST /agentrl/v1/generate): an
// infer.Request in, an infer.Completion out. It writes them byte for byte as encoding/json does
// and reads the common shape of them without reflection, so a request of a few dozen token ids
// costs microseconds at both ends of the connection instead of tens.
//
// The readers take a subset of JSON: one object whose keys are the fields' exact names, each
// at most once, with plain numbers, arrays of numbers and strings without escapes. Whatever
// they accept decodes exactly as encoding/json decodes it (the fuzz tests compare the two); on
// anything else they answer false and the caller decodes with encoding/json, which gives the
// same value or the error message. The writers refuse only what encoding/json refuses (a
// logprob that is not finite).
package wire

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/agentrl/agentrl/infer"
)

// AppendRequest appends req as encoding/json's Marshal writes it. Like Marshal it refuses a
// temperature or top_p that is NaN or infinite (Sampling.Validate refuses them too).
func AppendRequest(b []byte, req infer.Request) ([]byte, error) {
	if !finite(req.Sampling.Temperature) || !finite(req.Sampling.TopP) {
		return b, fmt.Errorf("wire: sampling %+v is not finite, which JSON cannot hold", req.Sampling)
	}
	b = append(b, `{"prompt":`...)
	b = appendInt32s(b, req.Prompt)
	b = append(b, `,"max_tokens":`...)
	b = strconv.AppendInt(b, int64(req.MaxTokens), 10)
	b = append(b, `,"sampling":{"temperature":`...)
	b, _ = appendFloat32(b, req.Sampling.Temperature)
	b = append(b, `,"top_k":`...)
	b = strconv.AppendInt(b, int64(req.Sampling.TopK), 10)
	b = append(b, `,"top_p":`...)
	b, _ = appendFloat32(b, req.Sampling.TopP)
	b = append(b, `},"stop":`...)
	b = appendInt32s(b, req.Stop)
	b = append(b, `,"seed":`...)
	b = strconv.AppendUint(b, req.Seed, 10)
	if req.Session != "" {
		b = append(b, `,"session":`...)
		b = appendString(b, req.Session)
	}
	return append(b, '}'), nil
}

func finite(f float32) bool { return !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) }

// AppendCompletion appends c as encoding/json's Marshal writes it. Like Marshal it refuses a
// logprob that is NaN or infinite.
func AppendCompletion(b []byte, c infer.Completion) ([]byte, error) {
	b = append(b, `{"tokens":`...)
	b = appendInt32s(b, c.Tokens)
	b = append(b, `,"logprobs":`...)
	if c.Logprobs == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, lp := range c.Logprobs {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendFloat32(b, lp); !ok {
				return b, fmt.Errorf("wire: logprob %d is %v, which JSON cannot hold", i, lp)
			}
		}
		b = append(b, ']')
	}
	b = append(b, `,"versions":`...)
	b = appendInt32s(b, c.Versions)
	b = append(b, `,"finish":`...)
	b = appendString(b, string(c.Finish))
	return append(b, '}'), nil
}

func appendInt32s(b []byte, v []int32) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(x), 10)
	}
	return append(b, ']')
}

// appendFloat32 writes f as encoding/json writes a float32: the shortest decimal that reads back
// as f, in exponent form below 1e-6 and from 1e21, with the exponent's leading zero dropped.
func appendFloat32(b []byte, f float32) ([]byte, bool) {
	if !finite(f) {
		return b, false
	}
	abs := float32(math.Abs(float64(f)))
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, float64(f), format, -1, 32)
	if format == 'e' {
		// e-07 → e-7, as encoding/json writes it.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

// appendString writes s plainly when encoding/json would (printable ASCII without the characters
// it escapes), and through encoding/json otherwise.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
