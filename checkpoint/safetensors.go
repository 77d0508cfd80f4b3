package checkpoint

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"unicode/utf8"
	"unsafe"
)

// Tensor is one named array of a safetensors file. Data is always float32: the reader converts
// F16 and BF16 on the way in, and DType says what the file stored ("F32", "F16" or "BF16").
// The writer writes each tensor in its DType ("" means F32), rounding F16 and BF16 to nearest,
// ties to even, as torch's conversions do.
type Tensor struct {
	Name  string
	DType string
	Shape []int
	Data  []float32
}

// maxHeaderLen bounds the JSON header, as the reference implementation does (100 MB), so a
// corrupt length cannot make the reader allocate without limit.
const maxHeaderLen = 100_000_000

// metadataKey is the reserved header entry holding string-to-string metadata.
const metadataKey = "__metadata__"

// dtypeSize lists the dtypes the reader accepts and their widths in bytes.
var dtypeSize = map[string]int64{"F32": 4, "F16": 2, "BF16": 2}

// nativeLittle reports whether float32 slices can be read and written as raw bytes without
// swapping (true on every platform the project runs on; the other path exists for correctness).
var nativeLittle = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// WriteSafetensors writes tensors, in the given order, to path in the safetensors format: an
// 8-byte little-endian header length, a JSON header padded with spaces to a multiple of 8 bytes
// (as the reference writer does, so the data starts aligned), then the raw little-endian data.
// metadata, when not nil, becomes the header's "__metadata__". The file is written to a
// temporary name, fsynced and renamed, so path never holds a torn file.
func WriteSafetensors(path string, tensors []Tensor, metadata map[string]string) (err error) {
	header, err := encodeHeader(tensors, metadata)
	if err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", path, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("checkpoint: write %s: %w", path, err)
		}
	}()
	// bufio.Writer keeps the first write error and returns it from every later call, so the
	// header writes need no checks of their own: Flush reports them.
	w := bufio.NewWriterSize(f, 1<<20)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(header)))
	w.Write(n[:])
	w.Write(header)
	for _, t := range tensors {
		if err = writeTensor(w, t); err != nil {
			return err
		}
	}
	if err = w.Flush(); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// encodeHeader renders the JSON header with offsets in the order of tensors.
func encodeHeader(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	if metadata != nil {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString(`"` + metadataKey + `":{`)
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(&b, k)
			b.WriteByte(':')
			writeJSONString(&b, metadata[k])
		}
		b.WriteByte('}')
	}
	seen := make(map[string]bool, len(tensors))
	var off int64
	for i, t := range tensors {
		switch {
		case t.Name == "" || t.Name == metadataKey || !utf8.ValidString(t.Name):
			return nil, fmt.Errorf("tensor %d has an invalid name %q", i, t.Name)
		case seen[t.Name]:
			return nil, fmt.Errorf("tensor %q is given twice", t.Name)
		case t.DType != "" && dtypeSize[t.DType] == 0:
			return nil, fmt.Errorf("tensor %q: dtype %q is not written (F32, F16 or BF16)", t.Name, t.DType)
		}
		seen[t.Name] = true
		n := 1
		for _, d := range t.Shape {
			if d < 0 {
				return nil, fmt.Errorf("tensor %q has a negative dimension in shape %v", t.Name, t.Shape)
			}
			n *= d
		}
		if n != len(t.Data) {
			return nil, fmt.Errorf("tensor %q has %d values for shape %v (%d)", t.Name, len(t.Data), t.Shape, n)
		}
		if metadata != nil || i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(&b, t.Name)
		shape, _ := json.Marshal(append([]int{}, t.Shape...)) // [] rather than null for a scalar
		dt := t.DType
		if dt == "" {
			dt = "F32"
		}
		end := off + dtypeSize[dt]*int64(n)
		fmt.Fprintf(&b, `:{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}`, dt, shape, off, end)
		off = end
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	return b.Bytes(), nil
}

func writeJSONString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s) // a Go string always marshals
	b.Write(q)
}

