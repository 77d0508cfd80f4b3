package traj

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Damage is a stretch of a stream that a resynchronizing Reader stepped over: from Offset (the
// end of the last intact record before it) up to the next intact record, or to the end.
type Damage struct {
	Offset int64 // where the damage begins
	Bytes  int64 // how many bytes were skipped
	Cause  error // what failed first (wraps ErrCorrupt)
}

func (d Damage) String() string {
	return fmt.Sprintf("%d bytes at offset %d (%v)", d.Bytes, d.Offset, d.Cause)
}

// Resync makes the Reader skip damage instead of stopping at it: a record whose checksums hold
// but which does not decode is skipped whole; after any other failure (a frame header or a
// payload that fails its checksum: bytes flipped, inserted or cut out) the reader scans forward
// byte by byte for the next frame whose header and payload checksums both hold (the format has
// no sync marker; a false match needs two 32-bit checksums to agree by chance) and goes on from
// there. A damaged payload is not skipped by its header's length, which bytes cut from or
// inserted into it would make point into the middle of the next record. Each skipped stretch is passed to report. Read then never returns
// ErrCorrupt: it returns intact records, io.EOF at the end, or ErrTornTail when the stream
// ends in a torn record (as a killed writer leaves it). Offset and Records still describe the
// intact records read.
//
// The stream must be seekable (an io.ReadSeeker passed to NewReader, such as an *os.File), and
// Resync must be called before the first Read.
func (r *Reader) Resync(report func(Damage)) error {
	rs, ok := r.src.(io.ReadSeeker)
	if !ok {
		return errors.New("traj: resynchronizing needs a seekable stream")
	}
	if r.records > 0 || r.offset != StreamHeaderLen || r.err != nil {
		return errors.New("traj: Resync must be called before the first Read")
	}
	pos, err := rs.Seek(0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("traj: resync: %w", err)
	}
	r.base = pos - int64(r.br.Buffered()) - StreamHeaderLen
	if report == nil {
		report = func(Damage) {}
	}
	r.resync = report
	return nil
}

// skipDamage steps over the damage that made next fail with cause, reports it, and reads the
// record after it.
func (r *Reader) skipDamage(cause error) (*Trajectory, error) {
	start := r.offset
	var resume int64
	if r.frameLen > 0 {
		resume = start + r.frameLen
	} else {
		var err error
		if resume, err = r.scan(start + 1); err != nil {
			return nil, err
		}
	}
	if err := r.seek(resume); err != nil {
		return nil, err
	}
	r.resync(Damage{Offset: start, Bytes: resume - start, Cause: cause})
	r.offset = resume
	return r.next()
}

// seek moves the reader to stream offset off.
func (r *Reader) seek(off int64) error {
	if _, err := r.src.(io.Seeker).Seek(r.base+off, io.SeekStart); err != nil {
		return fmt.Errorf("traj: resync: %w", err)
	}
	r.br.Reset(r.src)
	return nil
}

// scan returns the offset of the first intact frame at or after from, or the stream's length
// when there is none.
func (r *Reader) scan(from int64) (int64, error) {
	if err := r.seek(from); err != nil {
		return 0, err
	}
	pos := from
	for {
		hdr, err := r.br.Peek(frameHeaderLen)
		if len(hdr) < frameHeaderLen {
			if err != nil && err != io.EOF {
				return 0, fmt.Errorf("traj: resync at offset %d: %w", pos, err)
			}
			return pos + int64(len(hdr)), nil
		}
		if crc32.Checksum(hdr[:8], castagnoli) == binary.LittleEndian.Uint32(hdr[8:]) {
			size := binary.LittleEndian.Uint32(hdr[0:])
			sum := binary.LittleEndian.Uint32(hdr[4:])
			if size <= MaxRecordBytes {
				ok, err := r.payloadMatches(pos, size, sum)
				if err != nil {
					return 0, err
				}
				if ok {
					return pos, nil
				}
				if err := r.seek(pos + 1); err != nil {
					return 0, err
				}
				pos++
				continue
			}
		}
		if _, err := r.br.Discard(1); err != nil {
			return 0, fmt.Errorf("traj: resync at offset %d: %w", pos, err)
		}
		pos++
	}
}

// payloadMatches reads the size bytes after the frame header at pos and checks them against sum.
// It leaves the reader at an unspecified position.
func (r *Reader) payloadMatches(pos int64, size, sum uint32) (bool, error) {
	if err := r.seek(pos + frameHeaderLen); err != nil {
		return false, err
	}
	r.payload = r.payload[:0]
	if _, err := readAppend(r.br, &r.payload, int(size)); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
			return false, nil
		}
		return false, fmt.Errorf("traj: resync at offset %d: %w", pos, err)
	}
	return crc32.Checksum(r.payload, castagnoli) == sum, nil
}
