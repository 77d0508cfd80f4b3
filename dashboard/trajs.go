package dashboard

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/traj"
)

// trajSummary is what the index keeps of one record: where it is and what the filters need.
type trajSummary struct {
	I      int     `json:"i"`
	Offset int64   `json:"offset"`
	ID     string  `json:"id"`
	Env    string  `json:"env"`
	Phase  string  `json:"phase"`
	Step   int     `json:"step"`
	Seed   int64   `json:"seed"`
	Group  uint64  `json:"group"`
	Status string  `json:"status"`
	Reward float64 `json:"reward"`
	Turns  int     `json:"turns"`
	Tokens int     `json:"tokens"`
	Calls  int     `json:"tool_calls"`
}

// trajIndex is the offsets and summaries of a trajectory stream's records, extended as the file
// grows. The records themselves are read one at a time when asked for.
type trajIndex struct {
	path string

	mu      sync.Mutex
	hdr     []byte // the stream header, once read
	end     int64  // file offset up to which records are indexed
	items   []trajSummary
	damage  []traj.Damage
	lastErr string
	tok     *tokenizer.Tokenizer
	tokErr  error
	tokOnce sync.Once
}

func newTrajIndex(path string) *trajIndex { return &trajIndex{path: path} }

// spliced is the stream header followed by the file from off: a seekable stream that a
// traj.Reader can start on in the middle of a file, resynchronization included.
type spliced struct {
	hdr []byte
	f   *os.File
	off int64
	pos int64
}

func (s *spliced) Read(p []byte) (int, error) {
	if s.pos < int64(len(s.hdr)) {
		n := copy(p, s.hdr[s.pos:])
		s.pos += int64(n)
		return n, nil
	}
	n, err := s.f.ReadAt(p, s.off+s.pos-int64(len(s.hdr)))
	s.pos += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

func (s *spliced) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		off += s.pos
	default:
		return 0, errors.New("dashboard: unsupported seek")
	}
	if off < 0 {
		return 0, errors.New("dashboard: negative seek")
	}
	s.pos = off
	return off, nil
}

// fileOffset turns a reader offset (which counts the header) into the file's.
func (s *spliced) fileOffset(readerOff int64) int64 {
	return s.off + readerOff - int64(len(s.hdr))
}

// refresh indexes the records appended since the last call. A torn last record (a writer in the
// middle of writing it) is left for the next call; damage before the end is skipped and reported.
func (x *trajIndex) refresh() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	f, err := os.Open(x.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if x.hdr == nil {
		if st.Size() < traj.StreamHeaderLen {
			return nil
		}
		hdr := make([]byte, traj.StreamHeaderLen)
		if _, err := f.ReadAt(hdr, 0); err != nil {
			return err
		}
		x.hdr, x.end = hdr, traj.StreamHeaderLen
	}
	if st.Size() < x.end { // cut back (a resumed run): index again
		x.items, x.damage, x.end = nil, nil, traj.StreamHeaderLen
	}
	if st.Size() == x.end {
		return nil
	}
	src := &spliced{hdr: x.hdr, f: f, off: x.end}
	r, err := traj.NewReader(src)
	if err != nil {
		return err
	}
	defer r.Close()
	var skipped int64 = -1
	if err := r.Resync(func(d traj.Damage) {
		d.Offset = src.fileOffset(d.Offset)
		x.damage = append(x.damage, d)
		skipped = d.Offset + d.Bytes
	}); err != nil {
		return err
	}
	for {
		start := src.fileOffset(r.Offset())
		skipped = -1
		t, err := r.Read()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, traj.ErrTornTail) {
				x.lastErr = err.Error()
			}
			break
		}
		if skipped >= 0 {
			start = skipped
		}
		x.items = append(x.items, summarize(len(x.items), start, t))
		x.end = src.fileOffset(r.Offset())
	}
	return nil
}

func summarize(i int, off int64, t *traj.Trajectory) trajSummary {
	s := trajSummary{I: i, Offset: off, ID: t.ID, Env: t.Env, Seed: t.TaskSeed, Group: t.GroupID,
		Status: t.Status.String(), Reward: t.Reward, Turns: len(t.Turns), Tokens: len(t.Tokens)}
	for _, kv := range t.Meta {
		switch kv.Key {
		case "phase":
			s.Phase = kv.Value
		case "step":
			s.Step, _ = strconv.Atoi(kv.Value)
		}
	}
	for _, tu := range t.Turns {
		s.Calls += len(tu.ToolCalls)
	}
	return s
}

// trajFilter selects records; zero fields select everything.
type trajFilter struct {
	Phase, Env, Status string
	Step               int // 0: any
	MinReward          *float64
	MaxReward          *float64
}

