package traj

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"iter"
)

// Reader reads a stream written by Writer. It is not safe for concurrent use.
type Reader struct {
	br      *bufio.Reader
	format  Format
	comp    Compression
	dec     *decompressor
	payload []byte
	plain   []byte
	offset  int64 // end of the last good record
	records int
	err     error // sticky
	skip    bool  // verify frames without decoding trajectories (OpenFile's scan)

	src      io.Reader    // what br reads; an io.ReadSeeker makes Resync possible
	base     int64        // src's position of the stream's first byte (set by Resync)
	resync   func(Damage) // non-nil: skip damage and report it here
	frameLen int64        // length of the frame that failed to decode with both checksums intact (else 0)
}

// NewReader reads and checks the stream header. A stream shorter than its header is ErrTornTail
// (a writer killed before its first write completed); a wrong magic, version, format or
// compression is an error.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var hdr [StreamHeaderLen]byte
	n, err := io.ReadFull(br, hdr[:])
	switch {
	case err == io.EOF:
		return nil, fmt.Errorf("traj: empty stream: %w", ErrTornTail)
	case errors.Is(err, io.ErrUnexpectedEOF):
		if string(hdr[:min(n, 4)]) != streamMagic[:min(n, 4)] {
			return nil, errors.New("traj: not a trajectory stream (bad magic)")
		}
		return nil, fmt.Errorf("traj: stream header has %d of %d bytes: %w", n, StreamHeaderLen, ErrTornTail)
	case err != nil:
		return nil, fmt.Errorf("traj: read stream header: %w", err)
	}
	if string(hdr[:4]) != streamMagic {
		return nil, errors.New("traj: not a trajectory stream (bad magic)")
	}
	if hdr[4] != streamVersion {
		return nil, fmt.Errorf("traj: unknown stream version %d (this build reads %d)", hdr[4], streamVersion)
	}
	opts, err := WriterOptions{Format: Format(hdr[5]), Compression: Compression(hdr[6])}.withDefaults()
	if err != nil || hdr[5] == 0 || hdr[7] != 0 {
		return nil, fmt.Errorf("traj: unsupported stream header % x", hdr)
	}
	dec, err := newDecompressor(opts.Compression)
	if err != nil {
		return nil, err
	}
	return &Reader{br: br, src: r, format: opts.Format, comp: opts.Compression, dec: dec, offset: StreamHeaderLen}, nil
}

// Format is the stream's record format.
func (r *Reader) Format() Format { return r.format }

// Compression is the stream's record compression.
func (r *Reader) Compression() Compression { return r.comp }

// Offset is the byte offset just past the last record read intact (StreamHeaderLen before any).
// After ErrTornTail it is where to truncate the file to resume appending.
func (r *Reader) Offset() int64 { return r.offset }

// Records is the number of records read intact.
func (r *Reader) Records() int { return r.records }

// Read returns the next trajectory; io.EOF at a clean end, an error wrapping ErrTornTail when the
// stream ends inside a record, and one wrapping ErrCorrupt for damage before the end. Errors are
// sticky.
func (r *Reader) Read() (*Trajectory, error) {
	if r.err != nil {
		return nil, r.err
	}
	t, err := r.next()
	for err != nil && r.resync != nil && errors.Is(err, ErrCorrupt) {
		t, err = r.skipDamage(err)
	}
	if err != nil {
		r.err = err
		return nil, err
	}
	r.records++
	return t, nil
}

// All iterates over the remaining trajectories; it stops after yielding the first error other
// than io.EOF.
func (r *Reader) All() iter.Seq2[*Trajectory, error] {
	return func(yield func(*Trajectory, error) bool) {
		for {
			t, err := r.Read()
			if err == io.EOF {
				return
			}
			if !yield(t, err) || err != nil {
				return
			}
		}
	}
}

// Close releases the decompressor. It does not close the underlying reader.
func (r *Reader) Close() error {
	if r.dec != nil {
		r.dec.close()
		r.dec = nil
	}
	if r.err == nil {
		r.err = errors.New("traj: reader is closed")
	}
	return nil
}

