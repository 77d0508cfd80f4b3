package traj

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// readResync reads b with a resynchronizing Reader.
func readResync(t testing.TB, b []byte) ([]*Trajectory, []Damage, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	var ds []Damage
	if err := r.Resync(func(d Damage) { ds = append(ds, d) }); err != nil {
		t.Fatal(err)
	}
	var out []*Trajectory
	for tr, err := range r.All() {
		if err != nil {
			return out, ds, err
		}
		out = append(out, tr)
	}
	return out, ds, nil
}

func pick(ts []*Trajectory, idx ...int) []*Trajectory {
	out := make([]*Trajectory, len(idx))
	for i, j := range idx {
		out[i] = ts[j]
	}
	return out
}

// One bad record no longer hides the records after it: a resynchronizing reader skips the
// damage, reports where it was and how long, and reads on.
func TestStreamResync(t *testing.T) {
	ts := sampleTrajectories(6)
	for _, opts := range streamOptions {
		b, ends := writeStream(t, opts, ts)
		garbage := bytes.Repeat([]byte{0xA5, 0x17, 0x00, 0x42}, 33)
		for _, tc := range []struct {
			name   string
			damage func([]byte) []byte
			want   []int // indexes of the records read back
			bytes  int64 // total bytes reported skipped
		}{
			{"payload bit flip", func(b []byte) []byte { b[ends[2]+frameHeaderLen+3] ^= 0x10; return b }, []int{0, 1, 3, 4, 5}, ends[3] - ends[2]},
			{"length bit flip", func(b []byte) []byte { b[ends[2]+1] ^= 0x01; return b }, []int{0, 1, 3, 4, 5}, ends[3] - ends[2]},
			{"header checksum", func(b []byte) []byte { b[ends[2]+9] ^= 0xff; return b }, []int{0, 1, 3, 4, 5}, ends[3] - ends[2]},
			{"garbage between records", func(b []byte) []byte {
				return append(append(bytes.Clone(b[:ends[3]]), garbage...), b[ends[3]:]...)
			}, []int{0, 1, 2, 3, 4, 5}, int64(len(garbage))},
			{"two records overwritten", func(b []byte) []byte {
				copy(b[ends[1]+5:ends[3]+7], bytes.Repeat([]byte{0x5a}, int(ends[3]+2-ends[1])))
				return b
			}, []int{0, 4, 5}, ends[4] - ends[1]},
			{"first and last damaged", func(b []byte) []byte {
				b[ends[0]+2] ^= 0x80
				b[ends[5]+frameHeaderLen+1] ^= 0x80
				return append(b, garbage...) // so the last record is not a torn tail
			}, []int{1, 2, 3, 4}, ends[1] - ends[0] + ends[6] - ends[5] + int64(len(garbage))},
			{"garbage at the end", func(b []byte) []byte { return append(b, garbage...) }, []int{0, 1, 2, 3, 4, 5}, int64(len(garbage))},
		} {
			t.Run(optName(opts)+"/"+tc.name, func(t *testing.T) {
				damaged := tc.damage(bytes.Clone(b))
				if _, _, err := readAll(damaged); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("a plain reader should stop at the damage: %v", err)
				}
				got, ds, err := readResync(t, damaged)
				if err != nil {
					t.Fatalf("resync read: %v", err)
				}
				want := pick(ts, tc.want...)
				if len(got) != len(want) {
					t.Fatalf("read %d records, want %d (damage %v)", len(got), len(want), ds)
				}
				for i := range want {
					if !Equal(got[i], want[i]) {
						t.Fatalf("record %d differs", i)
					}
				}
				var skipped int64
				last := int64(0)
				for _, d := range ds {
					if d.Offset < last || d.Bytes <= 0 || !errors.Is(d.Cause, ErrCorrupt) {
						t.Fatalf("bad damage report %v", d)
					}
					last = d.Offset + d.Bytes
					skipped += d.Bytes
				}
				if skipped != tc.bytes {
					t.Fatalf("reported %d bytes skipped (%v), want %d", skipped, ds, tc.bytes)
				}
			})
		}
		// A torn tail after damage is still a torn tail.
		damaged := bytes.Clone(b[:len(b)-4])
		damaged[ends[1]+frameHeaderLen] ^= 1
		got, ds, err := readResync(t, damaged)
		if !isTorn(err) || len(got) != 4 || len(ds) != 1 {
			t.Fatalf("%s: damage then torn tail: %d records, %v, %v", optName(opts), len(got), ds, err)
		}
	}
}

func TestResyncNeedsSeekableStream(t *testing.T) {
	b, _ := writeStream(t, WriterOptions{}, sampleTrajectories(2))
	r, err := NewReader(io.MultiReader(bytes.NewReader(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Resync(nil); err == nil {
		t.Fatal("Resync accepted a stream it cannot seek")
	}
	r, _ = NewReader(bytes.NewReader(b))
	r.Read()
	if err := r.Resync(nil); err == nil {
		t.Fatal("Resync accepted after a Read")
	}
}

// Repair keeps every intact record byte for byte, drops the damage and the torn tail, keeps the
// original as a backup and leaves a file that reads (and appends) cleanly.
func TestRepair(t *testing.T) {
	ts := sampleTrajectories(6)
	for _, opts := range streamOptions {
		b, ends := writeStream(t, opts, ts)
		damaged := bytes.Clone(b[:len(b)-3])
		damaged[ends[2]+frameHeaderLen+5] ^= 0x40
		path := filepath.Join(t.TempDir(), "trajectories.atrs")
		if err := os.WriteFile(path, damaged, 0o644); err != nil {
			t.Fatal(err)
		}
		rep, err := Repair(path, "")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Records != 4 || len(rep.Damage) != 1 || rep.Torn != ends[6]-ends[5]-3 || rep.Unchanged || rep.Backup != path+".damaged" {
			t.Fatalf("%s: %+v", optName(opts), rep)
		}
		if rep.Dropped() != int64(len(damaged))-(ends[5]-ends[3]+ends[2]) {
			t.Fatalf("dropped %d bytes", rep.Dropped())
		}
		if orig, err := os.ReadFile(rep.Backup); err != nil || !bytes.Equal(orig, damaged) {
			t.Fatalf("backup: %v", err)
		}
		fixed, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		wantBytes := append(bytes.Clone(b[:ends[2]]), b[ends[3]:ends[5]]...)
		if !bytes.Equal(fixed, wantBytes) {
			t.Fatalf("%s: repaired file is not the intact records byte for byte", optName(opts))
		}
		again, err := Repair(path, "")
		if err != nil || !again.Unchanged {
			t.Fatalf("second repair: %+v, %v", again, err)
		}
		w, rec, err := OpenFile(path, opts)
		if err != nil || rec.Records != 4 || rec.Truncated != 0 {
			t.Fatalf("open repaired: %+v %v", rec, err)
		}
		w.Close()
	}
	if _, err := Repair(filepath.Join(t.TempDir(), "none.atrs"), ""); err == nil {
		t.Fatal("repaired a missing file")
	}
}
