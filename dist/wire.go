package dist

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/agentrl/agentrl/traj"
)

// Names of the streams, buckets, subjects and headers of the wire protocol (docs/wire.md).
const (
	// SubjectPrefix begins every subject of a run: agentrl.<run>.task, agentrl.<run>.traj.<group>.
	SubjectPrefix = "agentrl"
	// PolicyBucket is the KV bucket of policy pointers: key <run>.latest holds a Pointer, key
	// <run>.rollout the run's rollout settings (JSON, opaque to this package), key <run>.epoch
	// the last learner epoch taken (NextEpoch), key <run>.finished when the learner finished the
	// run (MarkFinished).
	PolicyBucket = "agentrl_policy"
	// WorkersBucket is the KV bucket of worker heartbeats, key <run>.<worker id>, with a TTL.
	WorkersBucket = "agentrl_workers"
	// WeightsBucket is the object store of published weights, names <run>/e<epoch>/v<version>/<file>.
	WeightsBucket = "agentrl_weights"
	// BlobsBucket is the object store of trajectories too large for one message, names
	// <run>/<group>/<sample>/<epoch>.<attempt>/<unique suffix>.
	BlobsBucket = "agentrl_blobs"
	// TasksConsumer is the durable pull consumer that all workers of a run share.
	TasksConsumer = "workers"

	// Codec is the value of HeaderCodec on a trajectory message: the traj binary form.
	Codec = "traj-binary/1"
)

// Headers of a trajectory message. Nats-Msg-Id is JetStream's deduplication id.
const (
	HeaderMsgID      = "Nats-Msg-Id"
	HeaderCodec      = "Agentrl-Codec"
	HeaderRun        = "Agentrl-Run"
	HeaderTask       = "Agentrl-Task"
	HeaderGroup      = "Agentrl-Group"
	HeaderSample     = "Agentrl-Sample"
	HeaderAttempt    = "Agentrl-Attempt"
	HeaderStatus     = "Agentrl-Status"
	HeaderMinVersion = "Agentrl-Min-Version"
	HeaderMaxVersion = "Agentrl-Max-Version"
	HeaderAdmit      = "Agentrl-Admit-Version"
	HeaderEpoch      = "Agentrl-Epoch"
	HeaderWorker     = "Agentrl-Worker"
	// HeaderBlob names the object in BlobsBucket that holds the payload; the message body is then
	// empty, and HeaderBlobSHA256 / HeaderBlobBytes describe the object.
	HeaderBlob       = "Agentrl-Blob"
	HeaderBlobSHA256 = "Agentrl-Blob-Sha256"
	HeaderBlobBytes  = "Agentrl-Blob-Bytes"
)

// TasksStream, TrajStream and the subjects name a run's streams and subjects.
func TasksStream(run string) string { return "AGENTRL_TASKS_" + run }

// TrajStream is the name of the run's trajectory stream.
func TrajStream(run string) string { return "AGENTRL_TRAJ_" + run }

// TaskSubject is the subject tasks of run are published on.
func TaskSubject(run string) string { return SubjectPrefix + "." + run + ".task" }

// TrajSubject is the subject a trajectory of group is published on.
func TrajSubject(run string, group uint64) string {
	return SubjectPrefix + "." + run + ".traj." + strconv.FormatUint(group, 10)
}

// CheckRun reports whether run can name a run on the wire: 1 to 64 characters of
// [A-Za-z0-9_-], so that it is one subject token and part of a stream name.
func CheckRun(run string) error {
	if run == "" || len(run) > 64 {
		return fmt.Errorf("dist: run name %q: want 1 to 64 characters", run)
	}
	for _, c := range run {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("dist: run name %q: only letters, digits, '_' and '-' may name a run", run)
		}
	}
	return nil
}

// Task is one episode to run: the JSON payload of a message on the tasks stream.
type Task struct {
	Run    string `json:"run"`
	TaskID string `json:"task_id"`
	Env    string `json:"env"`
	Seed   int64  `json:"seed"`
	// EnvConfig, when set, is how the worker makes the environment for this task, opaque to the
	// data plane (agentrl's: {"difficulty": {"levels": [...], "weights": [...]}}, the levels the
	// learner draws the phase's tasks at).
	EnvConfig json.RawMessage `json:"env_config,omitempty"`
	// GroupID and Sample identify the episode: the learner accepts one trajectory per pair.
	GroupID uint64 `json:"group_id"`
	Sample  int    `json:"sample_index"`
	// Attempt is 0 when the learner first issues the task and counts its re-issues; the
	// trajectory's attempt adds the JetStream deliveries after the first (Attempt).
	Attempt int `json:"attempt"`
	// Epoch is the learner incarnation that issued the task (Pointer.Epoch). A worker runs it only
	// with that epoch's weights: it waits for them, and terminates the task ("superseded") once
	// it holds a newer epoch's, because the learner that issued it is gone and its successor
	// issued its own tasks.
	Epoch uint32 `json:"epoch"`
	// AdmitVersion is the learner's policy version when it admitted the task: a worker starts
	// the episode only once it holds epoch Epoch's version AdmitVersion or a newer one.
	AdmitVersion int32 `json:"admit_version"`
	// Deadline, when set, is the time after which the task is no longer worth running: a worker
	// that receives it later terminates it (reason "deadline") without running it.
	Deadline time.Time `json:"deadline,omitzero"`
}