func (r *Reader) next() (*Trajectory, error) {
	r.frameLen = 0
	var hdr [frameHeaderLen]byte
	n, err := io.ReadFull(r.br, hdr[:])
	switch {
	case err == io.EOF:
		return nil, io.EOF
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, r.fail(ErrTornTail, "frame header has %d of %d bytes", n, frameHeaderLen)
	case err != nil:
		return nil, fmt.Errorf("traj: read record %d at offset %d: %w", r.records, r.offset, err)
	}
	if crc32.Checksum(hdr[:8], castagnoli) != binary.LittleEndian.Uint32(hdr[8:]) {
		if allZero(hdr[:]) && r.restIsZero() {
			return nil, r.fail(ErrTornTail, "the stream ends in zero bytes")
		}
		return nil, r.fail(ErrCorrupt, "frame header checksum mismatch")
	}
	size := binary.LittleEndian.Uint32(hdr[0:])
	if size > MaxRecordBytes {
		return nil, r.fail(ErrCorrupt, "record length %d exceeds %d", size, MaxRecordBytes)
	}
	// Grow by reading rather than trusting size up front: the header checksum makes a bad size
	// unlikely, but a hostile file could still claim 256 MiB and hold a few bytes.
	r.payload = r.payload[:0]
	got, err := readAppend(r.br, &r.payload, int(size))
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
			return nil, r.fail(ErrTornTail, "payload has %d of %d bytes", got, size)
		}
		return nil, fmt.Errorf("traj: read record %d at offset %d: %w", r.records, r.offset, err)
	}
	if crc32.Checksum(r.payload, castagnoli) != binary.LittleEndian.Uint32(hdr[4:]) {
		if _, perr := r.br.Peek(1); perr == io.EOF {
			return nil, r.fail(ErrTornTail, "last record's payload checksum mismatch")
		}
		if allZero(r.payload) && r.restIsZero() {
			return nil, r.fail(ErrTornTail, "the last record's payload and what follows are zero bytes")
		}
		return nil, r.fail(ErrCorrupt, "payload checksum mismatch")
	}
	var t *Trajectory
	if !r.skip {
		if t, err = r.decode(); err != nil {
			r.frameLen = frameHeaderLen + int64(size)
			return nil, r.fail(ErrCorrupt, "%v", err)
		}
	}
	r.offset += frameHeaderLen + int64(size)
	return t, nil
}

func (r *Reader) decode() (*Trajectory, error) {
	if r.dec == nil {
		return nil, errors.New("reader is closed")
	}
	plain, err := r.dec.decompress(r.plain[:0], r.payload)
	if err != nil {
		return nil, fmt.Errorf("decompress: %w", err)
	}
	r.plain = plain
	t := new(Trajectory)
	if r.format == FormatJSON {
		err = t.UnmarshalJSON(plain)
	} else {
		err = t.UnmarshalBinary(plain)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// restIsZero reports whether everything left in the stream is zero bytes. A machine that loses
// power can leave a file whose length was extended before its data reached the disk: the tail
// reads as zeros. Like a record cut short by a killed writer, that is a torn tail, not damage;
// zeros followed by anything else are not. It consumes the stream, so only a failing read calls it.
func (r *Reader) restIsZero() bool {
	var buf [32 << 10]byte
	for {
		n, err := r.br.Read(buf[:])
		if !allZero(buf[:n]) {
			return false
		}
		if err == io.EOF {
			return true
		}
		if err != nil {
			return false
		}
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// fail wraps sentinel with the record's position.
func (r *Reader) fail(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: record %d at offset %d: %s", sentinel, r.records, r.offset, fmt.Sprintf(format, args...))
}

// readAppend reads exactly n bytes into *buf, growing it in chunks of at most 1 MiB.
func readAppend(r io.Reader, buf *[]byte, n int) (int, error) {
	const chunk = 1 << 20
	got := 0
	for got < n {
		step := min(n-got, chunk)
		b := *buf
		if cap(b)-len(b) < step {
			nb := make([]byte, len(b), len(b)+max(step, len(b)))
			copy(nb, b)
			b = nb
		}
		k, err := io.ReadFull(r, b[len(b):len(b)+step])
		*buf = b[:len(b)+k]
		got += k
		if err != nil {
			return got, err
		}
	}
	return got, nil
}
