#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/): a few valid
inputs each, in the formats the targets' comments describe. Rerun after changing a format."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
COMM = 0x1122334455667788
MAGIC, VERSION = 0x4C4F4853, 4  # src/transport/frame.hpp kProtocolVersion
COLLECTIVE, P2P, GOODBYE, ABORT, ACK, HEARTBEAT = 1, 2, 3, 4, 5, 6


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- connection: script ops (fuzz_connection.cpp), then the peer's stream ----
def frame(kind, seq=0, tag=0, sig=0, length=0, flags=0, comm=COMM):
    return struct.pack("<IHBBQQIIQ", MAGIC, VERSION, kind, flags, comm, seq, tag, sig, length)


def recv(kind_p2p, seq, tag, sig, length):
    return bytes([0, kind_p2p, seq, tag, sig]) + struct.pack("<H", length)


def send(kind_p2p, seq, tag, sig, length):
    return bytes([1, kind_p2p, seq, tag, sig]) + struct.pack("<H", length)


def release(data):
    return bytes([2]) + struct.pack("<H", len(data)) + data


END = bytes([9])
write("connection", "matched", recv(0, 1, 0, 7, 16) + END + frame(COLLECTIVE, 1, 0, 7, 16) + bytes(16) + frame(GOODBYE))
write("connection", "heartbeats",
      recv(0, 2, 0, 7, 16) + END + frame(HEARTBEAT) + frame(COLLECTIVE, 2, 0, 7, 16) + bytes(16) + frame(HEARTBEAT)
      + frame(GOODBYE))
write("connection", "eager_then_recv",
      release(frame(P2P, 4, 0, 9, 8) + bytes(8)) + recv(1, 4, 0, 9, 8) + END + frame(GOODBYE))
write("connection", "parked",
      bytes([4, 7]) + release(frame(COLLECTIVE, 2, 1, 3, 5000)) + recv(0, 2, 1, 3, 5000) + END + bytes(5000))
write("connection", "by_reference", recv(0, 5, 0, 1, 4096) + END + frame(COLLECTIVE, 5, 0, 1, 4096, flags=1) +
      struct.pack("<Q", 0xDEADBEEF000))
write("connection", "ack", bytes([7]) + send(0, 3, 0, 1, 100) + bytes([3]) + END + frame(ACK, 3, 0, 1, 0))
msg = b"\x02" + struct.pack("<i", 2) + b"rank 2 timed out"
write("connection", "abort", recv(0, 1, 0, 7, 16) + END + frame(ABORT, length=len(msg)) + msg)
write("connection", "mismatch", recv(0, 1, 0, 7, 16) + END + frame(COLLECTIVE, 1, 0, 8, 16) + bytes(16))
write("connection", "sends_partial", bytes([5, 13]) + send(1, 1, 0, 2, 300) + send(1, 2, 0, 2, 0) + bytes([3, 5, 255, 3, 8]) + END)


# ---- store: chunks [who|read<<1|close<<2|keyed<<3 (first chunk)][len][bytes] (src/store/tcp_store_fuzz.hpp) ----
def s(b):
    return struct.pack("<Q", len(b)) + b


def chunk(who, data, read=True, close=False, keyed=False):
    out = b""
    while True:  # a request longer than a chunk continues in the next one
        part, data = data[:255], data[255:]
        last = not data
        out += bytes([who | (2 if read and last else 0) | (4 if close and last else 0) | (8 if keyed else 0),
                      len(part)]) + part
        if last:
            return out


SET, CAS, GET, ADD, CHECK, WAIT, NUM, WATCH, DEL = range(9)
write("store", "set_get", chunk(0, bytes([SET]) + s(b"/a") + s(b"1") + bytes([WAIT]) + struct.pack("<Q", 1) + s(b"/a") +
                                 bytes([GET]) + s(b"/a")))
write("store", "add", chunk(0, bytes([ADD]) + s(b"init/") + struct.pack("<q", 1) + bytes([ADD]) + s(b"init/") +
                             struct.pack("<q", -3) + bytes([NUM])))
write("store", "wait_woken", chunk(0, bytes([WAIT]) + struct.pack("<Q", 2) + s(b"/x") + s(b"/y")) +
      chunk(1, bytes([SET]) + s(b"/x") + s(b"1") + bytes([SET]) + s(b"/y") + s(b"2")) + chunk(0, b"", read=True))
