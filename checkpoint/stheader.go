package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"unicode/utf8"
	"unsafe"
)

// stHeader is a validated safetensors header: its entries sorted by offset, and where the data
// section starts in the file.
type stHeader struct {
	entries   []stEntry
	byName    map[string]int // index into entries
	metadata  map[string]string
	dataStart int64
}

type stEntry struct {
	name       string
	dtype      string
	shape      []int
	numel      int
	begin, end int64 // byte offsets relative to the data section
}

// stInfo is one tensor's header entry as JSON.
type stInfo struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// parseHeader reads and validates the header of a safetensors file of the given size. Nothing
// it allocates exceeds the file size, whatever the header claims.
func parseHeader(r io.ReaderAt, size int64) (*stHeader, error) {
	var lenBuf [8]byte
	if size < 8 {
		return nil, fmt.Errorf("file of %d bytes is too short for the 8-byte header length", size)
	}
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("reading header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > uint64(size-8) {
		return nil, fmt.Errorf("header length %d runs past the end of the %d-byte file", n, size)
	}
	if n > maxHeaderLen {
		return nil, fmt.Errorf("header length %d exceeds the %d-byte limit", n, maxHeaderLen)
	}
	raw := make([]byte, n)
	if _, err := r.ReadAt(raw, 8); err != nil {
		return nil, fmt.Errorf("reading header: %w", err)
	}
	h := &stHeader{dataStart: 8 + int64(n), byName: map[string]int{}}
	if err := h.decode(raw); err != nil {
		return nil, err
	}
	if err := h.checkLayout(size - h.dataStart); err != nil {
		return nil, err
	}
	return h, nil
}

// decode parses the JSON object entry by entry, so that a duplicate name is an error rather
// than silently the last one (as encoding/json would do).
func (h *stHeader) decode(raw []byte) error {
	if !utf8.Valid(raw) {
		return errors.New("header is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("header is not a JSON object")
	}
	seenMeta := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("header JSON: %w", err)
		}
		name, ok := tok.(string)
		if !ok {
			return fmt.Errorf("header JSON: expected a tensor name, got %v", tok)
		}
		if name == metadataKey {
			if seenMeta {
				return fmt.Errorf("header has %s twice", metadataKey)
			}
			seenMeta = true
			if err := dec.Decode(&h.metadata); err != nil {
				return fmt.Errorf("header %s must map strings to strings: %w", metadataKey, err)
			}
			continue
		}
		if name == "" {
			return errors.New("header has a tensor with an empty name")
		}
		if _, dup := h.byName[name]; dup {
			return fmt.Errorf("tensor %q appears twice in the header", name)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("header JSON at tensor %q: %w", name, err)
		}
		e, err := parseEntry(name, v)
		if err != nil {
			return err
		}
		h.byName[name] = len(h.entries)
		h.entries = append(h.entries, e)
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("header JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("header has data after its JSON object")
	}
	return nil
}

func parseEntry(name string, v json.RawMessage) (stEntry, error) {
	var info stInfo
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&info); err != nil {
		return stEntry{}, fmt.Errorf("tensor %q: %w", name, err)
	}
	e := stEntry{name: name, dtype: info.DType}
	width, ok := dtypeSize[info.DType]
	switch {
	case info.DType == "":
		return e, fmt.Errorf("tensor %q has no dtype", name)
	case !ok:
		return e, fmt.Errorf("tensor %q has dtype %q; supported are F32, F16 and BF16", name, info.DType)
	case info.Shape == nil:
		return e, fmt.Errorf("tensor %q has no shape", name)
	case len(info.DataOffsets) != 2:
		return e, fmt.Errorf("tensor %q: data_offsets must be [begin, end], got %v", name, info.DataOffsets)
	}
	e.begin, e.end = info.DataOffsets[0], info.DataOffsets[1]
	if e.begin < 0 || e.end < e.begin {
		return e, fmt.Errorf("tensor %q has data_offsets [%d, %d] that do not form a range", name, e.begin, e.end)
	}
	// The element count is checked against the byte range dimension by dimension, so a huge
	// shape cannot overflow: the range is already bounded by the file size later.
	numel := int64(1)
	e.shape = make([]int, len(info.Shape))
	for i, d := range info.Shape {
		if d < 0 {
			return e, fmt.Errorf("tensor %q has a negative dimension in shape %v", name, info.Shape)
		}
		if d > 0 && numel > (e.end-e.begin)/width/d {
			return e, fmt.Errorf("tensor %q: shape %v needs more than its %d bytes", name, info.Shape, e.end-e.begin)
		}
		numel *= d
		e.shape[i] = int(d)
	}
	if numel*width != e.end-e.begin {
		return e, fmt.Errorf("tensor %q: shape %v of %s needs %d bytes, data_offsets give %d", name, info.Shape, info.DType, numel*width, e.end-e.begin)
	}
	e.numel = int(numel)
	return e, nil
}