// Key is the episode's identity, <run>/<group>/<sample>: the learner accepts one trajectory per key.
func (t Task) Key() string {
	return t.Run + "/" + strconv.FormatUint(t.GroupID, 10) + "/" + strconv.Itoa(t.Sample)
}

// MsgID is the trajectory's Nats-Msg-Id for the given attempt: <run>/<group>/<sample>/<epoch>.<attempt>.
// The epoch keeps a new learner incarnation's trajectories from being deduplicated against an
// earlier one's of the same episode.
func (t Task) MsgID(attempt int) string {
	return t.Key() + "/" + strconv.FormatUint(uint64(t.Epoch), 10) + "." + strconv.Itoa(attempt)
}

// taskMsgID is the task's own Nats-Msg-Id: <run>/task/<task_id>/<epoch>.<attempt>.
func (t Task) taskMsgID() string {
	return t.Run + "/task/" + t.TaskID + "/" + strconv.FormatUint(uint64(t.Epoch), 10) + "." + strconv.Itoa(t.Attempt)
}

// validate checks what a worker needs of a task.
func (t Task) validate(run string) error {
	switch {
	case t.Run != run:
		return fmt.Errorf("task for run %q on run %q's stream", t.Run, run)
	case t.TaskID == "":
		return fmt.Errorf("task without task_id")
	case t.Env == "":
		return fmt.Errorf("task %s without env", t.TaskID)
	case t.Sample < 0 || t.Attempt < 0:
		return fmt.Errorf("task %s: negative sample_index or attempt", t.TaskID)
	}
	return nil
}

// Pointer is the policy pointer, the JSON value of key <run>.latest in PolicyBucket. The
// learner writes every file of version Version to the object store first and moves the pointer
// last, so a worker that sees a pointer finds its files complete.
//
// A policy is named by (Epoch, Version). Epoch is the learner's incarnation: a learner that
// resumes from a checkpoint takes a new epoch (NextEpoch) and publishes the checkpoint's version
// again, which may be lower than what its crashed predecessor published; the new epoch makes it
// the newer pointer all the same (After), and tells the predecessor's weights, which the resumed
// learner never had, from its own.
type Pointer struct {
	Epoch   uint32 `json:"epoch"`
	Version int32  `json:"version"`
	// Object is the name of the weights (model.safetensors) in WeightsBucket; SHA256 and Bytes
	// describe it (the store checks its own digest too).
	Object string `json:"object"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
	// Files are the other objects of the version (config.json, tokenizer.json, …), by file name.
	Files map[string]string `json:"files,omitempty"`
	// Created is when the learner moved the pointer.
	Created time.Time `json:"created"`
}

// After reports whether p names a newer policy than q: a later epoch, or the same epoch and a
// later version.
func (p Pointer) After(q Pointer) bool {
	if p.Epoch != q.Epoch {
		return p.Epoch > q.Epoch
	}
	return p.Version > q.Version
}

// Heartbeat is the JSON value of key <run>.<worker id> in WorkersBucket, put every few seconds;
// the bucket's TTL removes a worker that stopped.
type Heartbeat struct {
	Worker   string    `json:"worker"`
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	Epoch    uint32    `json:"epoch"`   // learner epoch of the policy the worker generates with
	Version  int32     `json:"version"` // policy version the worker generates with, -1 before any
	Running  int       `json:"running"` // episodes in flight
	Done     int64     `json:"done"`    // trajectories stored
	Time     time.Time `json:"time"`
	Draining bool      `json:"draining,omitempty"`
}

// versionSpan is the smallest and largest policy version among t's sampled tokens.
func versionSpan(t *traj.Trajectory) (lo, hi int32, ok bool) {
	for i, v := range t.Versions {
		if !t.LossMask[i] || v == traj.NoVersion {
			continue
		}
		if !ok || v < lo {
			lo = v
		}
		if !ok || v > hi {
			hi = v
		}
		ok = true
	}
	return lo, hi, ok
}

func decodeTask(data []byte) (Task, error) {
	var t Task
	// Unknown fields are allowed: a newer learner may add some.
	if err := json.Unmarshal(data, &t); err != nil {
		return Task{}, fmt.Errorf("decode task: %w", err)
	}
	return t, nil
}
