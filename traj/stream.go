package traj

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
)

// A stream file (a run directory's trajectories) is an 8-byte header followed by framed records:
//
//	header: "ATRS" | stream version byte | format byte | compression byte | 0
//	record: u32 payload length | u32 CRC-32C of payload | u32 CRC-32C of the previous 8 bytes | payload
//
// (integers little-endian). The payload is one trajectory in the header's format, compressed on
// its own when the header says so, so every record boundary is a place a file can be cut and
// appended to. The separate header checksum keeps a corrupted length from being mistaken for a
// record torn off by a crash.
//
// A writer killed mid-record leaves a torn tail: the file ends inside a record, or the last
// record's payload fails its checksum with nothing after it. A machine that lost power can also
// leave the file's last bytes as zeros (its length reached the disk before its data): a failing
// record from which everything to the end is zero bytes is torn too. Readers report that as ErrTornTail
// (anything earlier that fails is ErrCorrupt); Reader.Offset then gives the end of the last good
// record, and OpenFile truncates there and appends. A Reader made to resynchronize
// (Reader.Resync) skips damage before the end instead, scanning for the next frame whose two
// checksums hold, and reports each skipped stretch; Repair rewrites a file without them.

var (
	// ErrTornTail means the stream ends inside its final record, as a writer killed mid-write leaves
	// it. Every record before it was read intact.
	ErrTornTail = errors.New("traj: stream ends with a torn record")
	// ErrCorrupt means a record failed its checksum or could not be decoded, with more data after it.
	ErrCorrupt = errors.New("traj: corrupt stream")
)

// Format is how each record's trajectory is encoded.
type Format uint8

const (
	FormatBinary Format = 1 // AppendBinary (the default)
	FormatJSON   Format = 2 // AppendJSON
)

func (f Format) String() string {
	switch f {
	case FormatBinary:
		return "binary"
	case FormatJSON:
		return "json"
	}
	return fmt.Sprintf("format(%d)", uint8(f))
}

// Compression is how each record's payload is compressed.
type Compression uint8

const (
	CompressNone Compression = 0
	CompressGzip Compression = 1 // compress/gzip, default level
	CompressZstd Compression = 2 // github.com/klauspost/compress/zstd, level SpeedBetterCompression
)

func (c Compression) String() string {
	switch c {
	case CompressNone:
		return "none"
	case CompressGzip:
		return "gzip"
	case CompressZstd:
		return "zstd"
	}
	return fmt.Sprintf("compression(%d)", uint8(c))
}

