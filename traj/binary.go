package traj

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The binary form is compact and exact: every field, every float bit pattern (NaN payloads, -0)
// and every string byte survives. Layout (varint = encoding/binary zig-zag varint, uvarint =
// unsigned; str = uvarint length + bytes):
//
//	magic "ATRJ" | version byte
//	str id | str env | varint task_seed | uvarint group_id | uvarint n (tokens)
//	tokens:   n uvarints of uint32(id); plain ids, not deltas: BPE vocabularies put frequent tokens
//	          at low ids, and on Zipf-distributed text absolute ids took ~22% fewer bytes than deltas
//	roles:    runs of (role byte, uvarint length ≥ 1) covering n tokens
//	loss mask: uvarint run lengths alternating false, true, false, … covering n tokens
//	          (the first run may be empty; later runs are not)
//	logprobs: groups of (uvarint zeros, uvarint literals, literals × 4 bytes little-endian)
//	          covering n tokens; "zeros" are +0.0 exactly (unsampled tokens), anything else is literal
//	versions: runs of (varint version, uvarint length ≥ 1) covering n tokens
//	turns:    uvarint count, each: uvarint start-prevObsEnd, uvarint end-start, uvarint obsEnd-end,
//	          8 bytes reward, uvarint tool-call count, each call 4 str (name, arguments, result, error)
//	samples:  (version 2 only) uvarint count ≥ 1, each uvarint start-prevStart (prevStart 0 first):
//	          where each training sample after the first begins
//	8 bytes reward | status byte | str error | 4 varints timings (ns) | uvarint meta count, 2 str each
//
// Nothing may follow. A decoder bounds every count by the bytes left, so a corrupt length cannot
// make it allocate more than a small multiple of its input.

const (
	binaryMagic = "ATRJ"
	// BinaryVersion is the newest version of the binary form, written by AppendBinary for an
	// episode of several samples. An episode of one sample is written as version 1, which has no
	// samples section, so that its bytes are those earlier builds wrote and read.
	BinaryVersion  = 2
	binaryVersion1 = 1
)

// AppendBinary appends the binary form of t to dst. It fails if t does not pass Validate.
func (t *Trajectory) AppendBinary(dst []byte) ([]byte, error) {
	if err := t.Validate(); err != nil {
		return dst, fmt.Errorf("traj: encode binary: %w", err)
	}
	n := len(t.Tokens)
	dst = append(dst, binaryMagic...)
	if len(t.Samples) > 0 {
		dst = append(dst, BinaryVersion)
	} else {
		dst = append(dst, binaryVersion1)
	}
	dst = appendStr(dst, t.ID)
	dst = appendStr(dst, t.Env)
	dst = binary.AppendVarint(dst, t.TaskSeed)
	dst = binary.AppendUvarint(dst, t.GroupID)
	dst = binary.AppendUvarint(dst, uint64(n))

	for _, tok := range t.Tokens {
		dst = binary.AppendUvarint(dst, uint64(uint32(tok)))
	}

	for i := 0; i < n; {
		j := i + 1
		for j < n && t.Roles[j] == t.Roles[i] {
			j++
		}
		dst = append(dst, byte(t.Roles[i]))
		dst = binary.AppendUvarint(dst, uint64(j-i))
		i = j
	}

	want := false
	for i := 0; i < n; {
		j := i
		for j < n && t.LossMask[j] == want {
			j++
		}
		dst = binary.AppendUvarint(dst, uint64(j-i))
		want = !want
		i = j
	}

	for i := 0; i < n; {
		j := i
		for j < n && math.Float32bits(t.Logprobs[j]) == 0 {
			j++
		}
		k := j
		for k < n && math.Float32bits(t.Logprobs[k]) != 0 {
			k++
		}
		dst = binary.AppendUvarint(dst, uint64(j-i))
		dst = binary.AppendUvarint(dst, uint64(k-j))
		for _, lp := range t.Logprobs[j:k] {
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(lp))
		}
		i = k
	}

	for i := 0; i < n; {
		j := i + 1
		for j < n && t.Versions[j] == t.Versions[i] {
			j++
		}
		dst = binary.AppendVarint(dst, int64(t.Versions[i]))
		dst = binary.AppendUvarint(dst, uint64(j-i))
		i = j
	}

	dst = binary.AppendUvarint(dst, uint64(len(t.Turns)))
	prevEnd := 0
	for _, tu := range t.Turns {
		dst = binary.AppendUvarint(dst, uint64(tu.Start-prevEnd))
		dst = binary.AppendUvarint(dst, uint64(tu.End-tu.Start))
		dst = binary.AppendUvarint(dst, uint64(tu.ObsEnd-tu.End))
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(tu.Reward))
		dst = binary.AppendUvarint(dst, uint64(len(tu.ToolCalls)))
		for _, c := range tu.ToolCalls {
			dst = appendStr(dst, c.Name)
			dst = appendStr(dst, c.Arguments)
			dst = appendStr(dst, c.Result)
			dst = appendStr(dst, c.Error)
		}
		prevEnd = tu.ObsEnd
	}
	if len(t.Samples) > 0 {
		dst = binary.AppendUvarint(dst, uint64(len(t.Samples)))
		prev := 0
		for _, s := range t.Samples {
			dst = binary.AppendUvarint(dst, uint64(s-prev))
			prev = s
		}
	}

	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(t.Reward))
	dst = append(dst, byte(t.Status))
	dst = appendStr(dst, t.Error)
	dst = binary.AppendVarint(dst, int64(t.Timings.Generate))
	dst = binary.AppendVarint(dst, int64(t.Timings.Env))
	dst = binary.AppendVarint(dst, int64(t.Timings.Tokenize))
	dst = binary.AppendVarint(dst, int64(t.Timings.Total))
	dst = binary.AppendUvarint(dst, uint64(len(t.Meta)))
	for _, kv := range t.Meta {
		dst = appendStr(dst, kv.Key)
		dst = appendStr(dst, kv.Value)
	}
	return dst, nil
}

// MarshalBinary implements encoding.BinaryMarshaler with AppendBinary.
func (t *Trajectory) MarshalBinary() ([]byte, error) {
	return t.AppendBinary(make([]byte, 0, 64+6*len(t.Tokens)))
}

func appendStr(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}
