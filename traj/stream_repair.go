package traj

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// Repaired reports what Repair did to a stream file.
type Repaired struct {
	Records   int      // intact records kept
	Damage    []Damage // stretches dropped, in file order
	Torn      int64    // bytes of a torn final record dropped (0 if none)
	Backup    string   // where the original file was moved ("" when nothing changed)
	Unchanged bool     // the file had no damage and was left as it was
}

// Dropped is the number of bytes the repair dropped.
func (r Repaired) Dropped() int64 {
	n := r.Torn
	for _, d := range r.Damage {
		n += d.Bytes
	}
	return n
}

// Repair rewrites the stream file at path with only its intact records, byte for byte as they
// were (read as Reader.Resync reads them: each record's checksums must hold and it must decode).
// The original file is kept, renamed to backup (path + ".damaged" when backup is ""); the new
// file is written beside it, synced and renamed onto path, so a crash during Repair leaves
// either the old file or the new one. A file with no damage and no torn tail is left untouched.
// A file whose stream header is unreadable cannot be repaired: there is no format to keep.
func Repair(path, backup string) (Repaired, error) {
	var rep Repaired
	if backup == "" {
		backup = path + ".damaged"
	}
	src, err := os.Open(path)
	if err != nil {
		return rep, fmt.Errorf("traj: repair: %w", err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return rep, fmt.Errorf("traj: repair: %w", err)
	}
	r, err := NewReader(src)
	if err != nil {
		return rep, fmt.Errorf("traj: repair %s: %w", path, err)
	}
	defer r.Close()
	if err := r.Resync(func(d Damage) { rep.Damage = append(rep.Damage, d) }); err != nil {
		return rep, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".repair-*")
	if err != nil {
		return rep, fmt.Errorf("traj: repair: %w", err)
	}
	defer func() {
		if tmp != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	hdr := []byte{streamMagic[0], streamMagic[1], streamMagic[2], streamMagic[3], streamVersion, byte(r.format), byte(r.comp), 0}
	if _, err := tmp.Write(hdr); err != nil {
		return rep, fmt.Errorf("traj: repair: %w", err)
	}
	var frame [frameHeaderLen]byte
	for {
		_, err := r.Read()
		if err == io.EOF {
			break
		}
		if errors.Is(err, ErrTornTail) {
			rep.Torn = st.Size() - r.Offset()
			break
		}
		if err != nil {
			return rep, fmt.Errorf("traj: repair %s: %w", path, err)
		}
		// r.payload is the record just read, as it was in the file.
		binary.LittleEndian.PutUint32(frame[0:], uint32(len(r.payload)))
		binary.LittleEndian.PutUint32(frame[4:], crc32.Checksum(r.payload, castagnoli))
		binary.LittleEndian.PutUint32(frame[8:], crc32.Checksum(frame[:8], castagnoli))
		if _, err := tmp.Write(frame[:]); err != nil {
			return rep, fmt.Errorf("traj: repair: %w", err)
		}
		if _, err := tmp.Write(r.payload); err != nil {
			return rep, fmt.Errorf("traj: repair: %w", err)
		}
	}
	rep.Records = r.Records()
	if len(rep.Damage) == 0 && rep.Torn == 0 {
		rep.Unchanged = true
		return rep, nil
	}
	if err := tmp.Chmod(st.Mode().Perm()); err != nil {
		return rep, fmt.Errorf("traj: repair: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return rep, fmt.Errorf("traj: repair: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return rep, fmt.Errorf("traj: repair: %w", err)
	}
	name := tmp.Name()
	tmp = nil
	if err := os.Link(path, backup); err != nil {
		os.Remove(name)
		return rep, fmt.Errorf("traj: repair: keep the original as %s: %w", backup, err)
	}
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return rep, fmt.Errorf("traj: repair: %w", err)
	}
	rep.Backup = backup
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return rep, nil
}
