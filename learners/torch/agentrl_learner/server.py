"""The HTTP server of the learner protocol (docs/learner.md), standard library only."""

import hmac
import http.server
import ipaddress
import json
import secrets
import socket
import sys
import threading
import types
import traceback

from . import wire
from .learner import BadRequest, BrokenWeights, NonFinite

EPOCH_HEADER = "Agentrl-Learner-Epoch"
MAX_BODY = 1 << 30


def loopback(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Error(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code = status, code


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "agentrl_learner"
    timeout = 3600  # an idle keep-alive connection, or a client that stops sending, is dropped
    # TCP_NODELAY: an answer is written as its headers and then its body; with Nagle's algorithm
    # the body waits for the client to acknowledge the headers, which a client's delayed
    # acknowledgement holds back for up to 40 ms, every request.
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):  # one line per request on stderr, only with --verbose
        if self.server.verbose:
            sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

    def _send(self, status, body, ctype):
        self.send_response(status)
        self.send_header(EPOCH_HEADER, str(self.server.epoch))
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, obj, status=200):
        self._send(status, (json.dumps(obj) + "\n").encode(), "application/json")

    def _fail(self, status, code, msg):
        self._json({"error": msg, "code": code}, status)

    def _authorized(self):
        key = self.server.key
        if not key:
            return True
        got = self.headers.get("Authorization", "")
        if not got.startswith("Bearer "):
            return False
        return hmac.compare_digest(got[len("Bearer "):].strip().encode(), key.encode())

    def do_GET(self):
        if not self._authorized():
            return self._fail(401, "unauthorized", "missing or wrong key: send Authorization: Bearer KEY")
        if self.path != "/v1/info":
            return self._fail(404, "bad_request", "no route " + self.path)
        with self.server.lock:
            self._json(self.server.info())

    def do_POST(self):
        try:
            n = int(self.headers.get("Content-Length", "-1"))
        except ValueError:
            n = -1
        if n < 0:
            self.close_connection = True
            return self._fail(411, "bad_request", "a Content-Length is required")
        if n > MAX_BODY:
            self.close_connection = True
            return self._fail(413, "bad_request", f"body over {MAX_BODY} bytes")
        body = self.rfile.read(n)
        if len(body) != n:
            self.close_connection = True
            return
        if not self._authorized():
            return self._fail(401, "unauthorized", "missing or wrong key: send Authorization: Bearer KEY")
        if self.headers.get(EPOCH_HEADER) != str(self.server.epoch):
            return self._fail(409, "epoch", f"request for epoch {self.headers.get(EPOCH_HEADER)!r}, the learner is at {self.server.epoch}")
        with self.server.lock:
            try:
                self._route(body)
            except _Error as e:
                self._fail(e.status, e.code, str(e))
            except (BadRequest, ValueError, KeyError) as e:
                self._fail(400, "bad_request", str(e))
            except NonFinite as e:
                self._fail(422, "non_finite", str(e))
            except BrokenWeights as e:
                self._fail(422, "broken_weights", str(e))
            except Exception as e:  # the learner's own failure
                traceback.print_exc()
                self._fail(500, "internal", f"{type(e).__name__}: {e}")

    def _args(self, body, required, optional=()):
        try:
            obj = json.loads(body)
        except ValueError as e:
            raise BadRequest(f"body is not JSON: {e}")
        if not isinstance(obj, dict):
            raise BadRequest("body must be a JSON object")
        unknown = set(obj) - set(required) - set(optional)
        if unknown:
            raise BadRequest(f"unknown fields {sorted(unknown)}")
        missing = [k for k in required if k not in obj]
        if missing:
            raise BadRequest(f"missing fields {missing}")
        return obj

    def _route(self, body):
        L = self.server.learner
        p = self.path
        if self.server.fanout is not None:  # --fsdp: the other ranks handle it too (dist.py)
            self.server.fanout(p, body)
        if p == "/v1/forward":
            req = wire.decode_request(body, L.vocab)
            if req.kind != wire.KIND_FORWARD:
                raise BadRequest("body is not a forward request")
            lp, ent, val = L.forward(req, bool(req.flags & wire.F_ENTROPIES), bool(req.flags & wire.F_VALUES),
                                     bool(req.flags & wire.F_REFERENCE))
            self._send(200, wire.encode_answer(len(req.tokens), lp, ent, val), "application/octet-stream")
        elif p == "/v1/forward_backward":
            req = wire.decode_request(body, L.vocab)
            if req.kind != wire.KIND_FORWARD_BACKWARD:
                raise BadRequest("body is not a forward_backward request")
            tokens = L.forward_backward(req)
            self._json({"tokens": tokens, "pending_tokens": L.pending})
        elif p == "/v1/optim_step":
            a = self._args(body, ("steps", "lr"), ("grad_clip", "step"))
            if not isinstance(a["steps"], int) or a["steps"] != L.steps:
                raise _Error(409, "steps", f"the optimizer has applied {L.steps} updates, the request expects {a['steps']}")
            try:
                lr, clip = float(a["lr"]), float(a.get("grad_clip", 0))
            except (TypeError, ValueError):
                raise BadRequest("lr and grad_clip must be numbers")
            norm, lr = L.optim_step(lr, clip)
            self._json({"steps": L.steps, "grad_norm": norm, "lr": lr})
        elif p == "/v1/save_for_sampler":
            a = self._args(body, ("version", "dir"))
            if not isinstance(a["dir"], str) or not a["dir"]:
                raise BadRequest("dir must be a path")
            n = L.save_for_sampler(a["dir"])
            self._json({"dir": a["dir"], "bytes": n})
        elif p == "/v1/save_state":
            a = self._args(body, ("dir",))
            L.save_state(a["dir"])
            self._json({"dir": a["dir"], "steps": L.steps})
        elif p == "/v1/load_state":
            a = self._args(body, ("dir",))
            steps = L.load_state(a["dir"])
            self._json({"dir": a["dir"], "steps": steps})
        else:
            raise _Error(404, "bad_request", "no route " + p)


