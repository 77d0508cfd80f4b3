package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/agentrl/agentrl/infer"
)

// BinaryType is the media type of a completion in the binary form. A client of the generate
// route that sends `Accept: application/vnd.agentrl.completion` gets this form instead of JSON
// (the remote router asks for it); every other client gets JSON.
//
// Logprobs are most of a completion's JSON and its costliest part: writing each as the shortest
// decimal that reads back as the same float32 and parsing it again took about 7 µs of a 32-token
// completion's round trip, a sixth of the HTTP path's CPU per request in `agentrl bench serve`.
// The binary form copies the bits.
const BinaryType = "application/vnd.agentrl.completion"

// The binary form, little-endian:
//
//	"ARLC"            4 bytes
//	n                 uint32: the number of tokens
//	tokens            n × int32
//	logprobs          n × float32 (IEEE 754 bits)
//	versions          n × int32
//	len(finish)       uint8
//	finish            that many bytes
//
// Nothing follows. Every completion the engine returns has one logprob and one version per
// token; the form cannot hold any other.
const binaryMagic = "ARLC"

// maxBinaryTokens bounds n so that the form's size fits in an int on every platform.
const maxBinaryTokens = (math.MaxInt32 - 9) / 12

// AppendBinaryCompletion appends c in the binary form. It refuses what the form cannot hold
// (per-token slices of other lengths than the tokens, a finish reason over 255 bytes) and, as
// AppendCompletion does, a logprob that is NaN or infinite.
func AppendBinaryCompletion(b []byte, c infer.Completion) ([]byte, error) {
	n := len(c.Tokens)
	if len(c.Logprobs) != n || len(c.Versions) != n {
		return b, fmt.Errorf("wire: a completion of %d tokens with %d logprobs and %d versions has no binary form", n, len(c.Logprobs), len(c.Versions))
	}
	if n > maxBinaryTokens {
		return b, fmt.Errorf("wire: a completion of %d tokens is over the binary form's %d", n, maxBinaryTokens)
	}
	if len(c.Finish) > 255 {
		return b, fmt.Errorf("wire: finish reason of %d bytes is over the binary form's 255", len(c.Finish))
	}
	for i, lp := range c.Logprobs {
		if !finite(lp) {
			return b, fmt.Errorf("wire: logprob %d is %v, which a completion cannot hold", i, lp)
		}
	}
	b = append(b, binaryMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	for _, t := range c.Tokens {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	for _, lp := range c.Logprobs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(lp))
	}
	for _, v := range c.Versions {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	b = append(b, byte(len(c.Finish)))
	return append(b, c.Finish...), nil
}

// errBinary is the error of every malformed binary completion.
var errBinary = errors.New("wire: malformed binary completion")

// ReadBinaryCompletion decodes the binary form. It refuses anything that is not exactly one
// completion in it; the values themselves (token ids, finish reasons) are the caller's to check,
// as they are for JSON.
func ReadBinaryCompletion(data []byte) (infer.Completion, error) {
	var c infer.Completion
	if len(data) < 9 || string(data[:4]) != binaryMagic {
		return c, fmt.Errorf("%w: it does not start with %q and a length", errBinary, binaryMagic)
	}
	n := binary.LittleEndian.Uint32(data[4:8])
	if n > maxBinaryTokens || len(data) < 9+12*int(n) {
		return c, fmt.Errorf("%w: %d tokens in %d bytes", errBinary, n, len(data))
	}
	p := data[8:]
	if n > 0 { // none: nil slices, as JSON's reader gives for a completion without tokens
		c.Tokens, c.Logprobs, c.Versions = make([]int32, n), make([]float32, n), make([]int32, n)
	}
	for i := range c.Tokens {
		c.Tokens[i] = int32(binary.LittleEndian.Uint32(p[4*i:]))
	}
	p = p[4*n:]
	for i := range c.Logprobs {
		c.Logprobs[i] = math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:]))
	}
	p = p[4*n:]
	for i := range c.Versions {
		c.Versions[i] = int32(binary.LittleEndian.Uint32(p[4*i:]))
	}
	p = p[4*n:]
	if int(p[0]) != len(p)-1 {
		return infer.Completion{}, fmt.Errorf("%w: a finish reason of %d bytes where %d are left", errBinary, p[0], len(p)-1)
	}
	c.Finish = infer.FinishReason(p[1:])
	return c, nil
}
