package traj

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// Records are compressed one by one (not the stream as a whole) so that any record boundary is a
// valid place to cut a file and resume appending.

type compressor struct {
	kind Compression
	gz   *gzip.Writer
	gzb  bytes.Buffer
	zs   *zstd.Encoder
}

func newCompressor(c Compression) (*compressor, error) {
	cp := &compressor{kind: c}
	switch c {
	case CompressGzip:
		cp.gz = gzip.NewWriter(&cp.gzb)
	case CompressZstd:
		// One goroutine: records are small and independent. The default level stores binary
		// records raw (its entropy estimate gives up on float mantissas); "better" saves ~7% there.
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedBetterCompression))
		if err != nil {
			return nil, fmt.Errorf("traj: zstd encoder: %w", err)
		}
		cp.zs = enc
	}
	return cp, nil
}

// compress appends the compressed form of src to dst.
func (c *compressor) compress(dst, src []byte) ([]byte, error) {
	switch c.kind {
	case CompressGzip:
		c.gzb.Reset()
		c.gz.Reset(&c.gzb)
		if _, err := c.gz.Write(src); err != nil {
			return dst, err
		}
		if err := c.gz.Close(); err != nil {
			return dst, err
		}
		return append(dst, c.gzb.Bytes()...), nil
	case CompressZstd:
		return c.zs.EncodeAll(src, dst), nil
	}
	return append(dst, src...), nil
}

func (c *compressor) close() {
	if c.zs != nil {
		c.zs.Close()
	}
}

type decompressor struct {
	kind Compression
	gz   *gzip.Reader
	zs   *zstd.Decoder
}

func newDecompressor(c Compression) (*decompressor, error) {
	d := &decompressor{kind: c}
	if c == CompressZstd {
		// The memory bound makes a zip bomb an error rather than an allocation.
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(MaxRecordBytes))
		if err != nil {
			return nil, fmt.Errorf("traj: zstd decoder: %w", err)
		}
		d.zs = dec
	}
	return d, nil
}

// decompress appends the decompressed form of src to dst, refusing more than MaxRecordBytes.
func (d *decompressor) decompress(dst, src []byte) ([]byte, error) {
	switch d.kind {
	case CompressGzip:
		if d.gz == nil {
			gz, err := gzip.NewReader(bytes.NewReader(src))
			if err != nil {
				return dst, err
			}
			d.gz = gz
		} else if err := d.gz.Reset(bytes.NewReader(src)); err != nil {
			return dst, err
		}
		d.gz.Multistream(false)
		buf := bytes.NewBuffer(dst)
		n, err := io.Copy(buf, io.LimitReader(d.gz, MaxRecordBytes+1))
		if err != nil {
			return dst, err
		}
		if n > MaxRecordBytes {
			return dst, fmt.Errorf("decompressed record exceeds %d bytes", MaxRecordBytes)
		}
		return buf.Bytes(), nil
	case CompressZstd:
		return d.zs.DecodeAll(src, dst)
	}
	return append(dst, src...), nil
}

func (d *decompressor) close() {
	if d.zs != nil {
		d.zs.Close()
	}
}
