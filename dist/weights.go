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
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WeightsFile is the file of a published version that the pointer names.
const WeightsFile = "model.safetensors"

// PublishWeights publishes the checkpoint folder dir as policy version v of run: every regular
// file of dir goes to the weights store as <run>/v<version>/<file>, model.safetensors last, and
// then the pointer <run>.latest moves to it. A worker that sees the pointer finds every file.
// Versions older than keep-1 behind v are deleted from the store (keep ≤ 0 keeps them all).
func (c *Conn) PublishWeights(ctx context.Context, run string, version int32, dir string, keep int) (Pointer, error) {
	if err := CheckRun(run); err != nil {
		return Pointer{}, err
	}
	obs, err := c.JS.ObjectStore(ctx, WeightsBucket)
	if err != nil {
		return Pointer{}, fmt.Errorf("dist: weights store: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return Pointer{}, fmt.Errorf("dist: publish weights: %w", err)
	}
	p := Pointer{Version: version, Files: map[string]string{}}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != WeightsFile {
			names = append(names, e.Name())
		}
	}
	names = append(names, WeightsFile) // last: its presence means the others are there
	for _, n := range names {
		obj := weightsObject(run, version, n)
		sum, size, err := putFile(ctx, obs, obj, filepath.Join(dir, n))
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
	kv, err := c.JS.KeyValue(ctx, PolicyBucket)
	if err != nil {
		return Pointer{}, fmt.Errorf("dist: policy bucket: %w", err)
	}
	data, err := jsonMarshal(p)
	if err != nil {
		return Pointer{}, err
	}
	if _, err := kv.Put(ctx, run+".latest", data); err != nil {
		return Pointer{}, fmt.Errorf("dist: move policy pointer: %w", err)
	}
	if keep > 0 && int(version) >= keep {
		c.deleteVersion(ctx, obs, run, version-int32(keep))
	}
	return p, nil
}

func weightsObject(run string, version int32, file string) string {
	return fmt.Sprintf("%s/v%d/%s", run, version, file)
}

// deleteVersion removes what is left of an old version; a failure only leaves it in the store.
func (c *Conn) deleteVersion(ctx context.Context, obs jetstream.ObjectStore, run string, version int32) {
	list, err := obs.List(ctx)
	if err != nil {
		return
	}
	prefix := fmt.Sprintf("%s/v%d/", run, version)
	for _, o := range list {
		if len(o.Name) > len(prefix) && o.Name[:len(prefix)] == prefix {
			_ = obs.Delete(ctx, o.Name)
		}
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
// until ctx ends; the channel is then closed. A slow reader sees only the newest pointer.
func (c *Conn) WatchPointer(ctx context.Context, run string) (<-chan Pointer, error) {
	kv, err := c.JS.KeyValue(ctx, PolicyBucket)
	if err != nil {
		return nil, fmt.Errorf("dist: policy bucket: %w", err)
	}
	w, err := kv.Watch(ctx, run+".latest", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("dist: watch policy pointer: %w", err)
	}
	out := make(chan Pointer, 1)
	go func() {
		defer close(out)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue // end of the initial values
				}
				var p Pointer
				if json.Unmarshal(e.Value(), &p) != nil {
					continue
				}
				select { // keep only the newest
				case <-out:
				default:
				}
				out <- p
			}
		}
	}()
	return out, nil
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

func getFile(ctx context.Context, obs jetstream.ObjectStore, obj, path string) (string, error) {
	r, err := obs.Get(ctx, obj)
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
	kv, err := c.JS.KeyValue(ctx, PolicyBucket)
	if err != nil {
		return fmt.Errorf("dist: policy bucket: %w", err)
	}
	if _, err := kv.Put(ctx, run+".rollout", settings); err != nil {
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
