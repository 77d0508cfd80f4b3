// Package remote serves any registered environment over HTTP and makes a served environment look
// local again.
//
// The server (NewServer) speaks an OpenEnv-style protocol with one session per episode:
//
//	POST   /reset     {"seed": N, "session_id"?: "…"} → {"session_id", "observation": {"system", "text"}}
//	POST   /step      {"session_id", "action"} → {"session_id", "observation", "role", "reward", "done", "tool_calls"?, "info"?}
//	GET    /state     ?session_id=… → {"session_id", "seed", "step_count", "done", "failed", "idle_ms"}
//	POST   /close     {"session_id"}  (or DELETE /close?session_id=…) → {"closed": true}
//	GET    /health    → {"status": "ok", "env", "sessions"}
//	GET    /metadata  → {"protocol", "name", "description", "train", "heldout", "max_body_bytes", …}
//	GET    /schema    → JSON schemas of the action, observation, transition and state
//	POST   /expert    {"seed", "noise", "rng_seed", "observations"} → {"action"} (when the spec has an expert)
//
// Every error is a JSON body {"error": {"code", "message"}} with a 4xx status for a bad request
// (bad JSON, unknown fields, wrong method, unknown, expired or evicted session, body over the
// limit → 413, step before reset or after done → 409) and a 5xx status when the environment
// itself failed (500) or ran out of time (504). Strings that are not valid UTF-8 (model text can hold such
// bytes) travel as {"b64": "…"} and non-finite rewards as "NaN", "+Inf", "-Inf", so nothing is
// altered in transit; plain JSON strings are accepted everywhere.
//
// Sessions are bounded (MaxSessions): a reset that finds them all taken ends the least recently
// used one idle for at least EvictIdle, whose client hears 410 session_evicted on its next call,
// and gets 503 only when every session is in use. Serve bounds reading a request's headers and
// body, the whole exchange and idle keep-alive connections, so a client that trickles its
// request is disconnected rather than holding a connection open.
//
// The client (Dial, Spec) implements env.Env and env.Closer: each Reset starts a new server
// session, and every transport failure, non-2xx answer or timeout is an error — never a reward —
// so a rollout records the episode as env_error or timeout. Requests are not retried: a step is
// not idempotent.
//
// A Pool (OpenPool, Register) is how a training run uses remote environments: one environment
// served by one or more replicas, each episode's session on the replica with the fewest open,
// bounded per replica, resets moved off a replica that does not answer (which then backs off),
// the pool declared dead when none has answered for a while; failures counted by reason. The
// whole protocol, for implementing a server in another language, is docs/env-protocol.md.
//
// The package does not authenticate or encrypt: the server listens on loopback unless told
// otherwise, and anything wider belongs behind a proxy that does both.
package remote
