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
	for _, tr := range []*Trajectory{{}, oddTrajectory(), genTrajectory(rng, 60, 500), genTrajectory(rng, 300, 100000)} {
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
			return
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