write("store", "watch_cas_delete", chunk(1, bytes([WATCH]) + s(b"/k")) +
      chunk(0, bytes([CAS]) + s(b"/k") + s(b"") + s(b"v1") + bytes([CAS]) + s(b"/k") + s(b"v1") + s(b"v2") +
            bytes([CHECK]) + struct.pack("<Q", 1) + s(b"/k") + bytes([DEL]) + s(b"/k"), close=True))
write("store", "big_value", chunk(0, bytes([SET]) + s(b"/big") + s(bytes(range(256)) * 3) + bytes([GET]) + s(b"/big")))
write("store", "get_missing", chunk(0, bytes([GET]) + s(b"/nope")))
AUTH = 0xA5  # with a secret (first chunk's bit 3): a wrong proof, and a request without authenticating
write("store", "auth_wrong_proof", chunk(0, bytes([AUTH]) + bytes(range(32)), keyed=True) + chunk(0, bytes(32)))
write("store", "auth_skipped", chunk(1, bytes([SET]) + s(b"/a") + s(b"1"), keyed=True))


# ---- hello: u8 rank, u8 size, then Hellos (fuzz_hello.cpp) ----
def hello(rank, size, rail=0, rails=1, comm=COMM):
    return struct.pack("<IHHQiiHHI", MAGIC, VERSION, 0x0102, comm, rank, size, rail, rails, 0)


write("hello", "three_peers", bytes([0, 3]) + hello(1, 4) + hello(3, 4) + hello(2, 4))
write("hello", "rails", bytes([1, 3]) + hello(3, 4, 1, 3) + hello(3, 4, 0, 3) + hello(3, 4, 2, 3) + hello(2, 4, 0, 2) +
      hello(2, 4, 1, 2))
write("hello", "strangers", bytes([0, 1]) + hello(1, 2, comm=1) + hello(0, 2) + hello(1, 2, 1, 2) + hello(1, 2, 0, 2))


# ---- swarm: one whole SWARM frame (src/swarm/net/wire.hpp, fuzz_swarm.cpp) ----
SWRM, SWRM_VERSION = 0x4D525753, 1
FORWARD, BACKWARD, GETSTATE, INFO, REPLY, ERROR = 1, 2, 3, 4, 64, 65
INT8, UINT8, INT32, INT64, FLOAT16, BFLOAT16, FLOAT32, FLOAT64 = range(8)
NONE, FP16, Q8 = 0, 1, 2


def tensor(dtype, codec, shape, data, block=0):
    return struct.pack("<BBBB", dtype, codec, len(shape), 0) + struct.pack(f"<{len(shape)}q", *shape) + \
        struct.pack("<IQ", block, len(data)) + data


def swarm(kind, tensors=(), text=b"", flags=0, rid=7, stage=1, rnd=3, mb=11):
    body = struct.pack("<QIIQI", rid, stage, rnd, mb, len(text)) + text + struct.pack("<I", len(tensors)) + \
        b"".join(tensors)
    return struct.pack("<IHBBQ", SWRM, SWRM_VERSION, kind, flags, len(body)) + body


write("swarm", "forward_fp32", swarm(FORWARD, [tensor(FLOAT32, NONE, [2, 3], struct.pack("<6f", *range(6)))]))
write("swarm", "backward_fp16_int8", swarm(BACKWARD, [
    tensor(FLOAT32, FP16, [4], struct.pack("<4H", 0x3C00, 0x7BFF, 0x0001, 0xFC00)),
    tensor(FLOAT32, Q8, [5], struct.pack("<2f", 0.5, 0.25) + bytes([1, 255, 127, 129, 0]), block=3),
    tensor(INT64, NONE, [2], struct.pack("<2q", 1, -1))]))
write("swarm", "info_json", swarm(INFO, text=b'{"stage":1,"queue":4}'))
write("swarm", "error_reply", swarm(ERROR, text=b"stage 1 is overloaded", flags=1))
write("swarm", "state_reply", swarm(REPLY, [tensor(FLOAT16, NONE, [0, 3], b""), tensor(INT8, NONE, [], b"\x05"),
                                            tensor(FLOAT64, NONE, [1, 1, 1, 1, 1, 1, 1, 1], bytes(8))]))
