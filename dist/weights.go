package dist

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WeightsFile is the file of a published version that the pointer names.
const WeightsFile = "model.safetensors"

// PublishWeights publishes the checkpoint folder dir as policy version v of learner epoch epoch
// of run: every regular file of dir goes to the weights store as <run>/e<epoch>/v<version>/<file>,
// model.safetensors last, and then the pointer <run>.latest moves to it. A worker that sees the
// pointer finds every file. The store then keeps only this epoch's keep newest versions (keep ≤ 0:
// every version of this epoch); earlier epochs' weights are deleted, since no worker may use them
// any more.
func (c *Conn) PublishWeights(ctx context.Context, run string, epoch uint32, version int32, dir string, keep int) (Pointer, error) {
	if err := CheckRun(run); err != nil {
		return Pointer{}, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return Pointer{}, fmt.Errorf("dist: publish weights: %w", err)
	}
	p := Pointer{Epoch: epoch, Version: version, Files: map[string]string{}}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != WeightsFile {
			names = append(names, e.Name())
		}
	}
	names = append(names, WeightsFile) // last: its presence means the others are there
	var obs jetstream.ObjectStore
	for _, n := range names {
		obj := weightsObject(run, epoch, version, n)
		var sum string
		var size int64
		err := retryLearner(ctx, func(ctx context.Context) error {
			var err error
			if obs == nil {
				if obs, err = c.JS.ObjectStore(ctx, WeightsBucket); err != nil {
					return fmt.Errorf("dist: weights store: %w", err)
				}
			}
			sum, size, err = putFile(ctx, obs, obj, filepath.Join(dir, n))
			return err
		})
		if err != nil {
			return Pointer{}, err
		}
		if n == WeightsFile {
			p.Object, p.SHA256, p.Bytes = obj, sum, size
		} else {
			p.Files[n] = obj
		}
	}
	p.Created = time.Now().UTC()
	data, err := jsonMarshal(p)
	if err != nil {
		return Pointer{}, err
	}
	err = retryLearner(ctx, func(ctx context.Context) error {
		kv, err := c.JS.KeyValue(ctx, PolicyBucket)
		if err == nil {
			_, err = kv.Put(ctx, run+".latest", data)
		}
		return err
	})
	if err != nil {
		return Pointer{}, fmt.Errorf("dist: move policy pointer: %w", err)
	}
	c.pruneWeights(ctx, obs, run, epoch, version, keep)
	return p, nil
}

func weightsObject(run string, epoch uint32, version int32, file string) string {
	return fmt.Sprintf("%s/e%d/v%d/%s", run, epoch, version, file)
}

// pruneWeights deletes run's weights of earlier epochs, and of this epoch those older than the
// keep newest versions; a failure only leaves them in the store.
func (c *Conn) pruneWeights(ctx context.Context, obs jetstream.ObjectStore, run string, epoch uint32, version int32, keep int) {
	list, err := obs.List(ctx)
	if err != nil {
		return
	}
	for _, o := range list {
		rest, ok := strings.CutPrefix(o.Name, run+"/e")
		if !ok {
			continue
		}
		var e uint32
		var v int32
		if n, _ := fmt.Sscanf(rest, "%d/v%d/", &e, &v); n != 2 {
			continue
		}
		if e < epoch || e == epoch && keep > 0 && v <= version-int32(keep) {
			_ = obs.Delete(ctx, o.Name)
		}
	}
}

// NextEpoch takes a new learner epoch for run, greater than every epoch taken before on this
// server and than atLeast (what the learner's own records have seen), and returns it. A learner
// takes one each time it starts, before it publishes anything.
func (c *Conn) NextEpoch(ctx context.Context, run string, atLeast uint32) (uint32, error) {
	if err := CheckRun(run); err != nil {
		return 0, err
	}
	var next uint32
	err := retryLearner(ctx, func(ctx context.Context) error {
		var err error
		next, err = c.nextEpoch(ctx, run, atLeast)
		return err
	})
	return next, err
}

