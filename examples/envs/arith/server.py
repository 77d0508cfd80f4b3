#!/usr/bin/env python3
"""A reference environment for agentrl, with Python's standard library only.

It speaks the protocol of docs/env-protocol.md: each task is a sum or a difference of two
numbers; the agent may call the `calculator` tool, written

    <tool_call>{"name": "calculator", "arguments": {"expression": "12+7"}}</tool_call>

and answered in a tool message, and ends the episode with a turn holding no tool call, whose
last number is graded. Reward 1 for the right number, else 0; at most 3 turns.

    /usr/bin/python3 examples/envs/arith/server.py --port 9000 [--api-key-env ARITH_KEY]

then train against it with an entry `{name: arith, remote: {url: http://127.0.0.1:9000}}`.
"""

import argparse
import base64
import json
import random
import re
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROTOCOL = 1
TRAIN = (0, 1_000_000)
HELDOUT = (1_000_000, 1_010_000)
MAX_TURNS = 3
MAX_BODY = 8 << 20
SYSTEM = ("Solve the arithmetic task. You may call the calculator: "
          '<tool_call>{"name": "calculator", "arguments": {"expression": "..."}}</tool_call>. '
          "Then answer with the number alone.")
TOOLS = [{
    "name": "calculator",
    "description": "Evaluates an expression of integers with + and -.",
    "parameters": {"type": "object", "required": ["expression"],
                   "properties": {"expression": {"type": "string"}}},
}]
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
EXPR = re.compile(r"^\s*-?\d{1,12}(\s*[+-]\s*-?\d{1,12}){0,8}\s*$")
NUMBER = re.compile(r"-?\d+")


def task(seed):
    """The task of seed: its text and its answer."""
    rng = random.Random(seed)
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    if rng.random() < 0.5:
        return f"What is {a} + {b}?", a + b
    return f"What is {a} - {b}?", a - b


def calculate(expression):
    if not EXPR.match(expression):
        return "error: only integers with + and -"
    total, sign, num = 0, 1, ""
    for ch in expression.replace(" ", "") + "+":
        if ch.isdigit():
            num += ch
        elif ch in "+-":
            if num:
                total += sign * int(num)
                num, sign = "", 1
            sign = -sign if ch == "-" else sign
    return str(total)


def text_of(v):
    """A protocol string: plain JSON, or {"b64": ...} for bytes that are not UTF-8."""
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and set(v) == {"b64"} and isinstance(v["b64"], str):
        return base64.b64decode(v["b64"], validate=True).decode("utf-8", "replace")
    raise ValueError("want a string")


