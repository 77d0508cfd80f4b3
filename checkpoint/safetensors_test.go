package checkpoint

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// rawFile assembles a safetensors file from a literal header and data, for inputs the writer
// would never produce.
func rawFile(header string, data []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

func readBytes(b []byte) (map[string]Tensor, map[string]string, error) {
	return readSafetensors(bytes.NewReader(b), int64(len(b)))
}

func writeTemp(t *testing.T, tensors []Tensor, meta map[string]string) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := WriteSafetensors(path, tensors, meta); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSafetensorsRoundTrip(t *testing.T) {
	in := []Tensor{
		{Name: "b", Shape: []int{2, 3}, Data: []float32{1, -2, 3.5, float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1))}},
		{Name: "a", Shape: []int{}, Data: []float32{7}},        // scalar
		{Name: "empty", Shape: []int{0, 4}, Data: []float32{}}, // no bytes at all
		{Name: "ü/name", DType: "F32", Shape: []int{1}, Data: []float32{math.Float32frombits(0x7fc00001)}},
	}
	b := writeTemp(t, in, map[string]string{"format": "pt", "step": "3"})
	if n := binary.LittleEndian.Uint64(b); n%8 != 0 {
		t.Fatalf("header length %d is not padded to a multiple of 8", n)
	}
	got, meta, err := readBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if meta["format"] != "pt" || meta["step"] != "3" || len(meta) != 2 {
		t.Fatalf("metadata %v", meta)
	}
	if len(got) != len(in) {
		t.Fatalf("%d tensors read, %d written", len(got), len(in))
	}
	for _, w := range in {
		g := got[w.Name]
		if g.DType != "F32" || !slices.Equal(g.Shape, w.Shape) || firstDiff(g.Data, w.Data) >= 0 {
			t.Fatalf("%s: read %+v, wrote %+v", w.Name, g, w)
		}
	}
	// Data is laid out in the order given, right after the header.
	start := 8 + int(binary.LittleEndian.Uint64(b))
	if math.Float32frombits(binary.LittleEndian.Uint32(b[start:])) != 1 {
		t.Fatal("first data bytes are not tensor b's first value")
	}
}

func TestSafetensorsHalfPrecision(t *testing.T) {
	halves := []uint16{0x0000, 0x8000, 0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x7c00, 0xfc00, 0x3555}
	wantHalf := []float32{0, float32(math.Copysign(0, -1)), 1, -2, 65504, 1.0 / (1 << 24), 1023.0 / (1 << 24),
		float32(math.Inf(1)), float32(math.Inf(-1)), 0.333251953125}
	bf := []uint16{0x3f80, 0xc040, 0x4049}
	wantBF := []float32{1, -3, 3.140625}
	var data []byte
	for _, h := range halves {
		data = binary.LittleEndian.AppendUint16(data, h)
	}
	for _, h := range bf {
		data = binary.LittleEndian.AppendUint16(data, h)
	}
	header := `{"h":{"dtype":"F16","shape":[10],"data_offsets":[0,20]},"b":{"dtype":"BF16","shape":[3],"data_offsets":[20,26]}}`
	got, _, err := readBytes(rawFile(header, data))
	if err != nil {
		t.Fatal(err)
	}
	if g := got["h"]; g.DType != "F16" || firstDiff(g.Data, wantHalf) >= 0 {
		t.Fatalf("F16 read as %v, want %v", g.Data, wantHalf)
	}
	if g := got["b"]; g.DType != "BF16" || firstDiff(g.Data, wantBF) >= 0 {
		t.Fatalf("BF16 read as %v, want %v", g.Data, wantBF)
	}
	// NaN keeps being NaN.
	if nan := halfToFloat(0x7e00); !math.IsNaN(float64(nan)) {
		t.Fatalf("half NaN read as %v", nan)
	}
}

func TestReadSafetensorsRejectsCorruptFiles(t *testing.T) {
	f32 := func(n int) []byte { return make([]byte, 4*n) }
	good := writeTemp(t, []Tensor{{Name: "w", Shape: []int{2, 2}, Data: []float32{1, 2, 3, 4}}}, nil)
	cases := []struct {
		name string
		file []byte
		want []string
	}{
		{"empty file", nil, []string{"too short"}},
		{"truncated data", good[:len(good)-3], []string{`"w"`, "runs past"}},
		{"truncated header", good[:12], []string{"header length"}},
		{"header length beyond file", rawFile(`{}`, nil)[:8], []string{"runs past the end"}},
		{"huge header length", append(binary.LittleEndian.AppendUint64(nil, 1<<62), "{}"...), []string{"header length"}},
		{"bad JSON", rawFile(`{"w":{"dtype":"F32",`, nil), []string{"header JSON"}},
		{"not an object", rawFile(`[1,2]`, nil), []string{"not a JSON object"}},
		{"trailing data", rawFile(`{} {}`, nil), []string{"after its JSON object"}},
		{"invalid UTF-8", rawFile("{\"\xff\":{}}", nil), []string{"UTF-8"}},
		{"unsupported dtype", rawFile(`{"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}`, f32(2)), []string{`"w"`, "I64"}},
		{"missing dtype", rawFile(`{"w":{"shape":[1],"data_offsets":[0,4]}}`, f32(1)), []string{`"w"`, "no dtype"}},
		{"missing shape", rawFile(`{"w":{"dtype":"F32","data_offsets":[0,4]}}`, f32(1)), []string{`"w"`, "no shape"}},
		{"unknown field", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}`, f32(1)), []string{`"w"`, "unknown field"}},
		{"one offset", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[4]}}`, f32(1)), []string{`"w"`, "data_offsets"}},
		{"reversed offsets", rawFile(`{"w":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}}`, f32(1)), []string{`"w"`, "range"}},
		{"negative dimension", rawFile(`{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, f32(1)), []string{`"w"`, "negative"}},
		{"size mismatch", rawFile(`{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, f32(2)), []string{`"w"`, "needs"}},
		{"overflowing shape", rawFile(`{"w":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,8]}}`, f32(2)), []string{`"w"`, "needs more"}},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, f32(3)), []string{`"b"`, "overlaps"}},
		{"gap", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, f32(3)), []string{`"b"`, "gap"}},
		{"past the end", rawFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, f32(3)), []string{`"a"`, "runs past"}},
		{"unused bytes", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, f32(2)), []string{"cover 4"}},
		{"duplicate tensor", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, f32(2)), []string{`"a"`, "twice"}},
		{"metadata not strings", rawFile(`{"__metadata__":{"step":3}}`, nil), []string{"__metadata__"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := readBytes(c.file)
			expectErr(t, err, c.want...)
		})
	}
}

func TestReadSafetensorsNamesThePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.safetensors")
	if err := os.WriteFile(path, []byte("1234"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := ReadSafetensors(path)
	expectErr(t, err, path, "too short")
	_, _, err = ReadSafetensors(filepath.Join(t.TempDir(), "absent"))
	expectErr(t, err, "absent")
}

func TestWriteSafetensorsRejectsBadTensors(t *testing.T) {
	cases := []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
		want    string
	}{
		{"length mismatch", []Tensor{{Name: "w", Shape: []int{3}, Data: []float32{1}}}, nil, `"w" has 1 values`},
		{"duplicate", []Tensor{{Name: "w", Shape: []int{1}, Data: []float32{1}}, {Name: "w", Shape: []int{1}, Data: []float32{1}}}, nil, "twice"},
		{"reserved name", []Tensor{{Name: metadataKey, Shape: []int{1}, Data: []float32{1}}}, nil, "invalid name"},
		{"empty name", []Tensor{{Shape: []int{1}, Data: []float32{1}}}, nil, "invalid name"},
		{"unknown dtype", []Tensor{{Name: "w", DType: "F64", Shape: []int{1}, Data: []float32{1}}}, nil, "not written"},
		{"beyond f16", []Tensor{{Name: "w", DType: "F16", Shape: []int{2}, Data: []float32{1, 70000}}}, nil, "beyond F16"},
		{"negative dimension", []Tensor{{Name: "w", Shape: []int{-1, -1}, Data: []float32{1}}}, nil, "negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.safetensors")
			expectErr(t, WriteSafetensors(path, c.tensors, c.meta), c.want)
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatal("a refused write left a file")
			}
		})
	}
}

// FuzzReadSafetensors feeds arbitrary bytes to the reader: it must return an error or tensors,
// never panic, and whatever it accepts in F32 must survive a write and a second read unchanged.
func FuzzReadSafetensors(f *testing.F) {
	var seeds [][]byte
	path := filepath.Join(f.TempDir(), "seed.safetensors")
	if err := WriteSafetensors(path, []Tensor{
		{Name: "a", Shape: []int{2}, Data: []float32{1, 2}},
		{Name: "b", Shape: []int{}, Data: []float32{3}},
	}, map[string]string{"format": "pt"}); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	seeds = append(seeds, good, good[:len(good)-1], good[:10], nil,
		rawFile(`{"h":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}`, []byte{0, 0x3c}),
		rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)))
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, meta, err := readBytes(b)
		if err != nil {
			return
		}
		var total int
		tensors := make([]Tensor, 0, len(got))
		for _, tn := range got {
			total += len(tn.Data)
			if tn.DType == "F32" {
				tensors = append(tensors, tn)
			}
		}
		if total > len(b) {
			t.Fatalf("%d values read from %d bytes", total, len(b))
		}
		slices.SortFunc(tensors, func(x, y Tensor) int { return bytes.Compare([]byte(x.Name), []byte(y.Name)) })
		out := filepath.Join(t.TempDir(), "again.safetensors")
		if err := WriteSafetensors(out, tensors, meta); err != nil {
			t.Fatalf("accepted tensors cannot be written back: %v", err)
		}
		again, meta2, err := ReadSafetensors(out)
		if err != nil {
			t.Fatalf("rewritten file unreadable: %v", err)
		}
		if len(again) != len(tensors) || len(meta2) != len(meta) {
			t.Fatalf("rewrite has %d tensors and %d metadata keys, want %d and %d", len(again), len(meta2), len(tensors), len(meta))
		}
		for _, tn := range tensors {
			a := again[tn.Name]
			if !slices.Equal(a.Shape, tn.Shape) || firstDiff(a.Data, tn.Data) >= 0 {
				t.Fatalf("tensor %q changed in the rewrite", tn.Name)
			}
		}
	})
}