// writeTensor writes t's values in its dtype. A value F16 cannot hold (beyond ±65504) is an
// error naming the tensor, not an infinity in the file.
func writeTensor(w io.Writer, t Tensor) error {
	if t.DType == "" || t.DType == "F32" {
		return writeFloats(w, t.Data)
	}
	x := t.Data
	buf := make([]byte, 2*min(len(x), 1<<15))
	for done := 0; done < len(x); {
		k := min(len(x)-done, len(buf)/2)
		for i, v := range x[done : done+k] {
			var h uint16
			if t.DType == "BF16" {
				h = floatToBF16(v)
			} else {
				h = floatToHalf(v)
				if h&0x7c00 == 0x7c00 && math.Float32bits(v)&0x7f800000 != 0x7f800000 {
					return fmt.Errorf("tensor %q: value %v at index %d is beyond F16's range", t.Name, v, done+i)
				}
			}
			binary.LittleEndian.PutUint16(buf[2*i:], h)
		}
		if _, err := w.Write(buf[:2*k]); err != nil {
			return err
		}
		done += k
	}
	return nil
}

// floatToBF16 rounds v to bfloat16, to nearest with ties to even; a NaN stays a (quiet) NaN.
func floatToBF16(v float32) uint16 {
	b := math.Float32bits(v)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// floatToHalf rounds v to IEEE binary16, to nearest with ties to even; values beyond the
// largest half become infinities, NaNs stay NaNs.
func floatToHalf(v float32) uint16 {
	b := math.Float32bits(v)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127
	frac := b & 0x7fffff
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN
		return sign | 0x7e00
	case exp > 15: // too large, or infinite
		return sign | 0x7c00
	case exp >= -14: // normal half: 10 fraction bits, round the 13 dropped
		h := uint32(exp+15)<<10 | frac>>13
		rem := frac & 0x1fff
		if rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
			h++ // a carry into the exponent is the right result, up to infinity
		}
		return sign | uint16(h)
	case exp >= -25: // subnormal half: the value in units of 2^-24
		// With the implicit bit m, the value is m·2^(exp-23): in units of 2^-24 (the half's
		// subnormal step) m >> (-exp-1), the dropped bits rounded.
		m := frac | 0x800000
		shift := uint(-exp - 1)
		h := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || rem == half && h&1 == 1 {
			h++
		}
		return sign | uint16(h)
	}
	return sign // underflows to zero
}

// writeFloats writes x as little-endian float32s.
func writeFloats(w io.Writer, x []float32) error {
	if len(x) == 0 {
		return nil
	}
	if nativeLittle {
		_, err := w.Write(unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x)))
		return err
	}
	buf := make([]byte, 4*min(len(x), 1<<14))
	for len(x) > 0 {
		k := min(len(x), len(buf)/4)
		for i, v := range x[:k] {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
		if _, err := w.Write(buf[:4*k]); err != nil {
			return err
		}
		x = x[k:]
	}
	return nil
}

// ReadSafetensors reads every tensor of a safetensors file, converting F16 and BF16 to float32
// (F32, F16 and BF16 are supported; other dtypes are refused). It validates the whole header
// before reading data: the header length fits the file, the JSON is well formed with known
// fields only, every size equals product(shape)×dtype size, and the offsets tile the data
// section exactly (contiguous, in range, non-overlapping). Errors name the tensor.
func ReadSafetensors(path string) (map[string]Tensor, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	tensors, meta, err := readSafetensors(f, fi.Size())
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: read %s: %w", path, err)
	}
	return tensors, meta, nil
}

// readSafetensors is ReadSafetensors over any ReaderAt of known size.
func readSafetensors(r io.ReaderAt, size int64) (map[string]Tensor, map[string]string, error) {
	h, err := parseHeader(r, size)
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string]Tensor, len(h.entries))
	for _, e := range h.entries {
		dst := make([]float32, e.numel)
		if err := h.readInto(r, e, dst); err != nil {
			return nil, nil, err
		}
		out[e.name] = Tensor{Name: e.name, DType: e.dtype, Shape: slices.Clone(e.shape), Data: dst}
	}
	return out, h.metadata, nil
}
