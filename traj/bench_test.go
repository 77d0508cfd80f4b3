package traj

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"
)

// benchTrajectory is a 4096-token multi-turn episode over a 151k-token vocabulary (Qwen-sized).
func benchTrajectory() *Trajectory {
	return genTrajectory(rand.New(rand.NewPCG(42, 42)), 4096, 151_000)
}

// BenchmarkCodec reports encode/decode throughput (MB/s of encoded bytes) and bytes per token.
//
//	go test -run '^$' -bench 'Codec|Stream' -benchmem ./traj
func BenchmarkCodec(b *testing.B) {
	tr := benchTrajectory()
	for _, c := range codecs[:2] {
		enc, err := c.encode(tr)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/encode", func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			var buf []byte
			for b.Loop() {
				if c.name == "binary" {
					buf, err = tr.AppendBinary(buf[:0])
				} else {
					buf, err = tr.AppendJSON(buf[:0])
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(enc))/float64(tr.Len()), "B/token")
		})
		b.Run(c.name+"/decode", func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			for b.Loop() {
				if _, err := c.decode(enc); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(enc))/float64(tr.Len()), "B/token")
		})
	}
}

// BenchmarkStream measures framed records with each compression, per 4096-token trajectory.
func BenchmarkStream(b *testing.B) {
	tr := benchTrajectory()
	for _, opts := range streamOptions {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Write(tr); err != nil {
			b.Fatal(err)
		}
		w.Close()
		stream := buf.Bytes()
		rec := len(stream) - StreamHeaderLen
		b.Run(optName(opts)+"/write", func(b *testing.B) {
			w, err := NewWriter(io.Discard, opts)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			b.SetBytes(int64(rec))
			for b.Loop() {
				if err := w.Write(tr); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rec)/float64(tr.Len()), "B/token")
		})
		b.Run(optName(opts)+"/read", func(b *testing.B) {
			many := bytes.Clone(stream)
			for range 63 {
				many = append(many, stream[StreamHeaderLen:]...)
			}
			b.SetBytes(int64(rec))
			var r *Reader
			for b.Loop() {
				if r == nil || r.Records() == 64 {
					if r != nil {
						r.Close()
					}
					if r, err = NewReader(bytes.NewReader(many)); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := r.Read(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rec)/float64(tr.Len()), "B/token")
			r.Close()
		})
	}
}
