package traj

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func isTorn(err error) bool { return errors.Is(err, ErrTornTail) }

var streamOptions = []WriterOptions{
	{},
	{Compression: CompressGzip},
	{Compression: CompressZstd},
	{Format: FormatJSON},
	{Format: FormatJSON, Compression: CompressZstd},
}

func optName(o WriterOptions) string {
	o, _ = o.withDefaults()
	return o.Format.String() + "/" + o.Compression.String()
}

func writeStream(t *testing.T, opts WriterOptions, ts []*Trajectory) ([]byte, []int64) {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, opts)
	if err != nil {
		t.Fatal(err)
	}
	ends := []int64{w.Offset()}
	for _, tr := range ts {
		if err := w.Write(tr); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, w.Offset())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if int64(buf.Len()) != ends[len(ends)-1] {
		t.Fatalf("Offset %d, stream length %d", ends[len(ends)-1], buf.Len())
	}
	return buf.Bytes(), ends
}

func readAll(b []byte) ([]*Trajectory, *Reader, error) {
	r, err := NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	var out []*Trajectory
	for tr, err := range r.All() {
		if err != nil {
			return out, r, err
		}
		out = append(out, tr)
	}
	return out, r, nil
}

func sampleTrajectories(n int) []*Trajectory {
	rng := rand.New(rand.NewPCG(7, 8))
	ts := []*Trajectory{oddTrajectory()}
	for len(ts) < n {
		ts = append(ts, genTrajectory(rng, 100+rng.IntN(400), 32000))
	}
	return ts
}

func TestStreamRoundTrip(t *testing.T) {
	ts := sampleTrajectories(6)
	for _, opts := range streamOptions {
		t.Run(optName(opts), func(t *testing.T) {
			b, _ := writeStream(t, opts, ts)
			got, r, err := readAll(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(ts) || r.Records() != len(ts) || r.Offset() != int64(len(b)) {
				t.Fatalf("read %d records to offset %d of %d", len(got), r.Offset(), len(b))
			}
			for i := range ts {
				if !Equal(ts[i], got[i]) {
					t.Fatalf("record %d changed", i)
				}
			}
		})
	}
}

func TestStreamTornTail(t *testing.T) {
	ts := sampleTrajectories(3)
	for _, opts := range streamOptions {
		t.Run(optName(opts), func(t *testing.T) {
			b, ends := writeStream(t, opts, ts)
			last := ends[len(ends)-2]
			// Every cut inside the last record keeps the others and reports a torn tail at its start.
			// With -short, every cut in the frame header and the last bytes, and a stride between.
			stride := int64(1)
			if testing.Short() {
				stride = 17
			}
			for cut := last + 1; cut < int64(len(b)); cut++ {
				if inMiddle := cut > last+2*frameHeaderLen && cut < int64(len(b))-16; inMiddle && (cut-last)%stride != 0 {
					continue
				}
				got, r, err := readAll(b[:cut])
				if !isTorn(err) || len(got) != len(ts)-1 || r.Offset() != last {
					t.Fatalf("cut at %d: %d records, offset %d (want %d), err %v", cut, len(got), r.Offset(), last, err)
				}
			}
			// A last payload that is complete in length but damaged (partly persisted) is torn too.
			damaged := bytes.Clone(b)
			damaged[len(damaged)-1] ^= 0x55
			if got, _, err := readAll(damaged); !isTorn(err) || len(got) != len(ts)-1 {
				t.Fatalf("damaged last payload: %d records, err %v", len(got), err)
			}
			// A power loss can leave the file's tail as zeros: in place of the last record, after
			// its complete frame header, or after the whole stream. Each is a torn tail at the start
			// of the zeros' record; zeros followed by anything else are corruption.
			zeroed := func(from int64, extra int) []byte {
				z := bytes.Clone(b)
				clear(z[from:])
				return append(z, make([]byte, extra)...)
			}
			for _, tc := range []struct {
				name    string
				b       []byte
				records int
				offset  int64
			}{
				{"last record zeroed", zeroed(last, 0), len(ts) - 1, last},
				{"last record zeroed and extended", zeroed(last, 5000), len(ts) - 1, last},
				{"last payload zeroed", zeroed(last+frameHeaderLen, 300), len(ts) - 1, last},
				{"zeros after the stream", zeroed(int64(len(b)), 4096), len(ts), int64(len(b))},
				{"one zero byte after the stream", zeroed(int64(len(b)), 1), len(ts), int64(len(b))},
			} {
				got, r, err := readAll(tc.b)
				if !isTorn(err) || len(got) != tc.records || r.Offset() != tc.offset {
					t.Fatalf("%s: %d records, offset %d (want %d at %d), err %v", tc.name, len(got), r.Offset(), tc.records, tc.offset, err)
				}
			}
			notZero := zeroed(last, 64)
			notZero[len(notZero)-1] = 1
			if got, _, err := readAll(notZero); !errors.Is(err, ErrCorrupt) || len(got) != len(ts)-1 {
				t.Fatalf("zeros then a non-zero byte: %d records, err %v", len(got), err)
			}
			// Damage earlier, with records after it, is corruption, not a torn tail.
			for _, at := range []int64{ends[1] + 2, ends[1] + frameHeaderLen + 3} {
				damaged := bytes.Clone(b)
				damaged[at] ^= 0x55
				got, _, err := readAll(damaged)
				if !errors.Is(err, ErrCorrupt) || len(got) != 1 {
					t.Fatalf("damage at %d: %d records, err %v", at, len(got), err)
				}
			}
		})
	}
}

func TestStreamHeaderErrors(t *testing.T) {
	b, _ := writeStream(t, WriterOptions{}, nil)
	cases := map[string]struct {
		in   []byte
		torn bool
		want string
	}{
		"empty":        {nil, true, "empty"},
		"short header": {b[:5], true, "5 of 8"},
		"bad magic":    {[]byte("NOPE\x01\x01\x00\x00"), false, "bad magic"},
		"version":      {[]byte("ATRS\x02\x01\x00\x00"), false, "unknown stream version"},
		"format":       {[]byte("ATRS\x01\x07\x00\x00"), false, "unsupported"},
		"compression":  {[]byte("ATRS\x01\x01\x09\x00"), false, "unsupported"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(c.in))
			if err == nil || isTorn(err) != c.torn || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want torn=%v mentioning %q", err, c.torn, c.want)
			}
		})
	}
}

