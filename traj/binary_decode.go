package traj

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// UnmarshalBinary parses the binary form written by AppendBinary, replacing all of *t. Wrong
// magic, an unknown version, truncation, trailing bytes, out-of-range values and structurally
// invalid trajectories are errors.
func (t *Trajectory) UnmarshalBinary(data []byte) error {
	out, err := decodeBinary(data)
	if err != nil {
		return fmt.Errorf("traj: decode binary: %w", err)
	}
	*t = out
	return nil
}

var errTruncated = errors.New("truncated input")

// bin reads the binary form; every method checks bounds against the bytes left.
type bin struct {
	b   []byte
	off int
}

func (r *bin) left() int { return len(r.b) - r.off }

func (r *bin) byte1(what string) (byte, error) {
	if r.off >= len(r.b) {
		return 0, fmt.Errorf("%s: %w", what, errTruncated)
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *bin) uvarint(what string) (uint64, error) {
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		if n == 0 {
			return 0, fmt.Errorf("%s at byte %d: %w", what, r.off, errTruncated)
		}
		return 0, fmt.Errorf("%s at byte %d: varint overflows 64 bits", what, r.off)
	}
	r.off += n
	return v, nil
}

func (r *bin) varint(what string) (int64, error) {
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		if n == 0 {
			return 0, fmt.Errorf("%s at byte %d: %w", what, r.off, errTruncated)
		}
		return 0, fmt.Errorf("%s at byte %d: varint overflows 64 bits", what, r.off)
	}
	r.off += n
	return v, nil
}

// count reads a length whose items take at least minBytes each, so it cannot exceed what is left.
func (r *bin) count(what string, minBytes int) (int, error) {
	v, err := r.uvarint(what)
	if err != nil {
		return 0, err
	}
	if v > uint64(r.left()/minBytes) {
		return 0, fmt.Errorf("%s %d at byte %d exceeds the %d bytes left: %w", what, v, r.off, r.left(), errTruncated)
	}
	return int(v), nil
}

func (r *bin) str(what string) (string, error) {
	n, err := r.count(what+" length", 1)
	if err != nil {
		return "", err
	}
	s := string(r.b[r.off : r.off+n])
	r.off += n
	return s, nil
}