class Server(http.server.ThreadingHTTPServer):
    """One learner: connections each have a thread, requests are served one at a time."""

    daemon_threads = True

    def __init__(self, addr, learner, key="", verbose=False):
        host = addr[0]
        if not loopback(host) and not key:
            raise ValueError(f"listening on {host} (not loopback) needs a key (--key-env)")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.address_family = family
        super().__init__(addr, Handler)
        self.learner, self.key, self.verbose = learner, key, verbose
        self.fanout = None  # under --fsdp: sends each request's route and body to the other ranks
        self.epoch = secrets.randbits(63) | 1
        self.lock = threading.Lock()

    def info(self):
        L = self.learner
        return {
            "epoch": self.epoch, "steps": L.steps, "pending_tokens": L.pending, "params": L.num_params(),
            "value_head": L.value is not None, "reference": L.reference is not None,
            "max_tokens": L.max_tokens, "device": str(L.device), "dtype": "bfloat16" if L.bf16 else "float32",
            "model": L.config, "adapter": L.adapter_cfg,
        }


class _Follower(Handler):
    """A request rank 0 broadcast, run on another rank (--fsdp): the same code, no answer."""

    def __init__(self, server, path):  # no connection
        self.server, self.path = server, path

    def _send(self, status, body, ctype):
        pass


def serve_follower(learner):
    """Ranks other than 0 under --fsdp: handle each request rank 0 broadcasts until it stops.
    An error is rank 0's to answer (the same request fails there the same way)."""
    from . import dist

    srv = types.SimpleNamespace(learner=learner, fanout=None)

    def handle(route, body):
        try:
            _Follower(srv, route)._route(body)
        except Exception:
            pass

    dist.follow(handle)