func (c *Conn) nextEpoch(ctx context.Context, run string, atLeast uint32) (uint32, error) {
	kv, err := c.JS.KeyValue(ctx, PolicyBucket)
	if err != nil {
		return 0, fmt.Errorf("dist: policy bucket: %w", err)
	}
	key := run + ".epoch"
	for {
		e, err := kv.Get(ctx, key)
		var prev uint32
		var rev uint64
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return 0, fmt.Errorf("dist: learner epoch: %w", err)
		default:
			n, perr := strconv.ParseUint(string(e.Value()), 10, 32)
			if perr != nil {
				return 0, fmt.Errorf("dist: learner epoch %q: %w", e.Value(), errors.Join(perr, errPermanent))
			}
			prev, rev = uint32(n), e.Revision()
		}
		// The pointer's epoch counts too (a bucket written before epochs were counted).
		if p, ok, err := c.Latest(ctx, run); err != nil {
			return 0, err
		} else if ok {
			prev = max(prev, p.Epoch)
		}
		next := max(prev, atLeast) + 1
		val := []byte(strconv.FormatUint(uint64(next), 10))
		if rev == 0 {
			_, err = kv.Create(ctx, key, val)
		} else {
			_, err = kv.Update(ctx, key, val, rev)
		}
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return 0, fmt.Errorf("dist: learner epoch: %w", err)
		}
		// Another learner took one meanwhile: read again.
	}
}