func (r *bin) fixed64(what string) (uint64, error) {
	if r.left() < 8 {
		return 0, fmt.Errorf("%s: %w", what, errTruncated)
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v, nil
}

// run reads a run length that must be ≥ min and fit in the tokens not yet covered.
func (r *bin) run(what string, min, remaining int) (int, error) {
	v, err := r.uvarint(what)
	if err != nil {
		return 0, err
	}
	if v < uint64(min) || v > uint64(remaining) {
		return 0, fmt.Errorf("%s %d at byte %d: want %d..%d", what, v, r.off, min, remaining)
	}
	return int(v), nil
}

func decodeBinary(data []byte) (Trajectory, error) {
	var t Trajectory
	if len(data) < len(binaryMagic)+1 || string(data[:len(binaryMagic)]) != binaryMagic {
		return t, errors.New("not a binary trajectory (bad magic)")
	}
	v := data[len(binaryMagic)]
	if v != binaryVersion1 && v != BinaryVersion {
		return t, fmt.Errorf("unknown format version %d (this build reads %d and %d)", v, binaryVersion1, BinaryVersion)
	}
	r := &bin{b: data, off: len(binaryMagic) + 1}
	var err error
	if t.ID, err = r.str("id"); err != nil {
		return t, err
	}
	if t.Env, err = r.str("env"); err != nil {
		return t, err
	}
	if t.TaskSeed, err = r.varint("task_seed"); err != nil {
		return t, err
	}
	if t.GroupID, err = r.uvarint("group_id"); err != nil {
		return t, err
	}
	n, err := r.count("token count", 1)
	if err != nil {
		return t, err
	}
	if err := r.tokens(&t, n); err != nil {
		return t, err
	}
	if err := r.turns(&t); err != nil {
		return t, err
	}
	if v == BinaryVersion {
		if err := r.samples(&t); err != nil {
			return t, err
		}
	}
	rw, err := r.fixed64("reward")
	if err != nil {
		return t, err
	}
	t.Reward = math.Float64frombits(rw)
	st, err := r.byte1("status")
	if err != nil {
		return t, err
	}
	t.Status = Status(st)
	if t.Error, err = r.str("error"); err != nil {
		return t, err
	}
	var ns [4]int64
	for i := range ns {
		if ns[i], err = r.varint("timings"); err != nil {
			return t, err
		}
	}
	t.Timings = Timings{Generate: time.Duration(ns[0]), Env: time.Duration(ns[1]),
		Tokenize: time.Duration(ns[2]), Total: time.Duration(ns[3])}
	nm, err := r.count("meta count", 2)
	if err != nil {
		return t, err
	}
	if nm > 0 {
		t.Meta = make([]KV, nm)
		for i := range t.Meta {
			if t.Meta[i].Key, err = r.str("meta key"); err != nil {
				return t, err
			}
			if t.Meta[i].Value, err = r.str("meta value"); err != nil {
				return t, err
			}
		}
	}
	if r.left() != 0 {
		return t, fmt.Errorf("%d trailing bytes after the trajectory", r.left())
	}
	return t, t.Validate()
}

// tokens reads the five per-token columns.
func (r *bin) tokens(t *Trajectory, n int) error {
	if n == 0 {
		return nil
	}
	t.Tokens = make([]int32, n)
	for i := range t.Tokens {
		v, err := r.uvarint("token")
		if err != nil {
			return err
		}
		if v > math.MaxUint32 {
			return fmt.Errorf("token %d: id %d out of 32-bit range", i, v)
		}
		t.Tokens[i] = int32(uint32(v))
	}

	t.Roles = make([]Role, n)
	for i := 0; i < n; {
		role, err := r.byte1("role")
		if err != nil {
			return err
		}
		if !Role(role).Valid() {
			return fmt.Errorf("token %d: unknown role %d", i, role)
		}
		k, err := r.run("role run", 1, n-i)
		if err != nil {
			return err
		}
		for j := i; j < i+k; j++ {
			t.Roles[j] = Role(role)
		}
		i += k
	}

	t.LossMask = make([]bool, n)
	for i, set := 0, false; i < n; set = !set {
		min := 1
		if i == 0 && !set {
			min = 0
		}
		k, err := r.run("loss mask run", min, n-i)
		if err != nil {
			return err
		}
		for j := i; j < i+k; j++ {
			t.LossMask[j] = set
		}
		i += k
	}

	t.Logprobs = make([]float32, n)
	for i := 0; i < n; {
		zeros, err := r.run("logprob zero run", 0, n-i)
		if err != nil {
			return err
		}
		i += zeros
		lits, err := r.run("logprob literal run", 0, n-i)
		if err != nil {
			return err
		}
		if zeros+lits == 0 {
			return fmt.Errorf("token %d: empty logprob group", i)
		}
		if r.left() < 4*lits {
			return fmt.Errorf("logprob literals: %w", errTruncated)
		}
		for j := i; j < i+lits; j++ {
			t.Logprobs[j] = math.Float32frombits(binary.LittleEndian.Uint32(r.b[r.off:]))
			r.off += 4
		}
		i += lits
	}

	t.Versions = make([]int32, n)
	for i := 0; i < n; {
		v, err := r.varint("version")
		if err != nil {
			return err
		}
		if v < math.MinInt32 || v > math.MaxInt32 {
			return fmt.Errorf("token %d: version %d out of int32 range", i, v)
		}
		k, err := r.run("version run", 1, n-i)
		if err != nil {
			return err
		}
		for j := i; j < i+k; j++ {
			t.Versions[j] = int32(v)
		}
		i += k
	}
	return nil
}

func (r *bin) turns(t *Trajectory) error {
	nt, err := r.count("turn count", 12)
	if err != nil {
		return err
	}
	if nt == 0 {
		return nil
	}
	n := uint64(len(t.Tokens))
	t.Turns = make([]Turn, nt)
	prevEnd := uint64(0)
	for i := range t.Turns {
		var d [3]uint64
		for k := range d {
			if d[k], err = r.uvarint("turn range"); err != nil {
				return err
			}
		}
		// Each step is checked before adding so the sums cannot wrap.
		start := prevEnd + min(d[0], n+1)
		end := start + min(d[1], n+1)
		obsEnd := end + min(d[2], n+1)
		if d[0] > n || d[1] > n || d[2] > n || obsEnd > n {
			return fmt.Errorf("turn %d: range past the %d tokens", i, n)
		}
		rw, err := r.fixed64("turn reward")
		if err != nil {
			return err
		}
		tu := Turn{Start: int(start), End: int(end), ObsEnd: int(obsEnd), Reward: math.Float64frombits(rw)}
		nc, err := r.count("tool call count", 4)
		if err != nil {
			return err
		}
		if nc > 0 {
			tu.ToolCalls = make([]ToolCall, nc)
			for j := range tu.ToolCalls {
				c := &tu.ToolCalls[j]
				for _, f := range []*string{&c.Name, &c.Arguments, &c.Result, &c.Error} {
					if *f, err = r.str("tool call"); err != nil {
						return err
					}
				}
			}
		}
		t.Turns[i] = tu
		prevEnd = obsEnd
	}
	return nil
}

// samples reads the sample starts of a version-2 record: at least one, each inside the tokens.
func (r *bin) samples(t *Trajectory) error {
	ns, err := r.count("sample count", 1)
	if err != nil {
		return err
	}
	if ns == 0 {
		return errors.New("a version 2 record must have at least two samples (version 1 holds one)")
	}
	n := len(t.Tokens)
	t.Samples = make([]int, ns)
	prev := 0
	for i := range t.Samples {
		d, err := r.uvarint("sample start")
		if err != nil {
			return err
		}
		if d == 0 || d >= uint64(n-prev) {
			return fmt.Errorf("sample %d: start %d tokens after the previous one is outside the %d tokens", i+1, d, n)
		}
		prev += int(d)
		t.Samples[i] = prev
	}
	return nil
}