// ParseCompression is the inverse of Compression.String.
func ParseCompression(s string) (Compression, error) {
	for _, c := range []Compression{CompressNone, CompressGzip, CompressZstd} {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("traj: unknown compression %q (known: none, gzip, zstd)", s)
}

const (
	streamMagic   = "ATRS"
	streamVersion = 1
	// StreamHeaderLen is the size of the stream header; a stream with only a header holds no records.
	StreamHeaderLen = 8
	frameHeaderLen  = 12
	// MaxRecordBytes bounds one record's payload, compressed or not; a larger length is corruption.
	MaxRecordBytes = 256 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// WriterOptions configures NewWriter and OpenFile. The zero value writes uncompressed binary.
type WriterOptions struct {
	Format      Format      // 0 means FormatBinary
	Compression Compression // CompressNone, CompressGzip or CompressZstd
}

func (o WriterOptions) withDefaults() (WriterOptions, error) {
	if o.Format == 0 {
		o.Format = FormatBinary
	}
	if o.Format != FormatBinary && o.Format != FormatJSON {
		return o, fmt.Errorf("traj: unknown format %d", o.Format)
	}
	if o.Compression > CompressZstd {
		return o, fmt.Errorf("traj: unknown compression %d", o.Compression)
	}
	return o, nil
}

// Writer appends framed trajectories to a stream. It is safe for concurrent use; each Write is
// one call to the underlying writer, so records never interleave.
type Writer struct {
	mu      sync.Mutex // protects everything below
	w       io.Writer
	file    closeSyncer // set by OpenFile: closed by Close, synced by Sync
	opts    WriterOptions
	comp    *compressor
	enc     []byte // encoded trajectory, reused
	frame   []byte // frame header + payload, reused
	offset  int64
	records int
	err     error // sticky: after a failed write the stream's end is unknown
}

type closeSyncer interface {
	io.Closer
	Sync() error
}

// NewWriter writes a stream header to w and returns a Writer for records.
func NewWriter(w io.Writer, opts WriterOptions) (*Writer, error) {
	tw, err := newWriter(w, opts)
	if err != nil {
		return nil, err
	}
	hdr := []byte{streamMagic[0], streamMagic[1], streamMagic[2], streamMagic[3],
		streamVersion, byte(tw.opts.Format), byte(tw.opts.Compression), 0}
	if _, err := w.Write(hdr); err != nil {
		tw.comp.close()
		return nil, fmt.Errorf("traj: write stream header: %w", err)
	}
	tw.offset = StreamHeaderLen
	return tw, nil
}

func newWriter(w io.Writer, opts WriterOptions) (*Writer, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	comp, err := newCompressor(opts.Compression)
	if err != nil {
		return nil, err
	}
	return &Writer{w: w, opts: opts, comp: comp}, nil
}

// Write appends t as one record. After an error from the underlying writer the Writer refuses
// further records: reopen the file with OpenFile, which cuts any partial record.
func (w *Writer) Write(t *Trajectory) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	var err error
	if w.opts.Format == FormatJSON {
		w.enc, err = t.AppendJSON(w.enc[:0])
	} else {
		w.enc, err = t.AppendBinary(w.enc[:0])
	}
	if err != nil {
		return err // the trajectory is invalid; the stream is untouched
	}
	w.frame = append(w.frame[:0], make([]byte, frameHeaderLen)...)
	w.frame, err = w.comp.compress(w.frame, w.enc)
	if err != nil {
		return fmt.Errorf("traj: compress record: %w", err)
	}
	payload := w.frame[frameHeaderLen:]
	if len(payload) > MaxRecordBytes {
		return fmt.Errorf("traj: record of %d bytes exceeds the %d-byte limit", len(payload), MaxRecordBytes)
	}
	binary.LittleEndian.PutUint32(w.frame[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(w.frame[4:], crc32.Checksum(payload, castagnoli))
	binary.LittleEndian.PutUint32(w.frame[8:], crc32.Checksum(w.frame[:8], castagnoli))
	if _, err := w.w.Write(w.frame); err != nil {
		w.err = fmt.Errorf("traj: write record %d at offset %d: %w", w.records, w.offset, err)
		return w.err
	}
	w.offset += int64(len(w.frame))
	w.records++
	return nil
}

// Offset is the byte offset of the end of the last record written (the stream's length).
func (w *Writer) Offset() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.offset
}

// Records is the number of records in the stream, including those kept by OpenFile.
func (w *Writer) Records() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.records
}

// Sync commits the file to stable storage when the Writer came from OpenFile; otherwise it does
// nothing and returns nil, because an io.Writer has nothing to sync.
func (w *Writer) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file == nil {
		return nil
	}
	if err := w.file.Sync(); err != nil {
		return fmt.Errorf("traj: sync stream: %w", err)
	}
	return nil
}

// Close releases the compressor and, for a Writer from OpenFile, syncs and closes the file. It
// does not close an io.Writer passed to NewWriter.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.comp == nil {
		return nil
	}
	w.comp.close()
	w.comp = nil
	if w.err == nil {
		w.err = errors.New("traj: writer is closed")
	}
	if w.file != nil {
		serr := w.file.Sync()
		cerr := w.file.Close()
		if err := errors.Join(serr, cerr); err != nil {
			return fmt.Errorf("traj: close stream: %w", err)
		}
	}
	return nil
}