func (f trajFilter) match(s *trajSummary) bool {
	return (f.Phase == "" || s.Phase == f.Phase) && (f.Env == "" || s.Env == f.Env) &&
		(f.Status == "" || s.Status == f.Status) && (f.Step == 0 || s.Step == f.Step) &&
		(f.MinReward == nil || s.Reward >= *f.MinReward) && (f.MaxReward == nil || s.Reward <= *f.MaxReward)
}

// trajPage is one page of the records a filter selects.
type trajPage struct {
	Total   int           `json:"total"`   // records indexed
	Matched int           `json:"matched"` // records the filter selects
	Offset  int           `json:"offset"`
	Items   []trajSummary `json:"items"`
	Damage  []string      `json:"damage,omitempty"`
	Error   string        `json:"error,omitempty"`
	Envs    []string      `json:"envs"`
	Phases  []string      `json:"phases"`
}

func (x *trajIndex) page(f trajFilter, offset, limit int) trajPage {
	x.mu.Lock()
	defer x.mu.Unlock()
	p := trajPage{Total: len(x.items), Offset: offset, Items: []trajSummary{}, Error: x.lastErr}
	envs, phases := map[string]bool{}, map[string]bool{}
	for i := range x.items {
		s := &x.items[i]
		if !envs[s.Env] {
			envs[s.Env] = true
			p.Envs = append(p.Envs, s.Env)
		}
		if !phases[s.Phase] {
			phases[s.Phase] = true
			p.Phases = append(p.Phases, s.Phase)
		}
		if !f.match(s) {
			continue
		}
		if p.Matched >= offset && len(p.Items) < limit {
			p.Items = append(p.Items, *s)
		}
		p.Matched++
	}
	for _, d := range x.damage {
		p.Damage = append(p.Damage, d.String())
	}
	return p
}

// read returns record i, read from its offset alone.
func (x *trajIndex) read(i int) (*traj.Trajectory, error) {
	x.mu.Lock()
	if i < 0 || i >= len(x.items) {
		x.mu.Unlock()
		return nil, fmt.Errorf("no trajectory %d (%d indexed)", i, len(x.items))
	}
	off, hdr := x.items[i].Offset, x.hdr
	x.mu.Unlock()
	f, err := os.Open(x.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := traj.NewReader(&spliced{hdr: hdr, f: f, off: off})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Read()
}

// tokenizer loads the run's tokenizer (its tokenizer/ folder) once; nil when there is none, and
// tokens are then shown as ids.
func (x *trajIndex) tokenizer() *tokenizer.Tokenizer {
	x.tokOnce.Do(func() {
		x.tok, x.tokErr = tokenizer.Load(filepath.Join(filepath.Dir(x.path), "tokenizer"))
	})
	return x.tok
}

// tokenView is one token as the trajectory view draws it.
type tokenView struct {
	Text    string  `json:"t"`
	Role    string  `json:"r"`
	Trained bool    `json:"m"`
	Logprob float32 `json:"lp"`
	Version int32   `json:"v"`
}

// trajView is one trajectory for the page: its tokens and its turns.
type trajView struct {
	Summary trajSummary `json:"summary"`
	Error   string      `json:"error,omitempty"`
	Tokens  []tokenView `json:"tokens"`
	Turns   []traj.Turn `json:"turns"`
	Meta    []traj.KV   `json:"meta"`
	// Samples are the first tokens of the episode's training samples after its first (a fold's
	// context, a template split, a sub-episode's tokens): the page draws the episode as the tree
	// of its samples and sub-episodes (the "sub_episode" meta entries).
	Samples []int `json:"samples"`
	Decoded bool  `json:"decoded"` // false: no tokenizer, token ids shown
}

func (x *trajIndex) view(i int) (trajView, error) {
	t, err := x.read(i)
	if err != nil {
		return trajView{}, err
	}
	x.mu.Lock()
	sum := x.items[i]
	x.mu.Unlock()
	v := trajView{Summary: sum, Error: t.Error, Turns: t.Turns, Meta: t.Meta, Samples: t.Samples, Tokens: make([]tokenView, len(t.Tokens))}
	if v.Samples == nil {
		v.Samples = []int{}
	}
	tok := x.tokenizer()
	v.Decoded = tok != nil
	for j, id := range t.Tokens {
		lp := t.Logprobs[j]
		if lp != lp || lp > 0 || lp < -1e30 { // NaN or out of range: JSON has no NaN
			lp = 0
		}
		tv := tokenView{Role: t.Roles[j].String(), Trained: t.LossMask[j], Logprob: lp, Version: t.Versions[j]}
		if tok != nil {
			tv.Text = tok.Decode([]int32{id})
		} else {
			tv.Text = "#" + strconv.Itoa(int(id)) + " "
		}
		v.Tokens[j] = tv
	}
	return v, nil
}
