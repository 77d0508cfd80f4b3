"""The binary bodies of docs/learner.md: forward and forward_backward requests, forward answers."""

import struct

import torch

MAGIC = b"ALRN"
VERSION = 1
KIND_FORWARD, KIND_FORWARD_BACKWARD, KIND_ANSWER = 1, 2, 3
# forward request flags
F_ENTROPIES, F_VALUES, F_REFERENCE = 1, 2, 4
# forward_backward flags and answer flags
A_LOGPROBS, A_ENTROPIES, A_VALUES = 1, 2, 4
MAX_TOKENS = 1 << 28


class BadRequest(ValueError):
    """A body or argument the learner refuses (answered 400)."""


class Request:
    """A decoded request: sequences as offsets into flat tokens and mask, and coefficients."""

    def __init__(self, kind, flags, offsets, tokens, mask, coef):
        self.kind, self.flags = kind, flags
        self.offsets = offsets  # list of int, len S+1
        self.tokens = tokens  # int64 tensor [N]
        self.mask = mask  # bool tensor [N]
        self.coef = coef  # dict name -> float32 tensor [N] (forward_backward)

    def seqs(self):
        return len(self.offsets) - 1


def _pad4(n):
    return (n + 3) & ~3


def _bits(f):
    return bin(f).count("1")


def decode_request(body, vocab):
    """Reads a forward or forward_backward request; raises BadRequest on anything malformed."""
    if len(body) < 20:
        raise BadRequest(f"body of {len(body)} bytes is shorter than its header")
    if body[:4] != MAGIC:
        raise BadRequest("body does not start with ALRN")
    version, kind, flags, s, n = struct.unpack_from("<HHIII", body, 4)
    if version != VERSION:
        raise BadRequest(f"format version {version}, this learner reads {VERSION}")
    arrays = 0
    if kind == KIND_FORWARD:
        if flags & ~(F_ENTROPIES | F_VALUES | F_REFERENCE):
            raise BadRequest(f"forward request has unknown flags {flags:#x}")
    elif kind == KIND_FORWARD_BACKWARD:
        if flags & ~(A_LOGPROBS | A_ENTROPIES | A_VALUES) or not flags & A_LOGPROBS:
            raise BadRequest(f"forward_backward request has flags {flags:#x}")
        arrays = _bits(flags)
    else:
        raise BadRequest(f"body kind {kind} is not a request")
    if s < 1 or s > MAX_TOKENS or n > MAX_TOKENS:
        raise BadRequest(f"body counts {s} sequences and {n} tokens")
    head = _pad4(20 + 4 * (s + 1) + 4 * n + n)
    if len(body) != head + 4 * n * arrays:
        raise BadRequest(f"body of {s} sequences and {n} tokens must be {head + 4 * n * arrays} bytes, got {len(body)}")
    p = 20
    offsets = list(struct.unpack_from(f"<{s + 1}I", body, p))
    p += 4 * (s + 1)
    if offsets[0] != 0 or offsets[-1] != n or any(b < a for a, b in zip(offsets, offsets[1:])):
        raise BadRequest("sequence offsets must start at 0, end at the token count and not decrease")
    mv = memoryview(body)
    tokens = torch.frombuffer(bytearray(mv[p : p + 4 * n]), dtype=torch.int32).to(torch.int64) if n else torch.zeros(0, dtype=torch.int64)
    p += 4 * n
    if n and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab):
        raise BadRequest(f"a token id is outside the vocabulary of {vocab}")
    mask_bytes = torch.frombuffer(bytearray(mv[p : p + n]), dtype=torch.uint8) if n else torch.zeros(0, dtype=torch.uint8)
    if n and int(mask_bytes.max()) > 1:
        raise BadRequest("a mask byte is not 0 or 1")
    mask = mask_bytes.bool()
    p += n
    if any(body[p:head]):
        raise BadRequest("non-zero padding after the mask")
    p = head
    coef = {}
    if kind == KIND_FORWARD_BACKWARD:
        for bit, name in ((A_LOGPROBS, "logprobs"), (A_ENTROPIES, "entropies"), (A_VALUES, "values")):
            if flags & bit:
                x = torch.frombuffer(bytearray(mv[p : p + 4 * n]), dtype=torch.float32) if n else torch.zeros(0)
                if n and not bool(torch.isfinite(x).all()):
                    raise BadRequest(f"a {name} coefficient is not finite")
                coef[name] = x
                p += 4 * n
    return Request(kind, flags, offsets, tokens, mask, coef)


def encode_answer(n, logprobs, entropies=None, values=None):
    """A forward answer: the arrays are float32 tensors of n entries (None: not asked)."""
    flags = A_LOGPROBS
    parts = [logprobs]
    if entropies is not None:
        flags |= A_ENTROPIES
        parts.append(entropies)
    if values is not None:
        flags |= A_VALUES
        parts.append(values)
    out = bytearray(MAGIC + struct.pack("<HHII", VERSION, KIND_ANSWER, flags, n))
    for x in parts:
        x = x.detach().to("cpu", torch.float32).contiguous()
        if x.numel() != n:
            raise ValueError(f"answer array of {x.numel()} entries for {n} tokens")
        if n and not bool(torch.isfinite(x).all()):
            raise ValueError("the model computed a non-finite value")
        out += x.numpy().tobytes()
    return bytes(out)


def encode_request(kind, flags, offsets, tokens, mask, coef=()):
    """A request body (used by tests and clients written in Python)."""
    n, s = len(tokens), len(offsets) - 1
    out = bytearray(MAGIC + struct.pack("<HHIII", VERSION, kind, flags, s, n))
    out += struct.pack(f"<{s + 1}I", *offsets)
    out += struct.pack(f"<{n}i", *tokens)
    out += bytes(1 if m else 0 for m in mask)
    out += b"\0" * (-len(out) % 4)
    for c in coef:
        out += struct.pack(f"<{n}f", *c)
    return bytes(out)


def decode_answer(body, n):
    """A forward answer's arrays by name (used by tests)."""
    if body[:4] != MAGIC:
        raise ValueError("not an answer")
    _, kind, flags, m = struct.unpack_from("<HHII", body, 4)
    if kind != KIND_ANSWER or m != n or len(body) != 16 + 4 * n * _bits(flags):
        raise ValueError("malformed answer")
    out, p = {}, 16
    for bit, name in ((A_LOGPROBS, "logprobs"), (A_ENTROPIES, "entropies"), (A_VALUES, "values")):
        if flags & bit:
            out[name] = list(struct.unpack_from(f"<{n}f", body, p))
            p += 4 * n
    return out