func TestOpenFileResumes(t *testing.T) {
	ts := sampleTrajectories(6)
	for _, opts := range streamOptions {
		t.Run(optName(opts), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "trajectories.atrs")
			w, rec, err := OpenFile(path, opts)
			if err != nil || rec != (Recovery{End: StreamHeaderLen}) {
				t.Fatalf("fresh open: %+v, %v", rec, err)
			}
			for _, tr := range ts[:3] {
				if err := w.Write(tr); err != nil {
					t.Fatal(err)
				}
			}
			good := w.Offset()
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			// Simulate a kill in the middle of writing record 4.
			partial, _ := writeStream(t, opts, ts[3:4])
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			torn := partial[StreamHeaderLen : len(partial)-7]
			if _, err := f.Write(torn); err != nil {
				t.Fatal(err)
			}
			f.Close()

			w, rec, err = OpenFile(path, opts)
			if err != nil {
				t.Fatal(err)
			}
			want := Recovery{Records: 3, End: good, Truncated: int64(len(torn))}
			if rec != want || w.Records() != 3 || w.Offset() != good {
				t.Fatalf("recovery %+v (writer %d records at %d), want %+v", rec, w.Records(), w.Offset(), want)
			}
			for _, tr := range ts[3:] {
				if err := w.Write(tr); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := readAll(b)
			if err != nil || len(got) != len(ts) {
				t.Fatalf("after resume: %d records, %v", len(got), err)
			}
			for i := range ts {
				if !Equal(ts[i], got[i]) {
					t.Fatalf("record %d changed", i)
				}
			}
		})
	}
}

func TestOpenFileRefuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a")
	w, _, err := OpenFile(path, WriterOptions{Compression: CompressZstd})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range sampleTrajectories(3) {
		if err := w.Write(tr); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if _, _, err := OpenFile(path, WriterOptions{Compression: CompressGzip}); err == nil || !strings.Contains(err.Error(), "options ask") {
		t.Fatalf("mismatched options: %v", err)
	}
	b, _ := os.ReadFile(path)
	b[StreamHeaderLen+frameHeaderLen+5] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenFile(path, WriterOptions{Compression: CompressZstd}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt middle: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, b) {
		t.Fatal("OpenFile changed a corrupt file")
	}
	// A header torn by a kill before the first record is started over.
	torn := filepath.Join(dir, "b")
	os.WriteFile(torn, []byte("ATR"), 0o644)
	w, rec, err := OpenFile(torn, WriterOptions{})
	if err != nil || rec.Truncated != 3 || rec.Records != 0 {
		t.Fatalf("torn header: %+v %v", rec, err)
	}
	w.Close()
}

func TestWriterConcurrent(t *testing.T) {
	ts := sampleTrajectories(8)
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WriterOptions{Compression: CompressZstd})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			for _, tr := range ts {
				if err := w.Write(tr); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	w.Close()
	got, _, err := readAll(buf.Bytes())
	if err != nil || len(got) != 4*len(ts) {
		t.Fatalf("%d records, %v", len(got), err)
	}
	if err := w.Write(ts[0]); err == nil {
		t.Fatal("Write after Close succeeded")
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, io.ErrShortWrite
	}
	f.n--
	return len(p), nil
}

func TestWriterErrorIsSticky(t *testing.T) {
	w, err := NewWriter(&failWriter{n: 2}, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ts := sampleTrajectories(3)
	if err := w.Write(ts[1]); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ts[2]); !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("err %v", err)
	}
	if err := w.Write(ts[1]); !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("after failure: %v", err)
	}
	var buf bytes.Buffer
	w, err = NewWriter(&buf, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(&Trajectory{Status: 9}); err == nil || buf.Len() != StreamHeaderLen {
		t.Fatalf("invalid trajectory: err %v, stream %d bytes", err, buf.Len())
	}
	if err := w.Write(ts[1]); err != nil {
		t.Fatalf("an invalid trajectory broke the writer: %v", err)
	}
}

// TestOpenFileResumesAfterZeroTail: a file whose tail a power loss left as zeros is cut back to
// its last intact record and appended to.
func TestOpenFileResumesAfterZeroTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trajectories.atrs")
	ts := sampleTrajectories(4)
	w, _, err := OpenFile(path, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range ts[:3] {
		if err := w.Write(tr); err != nil {
			t.Fatal(err)
		}
	}
	good := w.Offset()
	w.Close()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 8192))
	f.Close()
	w, rec, err := OpenFile(path, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Recovery{Records: 3, End: good, Truncated: 8192}); rec != want {
		t.Fatalf("recovery %+v, want %+v", rec, want)
	}
	if err := w.Write(ts[3]); err != nil {
		t.Fatal(err)
	}
	w.Close()
	b, _ := os.ReadFile(path)
	got, _, err := readAll(b)
	if err != nil || len(got) != 4 || !Equal(got[3], ts[3]) {
		t.Fatalf("after resume: %d records, %v", len(got), err)
	}
}