// checkLayout requires the tensors to tile the data section exactly, as the reference reader
// does: sorted by offset, each starts where the previous ended, the last ends at the file's end.
// That rules out overlaps (two tensors aliasing bytes), gaps and ranges past the end.
func (h *stHeader) checkLayout(dataLen int64) error {
	sort.Slice(h.entries, func(i, j int) bool {
		a, b := h.entries[i], h.entries[j]
		if a.begin != b.begin {
			return a.begin < b.begin
		}
		return a.end < b.end
	})
	var next int64
	for i, e := range h.entries {
		h.byName[e.name] = i
		switch {
		case e.begin < next:
			return fmt.Errorf("tensor %q at bytes [%d, %d) overlaps the tensor before it, which ends at %d", e.name, e.begin, e.end, next)
		case e.begin > next:
			return fmt.Errorf("tensor %q starts at byte %d, leaving a gap after byte %d", e.name, e.begin, next)
		case e.end > dataLen:
			return fmt.Errorf("tensor %q at bytes [%d, %d) runs past the %d-byte data section (truncated file?)", e.name, e.begin, e.end, dataLen)
		}
		next = e.end
	}
	if next != dataLen {
		return fmt.Errorf("data section has %d bytes but the tensors cover %d", dataLen, next)
	}
	return nil
}

// readInto reads entry e into dst (len e.numel), converting to float32.
func (h *stHeader) readInto(r io.ReaderAt, e stEntry, dst []float32) error {
	if len(dst) != e.numel {
		return fmt.Errorf("tensor %q has %d values, destination holds %d", e.name, e.numel, len(dst))
	}
	if e.numel == 0 {
		return nil
	}
	off := h.dataStart + e.begin
	if e.dtype == "F32" && nativeLittle {
		if _, err := r.ReadAt(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst)), off); err != nil {
			return fmt.Errorf("tensor %q: %w", e.name, err)
		}
		return nil
	}
	width := int(dtypeSize[e.dtype])
	buf := make([]byte, width*min(e.numel, 1<<16))
	for done := 0; done < e.numel; {
		k := min(e.numel-done, len(buf)/width)
		if _, err := r.ReadAt(buf[:k*width], off+int64(done*width)); err != nil {
			return fmt.Errorf("tensor %q: %w", e.name, err)
		}
		decodeFloats(dst[done:done+k], buf[:k*width], e.dtype)
		done += k
	}
	return nil
}

func decodeFloats(dst []float32, src []byte, dtype string) {
	switch dtype {
	case "F32":
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case "BF16": // the top half of a float32
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
		}
	case "F16":
		for i := range dst {
			dst[i] = halfToFloat(binary.LittleEndian.Uint16(src[2*i:]))
		}
	}
}

// halfToFloat converts an IEEE 754 binary16 to float32 exactly (every half is a float32).
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN, payload kept
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp != 0: // normal: rebias 15 → 127
		return math.Float32frombits(sign | (exp+112)<<23 | frac<<13)
	case frac == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal half: frac·2^-24, a normal float32.
	v := float32(frac) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}