func putFile(ctx context.Context, obs jetstream.ObjectStore, name, path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("dist: publish weights: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	info, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: 1 << 20}}, io.TeeReader(f, h))
	if err != nil {
		return "", 0, fmt.Errorf("dist: put %s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), int64(info.Size), nil
}

// Latest reads run's policy pointer; ok is false when none was published yet.
func (c *Conn) Latest(ctx context.Context, run string) (p Pointer, ok bool, err error) {
	kv, err := c.JS.KeyValue(ctx, PolicyBucket)
	if err != nil {
		return Pointer{}, false, fmt.Errorf("dist: policy bucket: %w", err)
	}
	e, err := kv.Get(ctx, run+".latest")
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Pointer{}, false, nil
	}
	if err != nil {
		return Pointer{}, false, fmt.Errorf("dist: policy pointer: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return Pointer{}, false, fmt.Errorf("dist: policy pointer: %w", err)
	}
	return p, true, nil
}

// WatchPointer sends run's policy pointer each time it moves (the current one first, if any)
// until ctx ends; the channel is then closed. A slow reader sees only the newest pointer. The
// watch is made again after each reconnect (a restarted server forgets it), so a pointer may be
// sent again: compare with Pointer.After.
func (c *Conn) WatchPointer(ctx context.Context, run string) (<-chan Pointer, error) {
	kv, err := c.JS.KeyValue(ctx, PolicyBucket)
	if err != nil {
		return nil, fmt.Errorf("dist: policy bucket: %w", err)
	}
	reconnect := c.nextReconnect()
	w, stopW, err := watchBounded(ctx, kv, run+".latest")
	if err != nil {
		return nil, fmt.Errorf("dist: watch policy pointer: %w", err)
	}
	out := make(chan Pointer, 1)
	send := func(p Pointer) {
		select { // keep only the newest
		case <-out:
		default:
		}
		out <- p
	}
	go func() {
		defer close(out)
		for {
			// Follow w until ctx ends or the connection reconnects.
			again := false
			for !again {
				select {
				case <-ctx.Done():
					_ = w.Stop()
					stopW()
					return
				case <-reconnect:
					again = true
				case e, ok := <-w.Updates():
					if !ok {
						again = true
						break
					}
					if e == nil {
						continue // end of the initial values
					}
					var p Pointer
					if json.Unmarshal(e.Value(), &p) == nil {
						send(p)
					}
				}
			}
			_ = w.Stop()
			stopW()
			// Watch again, from the pointer's current value.
			for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
				reconnect = c.nextReconnect()
				var err error
				if w, stopW, err = watchBounded(ctx, kv, run+".latest"); err == nil {
					break
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		}
	}()
	return out, nil
}

// fetchRequestTimeout bounds each request a worker makes of the server to set up a watch or a
// download, and fetchMinRate the pace of a download. A request the server never answers (it
// stopped after receiving it: the client does not fail a request pending across a reconnect)
// would otherwise wait as long as the caller's context, for ever for a worker; with the bound
// the call fails and its caller tries again against the server as it is now.
const (
	fetchRequestTimeout = 10 * time.Second
	fetchMinRate        = 256 << 10 // bytes per second
)

// watchBounded starts a watch of key whose setup request answers within fetchRequestTimeout;
// stop ends the watch's context once the watcher is stopped.
func watchBounded(ctx context.Context, kv jetstream.KeyValue, key string) (w jetstream.KeyWatcher, stop func(), err error) {
	wctx, cancel := context.WithCancel(ctx)
	setup := time.AfterFunc(fetchRequestTimeout, cancel)
	w, err = kv.Watch(wctx, key, jetstream.IgnoreDeletes())
	if !setup.Stop() && err == nil {
		_ = w.Stop()
		err = fmt.Errorf("watch %s: no answer within %v", key, fetchRequestTimeout)
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return w, cancel, nil
}

// FetchWeights downloads version p into dir (created if needed): model.safetensors and the
// other files, checking the weights' SHA-256 against the pointer.
func (c *Conn) FetchWeights(ctx context.Context, p Pointer, dir string) error {
	obs, err := c.JS.ObjectStore(ctx, WeightsBucket)
	if err != nil {
		return fmt.Errorf("dist: weights store: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("dist: fetch weights: %w", err)
	}
	for file, obj := range p.Files {
		if filepath.Base(file) != file || file == "." || file == ".." {
			return fmt.Errorf("dist: fetch weights: bad file name %q", file)
		}
		if _, err := getFile(ctx, obs, obj, filepath.Join(dir, file)); err != nil {
			return err
		}
	}
	sum, err := getFile(ctx, obs, p.Object, filepath.Join(dir, WeightsFile))
	if err != nil {
		return err
	}
	if sum != p.SHA256 {
		return fmt.Errorf("dist: fetch weights v%d: sha256 %s, pointer says %s", p.Version, sum, p.SHA256)
	}
	return nil
}

// getFile downloads obj to path and returns its SHA-256. Every request it makes is bounded by
// fetchRequestTimeout and the download by its size at fetchMinRate, so that a server that
// stops in the middle makes it fail rather than wait for an answer that never comes.
func getFile(ctx context.Context, obs jetstream.ObjectStore, obj, path string) (string, error) {
	ictx, cancel := context.WithTimeout(ctx, fetchRequestTimeout)
	info, err := obs.GetInfo(ictx, obj)
	cancel()
	if err != nil {
		return "", fmt.Errorf("dist: get %s: %w", obj, err)
	}
	gctx, cancel := context.WithTimeout(ctx, fetchRequestTimeout+time.Duration(float64(info.Size)/fetchMinRate*float64(time.Second)))
	defer cancel()
	setup := time.AfterFunc(fetchRequestTimeout, cancel) // the object's info and the consumer of its chunks
	r, err := obs.Get(gctx, obj)
	setup.Stop()
	if err != nil {
		return "", fmt.Errorf("dist: get %s: %w", obj, err)
	}
	defer r.Close()
	tmp := path + ".part"
	f, err := os.Create(tmp)
	if err != nil {
		return "", fmt.Errorf("dist: fetch weights: %w", err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), r) // the store checks its own digest at the end
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("dist: get %s: %w", obj, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// PutRolloutSettings stores run's rollout settings (JSON the worker command understands) under
// <run>.rollout in the policy bucket; RolloutSettings reads them.
func (c *Conn) PutRolloutSettings(ctx context.Context, run string, settings []byte) error {
	err := retryLearner(ctx, func(ctx context.Context) error {
		kv, err := c.JS.KeyValue(ctx, PolicyBucket)
		if err == nil {
			_, err = kv.Put(ctx, run+".rollout", settings)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("dist: rollout settings: %w", err)
	}
	return nil
}

// RolloutSettings reads what PutRolloutSettings stored; nil when nothing was.
func (c *Conn) RolloutSettings(ctx context.Context, run string) ([]byte, error) {
	kv, err := c.JS.KeyValue(ctx, PolicyBucket)
	if err != nil {
		return nil, fmt.Errorf("dist: policy bucket: %w", err)
	}
	e, err := kv.Get(ctx, run+".rollout")
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dist: rollout settings: %w", err)
	}
	return e.Value(), nil
}
