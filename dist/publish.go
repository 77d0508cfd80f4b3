package dist

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/agentrl/agentrl/traj"
)

// headerRoom is what a trajectory message keeps of the server's payload limit for its headers.
const headerRoom = 4 << 10

// PublishTrajectory stores t, the result of task's given attempt, on the trajectory stream and
// returns the stream's acknowledgement once the server has stored it (or recognised it as a
// duplicate of the same message id). A payload that does not fit in one message goes to the
// blobs store first and the message carries a reference. Transient failures (a restarting
// server) are retried with the same message id until ctx ends, so a retry never stores twice.
func (c *Conn) PublishTrajectory(ctx context.Context, task Task, attempt int, worker string, t *traj.Trajectory) (*jetstream.PubAck, error) {
	data, err := t.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("dist: %w", err)
	}
	msg := nats.NewMsg(TrajSubject(task.Run, task.GroupID))
	// A fresh nonce per trajectory: another worker cannot know the id before this one is stored,
	// so it cannot make JetStream drop it as a duplicate; this call's retries keep the id.
	id := task.MsgID(attempt) + "." + nuid.Next()
	h := msg.Header
	h.Set(HeaderMsgID, id)
	h.Set(HeaderCodec, Codec)
	h.Set(HeaderRun, task.Run)
	h.Set(HeaderTask, task.TaskID)
	h.Set(HeaderGroup, strconv.FormatUint(task.GroupID, 10))
	h.Set(HeaderSample, strconv.Itoa(task.Sample))
	h.Set(HeaderAttempt, strconv.Itoa(attempt))
	h.Set(HeaderStatus, t.Status.String())
	h.Set(HeaderEpoch, strconv.FormatUint(uint64(task.Epoch), 10))
	h.Set(HeaderAdmit, strconv.Itoa(int(task.AdmitVersion)))
	if lo, hi, ok := versionSpan(t); ok {
		h.Set(HeaderMinVersion, strconv.Itoa(int(lo)))
		h.Set(HeaderMaxVersion, strconv.Itoa(int(hi)))
	}
	if worker != "" {
		h.Set(HeaderWorker, worker)
	}
	if int64(len(data)) > c.NC.MaxPayload()-headerRoom {
		// A fresh name per put: replacing an object needs a purge, which workers may not do.
		name := id + "/" + nuid.Next()
		if err := c.putBlob(ctx, name, data); err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		h.Set(HeaderBlob, name)
		h.Set(HeaderBlobSHA256, hex.EncodeToString(sum[:]))
		h.Set(HeaderBlobBytes, strconv.Itoa(len(data)))
		data = nil
	}
	msg.Data = data
	var ack *jetstream.PubAck
	err = retry(ctx, func() error {
		var err error
		ack, err = c.JS.PublishMsg(ctx, msg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dist: publish trajectory %s: %w", id, err)
	}
	return ack, nil
}

func (c *Conn) putBlob(ctx context.Context, name string, data []byte) error {
	obs, err := c.JS.ObjectStore(ctx, BlobsBucket)
	if err != nil {
		return fmt.Errorf("dist: blobs store: %w", err)
	}
	return retry(ctx, func() error {
		chunk := uint32(min(1<<20, c.NC.MaxPayload()-headerRoom))
		_, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: chunk}}, bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("dist: put blob %s: %w", name, err)
		}
		return nil
	})
}

// payload returns a trajectory message's payload: its body, or the blob it references.
func (c *Conn) payload(ctx context.Context, m jetstream.Msg) ([]byte, error) {
	name := m.Headers().Get(HeaderBlob)
	if name == "" {
		return m.Data(), nil
	}
	obs, err := c.JS.ObjectStore(ctx, BlobsBucket)
	if err != nil {
		return nil, fmt.Errorf("dist: blobs store: %w", err)
	}
	data, err := obs.GetBytes(ctx, name)
	if err != nil {
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			err = errors.Join(err, errPermanent)
		}
		return nil, fmt.Errorf("dist: blob %s: %w", name, err)
	}
	sum := sha256.Sum256(data)
	if want := m.Headers().Get(HeaderBlobSHA256); want != "" && hex.EncodeToString(sum[:]) != want {
		return nil, fmt.Errorf("dist: blob %s: sha256 mismatch: %w", name, errPermanent)
	}
	return data, nil
}
