// Package dist is the distributed data plane: tasks go out to rollout workers and trajectories
// come back over NATS JetStream, durably and without loss, and policy weights go out through the
// JetStream object store. The learner embeds a NATS server (StartServer, store under the run
// directory, loopback by default, token authentication) or connects to an external one; workers
// on any host connect with a worker token (Connect) and run episodes (Worker).
//
// The wire protocol — subjects, streams, headers, payloads and the acknowledgement rules — is
// written down in docs/wire.md so that a learner or worker in another language can join. In
// short: a task is a JSON message on the work-queue stream AGENTRL_TASKS_<run>; a worker acks it
// only after the PubAck of its trajectory, which it publishes on AGENTRL_TRAJ_<run> in the traj
// binary codec under Nats-Msg-Id <run>/<group>/<sample>/<epoch>.<attempt>.<nonce>; the learner's Consumer
// hands trajectories out once per (group, sample) and acks them only when told that the step that
// trained on them is checkpointed. Every trajectory it does not hand out is dropped for a named
// reason and counted (Drops). The consumer also sweeps from the task queue the acknowledged
// tasks a stopped server kept there (Conn.SweepTasks, counted by TasksSwept).
//
// Each learner start is a new epoch (NextEpoch): a resumed learner's weights, tasks and
// trajectories are told from its crashed predecessor's, workers follow the pointer by (epoch,
// version) and give up an older epoch's tasks (Worker.Supersede), and the consumer trains a
// predecessor's trajectory only when it was sampled by weights the checkpoint descends from
// (ConsumerState.Lineage).
//
// The package links traj and the NATS libraries only: no model, no engine, no learner. What
// runs an episode is the caller's (Worker.Episode); the command `agentrl worker` plugs in the
// rollout loop with a local engine that loads the weights the learner publishes.
package dist
