package traj

import (
	"bytes"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"testing"
)

// The fuzz targets run on their seed corpora as ordinary tests; `go test -fuzz FuzzX ./traj`
// explores further.

func seedEncodings(f *testing.F, enc func(*Trajectory) ([]byte, error)) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, tr := range []*Trajectory{{}, oddTrajectory(), genTrajectory(rng, 60, 500), genTrajectory(rng, 300, 100000), multiSample(rng, 3, 40, 500)} {
		b, err := enc(tr)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
}

// FuzzBinaryDecode: arbitrary bytes never panic; whatever decodes re-encodes to an equal trajectory.
func FuzzBinaryDecode(f *testing.F) {
	seedEncodings(f, (*Trajectory).MarshalBinary)
	f.Add([]byte("ATRJ\x01\x00\x00\x00\x00\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var tr Trajectory
		if err := tr.UnmarshalBinary(data); err != nil {
			return
		}
		b, err := tr.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded trajectory does not re-encode: %v", err)
		}
		var again Trajectory
		if err := again.UnmarshalBinary(b); err != nil || !Equal(&tr, &again) {
			t.Fatalf("re-encoded trajectory differs (err %v)", err)
		}
	})
}

// FuzzJSONDecode: arbitrary bytes never panic; whatever decodes re-encodes to an equal trajectory.
func FuzzJSONDecode(f *testing.F) {
	seedEncodings(f, func(t *Trajectory) ([]byte, error) { return t.AppendJSON(nil) })
	f.Add([]byte(`{"v":1,"status":"ok","logprobs":["NaN:0x7fc00001"]}`))
	f.Add([]byte(`{"v":1,"status":"ok","id":{"b64":"/w=="}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var tr Trajectory
		if err := tr.UnmarshalJSON(data); err != nil {
			return
		}
		b, err := tr.AppendJSON(nil)
		if err != nil {
			t.Fatalf("decoded trajectory does not re-encode: %v", err)
		}
		var again Trajectory
		if err := again.UnmarshalJSON(b); err != nil || !Equal(&tr, &again) {
			t.Fatalf("re-encoded trajectory differs (err %v)", err)
		}
	})
}

// FuzzStreamReader: arbitrary streams never panic and every error is classified.
func FuzzStreamReader(f *testing.F) {
	for _, opts := range streamOptions {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, opts)
		if err != nil {
			f.Fatal(err)
		}
		for _, tr := range sampleTrajectories(2) {
			if err := w.Write(tr); err != nil {
				f.Fatal(err)
			}
		}
		w.Close()
		f.Add(buf.Bytes())
		f.Add(buf.Bytes()[:buf.Len()-3])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		defer r.Close()
		for {
			_, err := r.Read()
			if err == nil {
				continue
			}
			if err != io.EOF && !errors.Is(err, ErrTornTail) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("unclassified error from a byte reader: %v", err)
			}
			if r.Offset() > int64(len(data)) {
				t.Fatalf("offset %d past the %d-byte input", r.Offset(), len(data))
			}
			break
		}
		checkResync(t, data, r.Records())
	})
}

// checkResync reads data with a resynchronizing reader: it never returns ErrCorrupt, reads at
// least the plain reader's intact records, and reports damage in order, inside the input, and
// never over a record it returned.
func checkResync(t *testing.T, data []byte, plainRecords int) {
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("header read once, not twice: %v", err)
	}
	defer r.Close()
	var ds []Damage
	if err := r.Resync(func(d Damage) { ds = append(ds, d) }); err != nil {
		t.Fatal(err)
	}
	end := int64(StreamHeaderLen)
	for {
		before := r.Offset()
		_, err := r.Read()
		for _, d := range ds {
			if d.Offset < end || d.Bytes <= 0 || d.Offset+d.Bytes > int64(len(data)) || !errors.Is(d.Cause, ErrCorrupt) {
				t.Fatalf("bad damage report %v after offset %d (input %d bytes)", d, end, len(data))
			}
			end = d.Offset + d.Bytes
		}
		ds = ds[:0]
		if err == nil {
			if r.Offset() <= before || r.Offset() <= end-1 || r.Offset() > int64(len(data)) {
				t.Fatalf("record ends at %d: before %d, damage to %d, input %d", r.Offset(), before, end, len(data))
			}
			end = r.Offset()
			continue
		}
		if err != io.EOF && !errors.Is(err, ErrTornTail) {
			t.Fatalf("resynchronizing reader returned %v", err)
		}
		if r.Records() < plainRecords {
			t.Fatalf("resync read %d records, the plain reader %d", r.Records(), plainRecords)
		}
		return
	}
}

// FuzzStreamResync damages a valid stream anywhere (overwriting, inserting or cutting bytes): a
// resynchronizing reader returns, in order, every record whose frame the damage did not touch.
func FuzzStreamResync(f *testing.F) {
	f.Add(uint8(0), uint16(20), uint16(9), []byte{0xff}, uint8(0))
	f.Add(uint8(2), uint16(300), uint16(40), []byte("garbage"), uint8(1))
	f.Add(uint8(3), uint16(5), uint16(0), []byte("ATRS"), uint8(2))
	f.Add(uint8(4), uint16(1000), uint16(200), []byte{0, 0, 0, 0}, uint8(0))
	ts := sampleTrajectories(5)
	type stream struct {
		b    []byte
		ends []int64
	}
	var streams []stream
	for _, opts := range streamOptions {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, opts)
		if err != nil {
			f.Fatal(err)
		}
		ends := []int64{w.Offset()}
		for _, tr := range ts {
			if err := w.Write(tr); err != nil {
				f.Fatal(err)
			}
			ends = append(ends, w.Offset())
		}
		w.Close()
		streams = append(streams, stream{buf.Bytes(), ends})
	}
	f.Fuzz(func(t *testing.T, which uint8, at, n uint16, junk []byte, mode uint8) {
		s := streams[int(which)%len(streams)]
		body := len(s.b) - StreamHeaderLen
		pos := StreamHeaderLen + int(at)%body
		var data []byte
		var lo, hi int // the original bytes [lo, hi) are changed or gone; hi == lo for an insertion
		switch mode % 3 {
		case 0: // overwrite with junk, repeated over n bytes
			if len(junk) == 0 {
				return
			}
			data = bytes.Clone(s.b)
			k := min(int(n%512)+1, len(data)-pos)
			for i := range k {
				data[pos+i] = junk[i%len(junk)]
			}
			lo, hi = pos, pos+k
			if bytes.Equal(data, s.b) {
				return
			}
		case 1: // insert junk
			if len(junk) == 0 {
				return
			}
			data = append(append(bytes.Clone(s.b[:pos]), junk...), s.b[pos:]...)
			lo, hi = pos, pos
		case 2: // cut n bytes out
			k := min(int(n%2048)+1, len(s.b)-pos)
			data = append(bytes.Clone(s.b[:pos]), s.b[pos+k:]...)
			lo, hi = pos, pos+k
		}
		var want []*Trajectory
		for i := range ts {
			a, b := int(s.ends[i]), int(s.ends[i+1])
			touched := hi > lo && a < hi && lo < b || hi == lo && a < lo && lo < b
			if !touched {
				want = append(want, ts[i])
			}
		}
		got, _, err := readResync(t, data)
		if err != nil && !isTorn(err) {
			t.Fatalf("resync read: %v", err)
		}
		j := 0
		for _, tr := range got {
			if j < len(want) && Equal(tr, want[j]) {
				j++
			}
		}
		if j < len(want) && !(isTorn(err) && j == len(want)-1 && Equal(want[j], ts[len(ts)-1])) {
			t.Fatalf("resync read back %d of the %d untouched records in order (%d read)", j, len(want), len(got))
		}
	})
}

// FuzzRoundTrip: generated trajectories with arbitrary float bits round-trip through every codec.
func FuzzRoundTrip(f *testing.F) {
	f.Add(uint64(1), uint16(10), uint32(0x7fc00001), uint64(0xfff0000000000001))
	f.Add(uint64(2), uint16(2000), uint32(0x80000000), uint64(0x8000000000000000))
	f.Add(uint64(3), uint16(0), uint32(1), uint64(1))
	f.Fuzz(func(t *testing.T, seed uint64, n uint16, lpBits uint32, rewardBits uint64) {
		rng := rand.New(rand.NewPCG(seed, 99))
		tr := genTrajectory(rng, int(n%4096)+1, 1+rng.Int32N(1<<20))
		tr.Logprobs[len(tr.Logprobs)-1] = math.Float32frombits(lpBits)
		tr.Reward = math.Float64frombits(rewardBits)
		if len(tr.Turns) > 0 {
			tr.Turns[0].Reward = math.Float64frombits(^rewardBits)
		}
		for _, c := range codecs {
			b, err := c.encode(tr)
			if err != nil {
				t.Fatalf("%s encode: %v", c.name, err)
			}
			got, err := c.decode(b)
			if err != nil || !Equal(tr, got) {
				t.Fatalf("%s round trip failed: %v", c.name, err)
			}
		}
	})
}
