"""Independent safetensors reader (standard library only) for checkpoint's peer test.

Usage: python3 read_safetensors.py FILE
Prints one JSON object: {"metadata": {...}, "header_len": N, "tensors": [{"name", "dtype",
"shape", "sha256"}...]} where sha256 is over the tensor's raw little-endian bytes. It checks the
layout rules of the safetensors specification itself and exits non-zero if one is broken.
"""
import hashlib
import json
import struct
import sys

SIZES = {"F32": 4, "F16": 2, "BF16": 2}


def main(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    assert 8 + n <= len(blob), "header length past end of file"
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    data = blob[8 + n :]
    meta = header.pop("__metadata__", None)
    entries = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"])
    pos = 0
    out = []
    for name, info in entries:
        begin, end = info["data_offsets"]
        assert begin == pos, "%s: not contiguous (%d != %d)" % (name, begin, pos)
        numel = 1
        for d in info["shape"]:
            numel *= d
        assert end - begin == numel * SIZES[info["dtype"]], "%s: size mismatch" % name
        raw = data[begin:end]
        if info["dtype"] == "F32":
            # Decoding proves the bytes are whole little-endian floats.
            struct.unpack("<%df" % numel, raw)
        out.append({"name": name, "dtype": info["dtype"], "shape": info["shape"],
                    "sha256": hashlib.sha256(raw).hexdigest()})
        pos = end
    assert pos == len(data), "data section has %d bytes, tensors cover %d" % (len(data), pos)
    json.dump({"metadata": meta, "header_len": n, "tensors": out}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
