package dist

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// refusals records the permission violations the server reports to a connection.
type refusals struct {
	mu   sync.Mutex
	errs []string
}

func (r *refusals) handler() nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		r.mu.Lock()
		r.errs = append(r.errs, err.Error())
		r.mu.Unlock()
	})
}

// refused waits until the server has reported a publish permission violation on a subject that
// begins with prefix.
func (r *refusals) refused(prefix string) bool {
	want := fmt.Sprintf("permissions violation for publish to %q", prefix)
	want = want[:len(want)-1] // the subject goes on
	for range 100 {
		r.mu.Lock()
		for _, e := range r.errs {
			if strings.Contains(strings.ToLower(e), strings.ToLower(want)) {
				r.mu.Unlock()
				return true
			}
		}
		r.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// checkWorkerCannotPublishWeights: with a worker's credentials (dial) the policy pointer and the
// weights are read, but writing weights, moving the pointer, creating a stream or deleting the
// learner's consumer is refused by the server's permissions (the violation is reported for the
// subject, and the store is unchanged); the learner (l) may do all of it.
func checkWorkerCannotPublishWeights(t *testing.T, l *Conn, dial func(...nats.Option) (*Conn, error)) {
	ctx := ctxFor(t, 30*time.Second)
	const run = "sec"
	if err := l.SetupRun(ctx, RunConfig{Run: run}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	weights := bytes.Repeat([]byte{1, 2, 3, 4}, 300_000)
	if err := os.WriteFile(filepath.Join(dir, WeightsFile), weights, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"x":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := l.PublishWeights(ctx, run, 1, 3, dir, 2)
	if err != nil {
		t.Fatal(err)
	}

	var seen refusals
	w, err := dial(seen.handler())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// The worker reads the pointer and the weights.
	got, ok, err := w.Latest(ctx, run)
	if err != nil || !ok || got.Version != 3 || got.SHA256 != p.SHA256 {
		t.Fatalf("worker reads pointer %+v %v %v", got, ok, err)
	}
	out := t.TempDir()
	if err := w.FetchWeights(ctx, got, out); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, WeightsFile)); !bytes.Equal(b, weights) {
		t.Fatal("fetched weights differ")
	}
	if b, _ := os.ReadFile(filepath.Join(out, "config.json")); string(b) != `{"x":1}` {
		t.Fatal("fetched config differs")
	}
	watch, err := w.WatchPointer(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if p0 := <-watch; p0.Version != 3 {
		t.Fatalf("watch starts at %d", p0.Version)
	}
	// It may store a trajectory and a heartbeat.
	task := testTask(run, 1, 0)
	if _, err := w.PublishTrajectory(ctx, task, 0, "w", synthTraj(task, 16, 3)); err != nil {
		t.Fatalf("a worker could not store a trajectory: %v", err)
	}

	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 500*time.Millisecond) // a refused request gets no reply
		t.Cleanup(cancel)
		return c
	}
	kv, err := w.JS.KeyValue(ctx, PolicyBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(short(), run+".latest", []byte(`{"epoch":1,"version":99}`)); err == nil {
		t.Fatal("a worker moved the policy pointer")
	}
	if !seen.refused("$KV." + PolicyBucket + "." + run + ".latest") {
		t.Fatalf("moving the pointer was not refused by the server's permissions; errors: %v", seen.errs)
	}
	if _, err := kv.Put(short(), run+".epoch", []byte("99")); err == nil {
		t.Fatal("a worker took a learner epoch")
	}
	obs, err := w.JS.ObjectStore(ctx, WeightsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(short(), run+"/e1/v99/model.safetensors", []byte("evil")); err == nil {
		t.Fatal("a worker wrote weights")
	}
	if !seen.refused("$O." + WeightsBucket + ".") {
		t.Fatalf("writing weights was not refused by the server's permissions; errors: %v", seen.errs)
	}
	if err := obs.Delete(short(), p.Object); err == nil {
		t.Fatal("a worker deleted weights")
	}
	if _, err := w.JS.CreateOrUpdateStream(short(), jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil"}}); err == nil {
		t.Fatal("a worker created a stream")
	}
	if err := w.JS.DeleteConsumer(short(), TrajStream(run), "learner"); err == nil {
		t.Fatal("a worker deleted a consumer")
	}
	if !seen.refused("$JS.API.STREAM.UPDATE.EVIL") || !seen.refused("$JS.API.CONSUMER.DELETE."+TrajStream(run)+".learner") {
		t.Fatalf("creating a stream or deleting a consumer was not refused by the server's permissions; errors: %v", seen.errs)
	}
	// Nothing changed: the pointer, the weights.
	if got, _, _ := l.Latest(ctx, run); got.Epoch != 1 || got.Version != 3 {
		t.Fatalf("pointer moved to %+v", got)
	}
	lobs, err := l.JS.ObjectStore(ctx, WeightsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lobs.GetInfo(ctx, run+"/e1/v99/model.safetensors"); err == nil {
		t.Fatal("the worker's weights are in the store")
	}
	if b, err := lobs.GetBytes(ctx, p.Object); err != nil || !bytes.Equal(b, weights) {
		t.Fatalf("the published weights changed: %v", err)
	}
	// Publishing the next version still works for the learner, and the watch sees it.
	if _, err := l.PublishWeights(ctx, run, 1, 4, dir, 2); err != nil {
		t.Fatal(err)
	}
	select {
	case p4 := <-watch:
		if p4.Version != 4 {
			t.Fatalf("watch saw %d", p4.Version)
		}
	case <-ctx.Done():
		t.Fatal("watch did not see version 4")
	}
}

// A worker's token reads weights but cannot publish them; wrong tokens are refused.
func TestWorkerCannotPublishWeights(t *testing.T) {
	s := startServer(t)
	l := connect(t, s.URL(), s.LearnerToken())
	checkWorkerCannotPublishWeights(t, l, func(o ...nats.Option) (*Conn, error) {
		return Dial(s.URL(), Auth{Token: s.WorkerToken()}, "worker", o...)
	})
	for _, tok := range []string{"", "wrong", strings.ToUpper(s.WorkerToken())} {
		if c, err := Connect(s.URL(), tok, "intruder"); err == nil {
			c.Close()
			t.Fatalf("token %q accepted", tok)
		}
	}
}

// A worker authenticated by NKey has the workers' permissions; an unknown key, or a known public
// key whose nonce is signed with another seed, is refused.
func TestWorkerNKey(t *testing.T) {
	seed, pub, err := NewNKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := StartServer(ServerConfig{StoreDir: t.TempDir(), WorkerNKeys: []string{"Unot-a-key"}}); err == nil {
		t.Fatal("a malformed worker nkey was accepted")
	}
	s, err := StartServer(ServerConfig{StoreDir: t.TempDir(), WorkerNKeys: []string{pub}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	l := connect(t, s.URL(), s.LearnerToken())
	checkWorkerCannotPublishWeights(t, l, func(o ...nats.Option) (*Conn, error) {
		return Dial(s.URL(), Auth{NKeySeed: seed}, "worker", o...)
	})
	other, _, err := NewNKey()
	if err != nil {
		t.Fatal(err)
	}
	if c, err := Dial(s.URL(), Auth{NKeySeed: other}, "intruder"); err == nil {
		c.Close()
		t.Fatal("an unknown nkey was accepted")
	}
	kp, err := nkeys.FromSeed([]byte(other))
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(s.URL(), nats.Nkey(pub, kp.Sign), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a known public key with a signature by another seed was accepted")
	}
	if _, err := Dial(s.URL(), Auth{Token: "x", NKeySeed: seed}, "both"); err == nil {
		t.Fatal("a token and an nkey together were accepted")
	}
}

// The same permissions hold on an external nats-server configured by NATSServerConfig, with the
// worker authenticated by NKey.
func TestWorkerCannotPublishWeightsExternal(t *testing.T) {
	bin := natsServerBinary(t)
	dir := t.TempDir()
	port := freePort(t)
	seed, pub, err := NewNKey()
	if err != nil {
		t.Fatal(err)
	}
	lp := NewToken()
	conf := filepath.Join(dir, "nats.conf")
	cfg := NATSServerConfig(fmt.Sprintf("127.0.0.1:%d", port), filepath.Join(dir, "js"), NATSUser{User: "learner", Password: lp}, NATSUser{NKey: pub})
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", conf)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var l *Conn
	for i := 0; ; i++ {
		if l, err = Connect(fmt.Sprintf("nats://learner:%s@127.0.0.1:%d", lp, port), "", "learner"); err == nil {
			break
		}
		if i > 100 {
			t.Fatalf("nats-server: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(l.Close)
	checkWorkerCannotPublishWeights(t, l, func(o ...nats.Option) (*Conn, error) {
		return Dial(url, Auth{NKeySeed: seed}, "worker", o...)
	})
}