class ApiError(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class Session:
    def __init__(self, seed):
        self.seed = seed
        self.question, self.answer = task(seed)
        self.turns = 0
        self.done = False
        self.lock = threading.Lock()
        self.used = time.monotonic()


class Env:
    def __init__(self, max_sessions, idle_timeout):
        self.sessions = {}
        self.lock = threading.Lock()
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout

    def get(self, sid):
        if not isinstance(sid, str):
            raise ApiError(400, "bad_request", "session_id must be a string")
        with self.lock:
            s = self.sessions.get(sid)
        if s is None:
            raise ApiError(404, "session_not_found", f"no session {sid}")
        return s

    def reset(self, body):
        seed = body.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ApiError(400, "bad_request", 'reset needs an integer "seed"')
        now = time.monotonic()
        with self.lock:
            for sid in [k for k, s in self.sessions.items() if now - s.used > self.idle_timeout]:
                del self.sessions[sid]
            if len(self.sessions) >= self.max_sessions:
                raise ApiError(503, "too_many_sessions", f"{self.max_sessions} sessions open")
            sid = body.get("session_id") or secrets.token_hex(16)
            if sid in self.sessions:
                raise ApiError(409, "session_exists", f"session {sid} exists")
            s = self.sessions[sid] = Session(seed)
        return {"session_id": sid, "observation": {"system": SYSTEM, "text": s.question}}

    def step(self, body):
        s = self.get(body.get("session_id"))
        try:
            action = text_of(body.get("action"))
        except (ValueError, TypeError):
            raise ApiError(400, "bad_request", 'step needs an "action" string')
        with s.lock:
            if s.done:
                raise ApiError(409, "episode_done", "the episode is over: reset")
            s.turns += 1
            s.used = time.monotonic()
            out = {"session_id": body["session_id"], "reward": 0, "done": False}
            calls = TOOL_CALL.findall(action)
            if calls and s.turns < MAX_TURNS:
                responses, records = [], []
                for raw in calls:
                    try:
                        if len(raw) > 4096:
                            raise ValueError("call too long")
                        call = json.loads(raw)
                        assert call.get("name") == "calculator"
                        expr = call["arguments"]["expression"]
                        result, error = calculate(str(expr)), ""
                    except (ValueError, AssertionError, KeyError, TypeError, AttributeError, RecursionError):
                        call, result, error = {"name": "calculator", "arguments": {}}, "", "malformed call"
                    responses.append(f"<tool_response>{error or result}</tool_response>")
                    records.append({"name": "calculator", "arguments": json.dumps(call.get("arguments", {})),
                                    "result": result, "error": error})
                out.update(observation="\n".join(responses), role="tool", tool_calls=records)
                return out
            nums = NUMBER.findall(action)
            ok = bool(nums) and len(nums[-1]) <= 20 and int(nums[-1]) == s.answer
            s.done = True
            out.update(observation="Correct." if ok else "Wrong.", role="env", done=True,
                       reward=1 if ok else 0, info={"success": "true" if ok else "false"})
            return out

    def state(self, sid):
        s = self.get(sid)
        return {"session_id": sid, "seed": s.seed, "step_count": s.turns, "done": s.done,
                "failed": False, "idle_ms": int((time.monotonic() - s.used) * 1000)}

    def close(self, body):
        sid = body.get("session_id")
        with self.lock:
            if self.sessions.pop(sid, None) is None:
                raise ApiError(404, "session_not_found", f"no session {sid}")
        return {"closed": True}


def expert(body):
    """The demonstrating policy: the calculator first, then its result; with probability noise
    it skips the tool and answers off by one."""
    seed, obs = body.get("seed"), body.get("observations")
    if not isinstance(seed, int) or not isinstance(obs, list) or not obs:
        raise ApiError(400, "bad_request", 'expert needs "seed" and "observations"')
    noise = body.get("noise", 0)
    if not isinstance(noise, (int, float)) or not 0 <= noise <= 1:
        raise ApiError(400, "bad_request", "noise must be in [0, 1]")
    rng = random.Random(body.get("rng_seed", 0))
    question, answer = task(seed)
    if len(obs) == 1:
        if rng.random() < noise:
            return {"action": str(answer + rng.choice([-1, 1]))}
        expr = question[len("What is "):-1].replace(" ", "")
        return {"action": '<tool_call>{"name": "calculator", "arguments": {"expression": "%s"}}</tool_call>' % expr}
    found = re.search(r"<tool_response>(-?\d+)</tool_response>", text_of(obs[-1]))
    return {"action": found.group(1) if found else str(answer)}


def make_handler(env, api_key):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive
        # TCP_NODELAY: an answer's headers and body go out as separate writes, and with Nagle's
        # algorithm on the body waits for the client's delayed acknowledgement of the headers
        # (40 ms or more on Linux) on every step of a keep-alive connection.
        disable_nagle_algorithm = True

        def log_message(self, *args):
            pass

        def send(self, status, obj):
            data = (json.dumps(obj) + "\n").encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def body(self):
            try:
                n = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                raise ApiError(400, "bad_request", "bad Content-Length")
            if n > MAX_BODY:
                raise ApiError(413, "too_large", f"request body over {MAX_BODY} bytes")
            try:
                obj = json.loads(self.rfile.read(n) or b"null")
            except ValueError as e:
                raise ApiError(400, "bad_request", f"bad JSON body: {e}")
            if not isinstance(obj, dict):
                raise ApiError(400, "bad_request", "want a JSON object")
            return obj

        def route(self, method):
            path, _, query = self.path.partition("?")
            if api_key is not None and self.headers.get("Authorization") != "Bearer " + api_key:
                raise ApiError(401, "unauthorized", "missing or wrong bearer key")
            routes = {
                ("POST", "/reset"): lambda: env.reset(self.body()),
                ("POST", "/step"): lambda: env.step(self.body()),
                ("POST", "/close"): lambda: env.close(self.body()),
                ("POST", "/expert"): lambda: expert(self.body()),
                ("GET", "/state"): lambda: env.state(dict(p.split("=", 1) for p in query.split("&") if "=" in p).get("session_id")),
                ("GET", "/health"): lambda: {"status": "ok", "env": "arith", "sessions": len(env.sessions)},
                ("GET", "/metadata"): lambda: {
                    "protocol": PROTOCOL, "name": "arith", "description": "Sums and differences of two numbers, with a calculator.",
                    "train": {"lo": TRAIN[0], "hi": TRAIN[1]}, "heldout": {"lo": HELDOUT[0], "hi": HELDOUT[1]},
                    "max_body_bytes": MAX_BODY, "max_sessions": env.max_sessions,
                    "idle_timeout_ms": int(env.idle_timeout * 1000), "expert": True, "tools": TOOLS},
                ("GET", "/schema"): lambda: {"protocol": PROTOCOL, "see": "docs/env-protocol.md"},
            }
            if (method, path) not in routes:
                if any(p == path for _, p in routes):
                    raise ApiError(405, "method_not_allowed", f"{method} {path}")
                raise ApiError(404, "not_found", f"no endpoint {path}")
            return routes[(method, path)]()

        def handle_method(self, method):
            try:
                self.send(200, self.route(method))
            except ApiError as e:
                self.send(e.status, {"error": {"code": e.code, "message": e.message}})
            except Exception as e:  # the environment itself failed
                self.send(500, {"error": {"code": "env_error", "message": repr(e)}})

        def do_GET(self):
            self.handle_method("GET")

        def do_POST(self):
            self.handle_method("POST")

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9000, help="0 picks a free port, printed on stdout")
    ap.add_argument("--max-sessions", type=int, default=256)
    ap.add_argument("--idle-timeout", type=float, default=600)
    ap.add_argument("--api-key-env", help="require 'Authorization: Bearer $VAR'")
    args = ap.parse_args()
    import os
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            sys.exit(f"environment variable {args.api_key_env} is not set")
    srv = ThreadingHTTPServer((args.host, args.port), make_handler(Env(args.max_sessions, args.idle_timeout), key))
    srv.daemon_threads = True
    print(f"listening on http://{args.host}:{srv.server_address[1]}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
