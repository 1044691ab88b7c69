// The wire rules of frames and handshakes, stated again from the protocol's description
// (docs/architecture.md, src/transport/frame.hpp's comments) and read from raw little-endian
// bytes at fixed offsets: an oracle for the fuzz targets that shares no code with the parser
// it judges (validate(), Connection, HelloBook).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace shoal::fuzz_rules {

inline uint64_t le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

constexpr uint64_t kMagic = 0x4c4f4853;  // the bytes "SHOL"
constexpr uint64_t kVersion = 4;

// Frame header, 40 bytes: magic u32 @0, version u16 @4, kind u8 @6, flags u8 @7, communicator
// u64 @8, operation u64 @16, frame index u32 @24, signature u32 @28, payload length u64 @32.
constexpr size_t kHeaderBytes = 40;
enum Kind : uint8_t { collective = 1, p2p = 2, goodbye = 3, abort = 4, ack = 5, heartbeat = 6 };
constexpr uint8_t kByReference = 1;  // the only flag
constexpr uint64_t kMaxAbortBytes = 64 * 1024;

struct Frame {
  bool acceptable;        // a receiver must take the header (else: an error, nothing more read)
  uint64_t wire_payload;  // bytes that follow the header on the wire
  uint8_t kind;
};

/// Judges header `h` (40 bytes) on communicator `comm_id` with a frame limit of `max_frame`;
/// `after_goodbye`: the peer has said goodbye, so no data frame may follow.
inline Frame judge_frame(const uint8_t* h, uint64_t comm_id, uint64_t max_frame,
                         bool after_goodbye) {
  const uint8_t kind = h[6], flags = h[7];
  const uint64_t length = le(h + 32, 8);
  Frame f{false, 0, kind};
  if (le(h, 4) != kMagic || le(h + 4, 2) != kVersion || le(h + 8, 8) != comm_id) return f;
  if (kind < collective || kind > heartbeat || (flags & ~kByReference) != 0 || length > max_frame)
    return f;
  switch (kind) {
    case heartbeat:
      f.acceptable = length == 0;
      return f;  // a heartbeat carries nothing
    case goodbye:
    case ack:
      f.acceptable = true;
      return f;  // header only
    case abort:
      f.acceptable = length <= kMaxAbortBytes;
      f.wire_payload = length;
      return f;
    default:  // collective, p2p
      f.acceptable = !after_goodbye;
      f.wire_payload = (flags & kByReference) ? 8 : length;  // by reference: the address
      return f;
  }
}

/// The offset of the first header in `stream` (a peer's bytes from the start) that a receiver
/// must reject, following only frames the rules accept; SIZE_MAX if none lies within the
/// stream (or the walk reaches an abort frame, after which a receiver reads nothing).
inline size_t first_rejected_header(const uint8_t* stream, size_t size, uint64_t comm_id,
                                    uint64_t max_frame) {
  bool after_goodbye = false;
  for (size_t at = 0; at + kHeaderBytes <= size;) {
    const Frame f = judge_frame(stream + at, comm_id, max_frame, after_goodbye);
    if (!f.acceptable) return at;
    if (f.kind == abort) return SIZE_MAX;
    after_goodbye = after_goodbye || f.kind == goodbye;
    if (f.wire_payload > size) return SIZE_MAX;
    at += kHeaderBytes + f.wire_payload;
  }
  return SIZE_MAX;
}

// Handshake, 32 bytes: magic u32 @0, version u16 @4, byte-order check u16 @6 (0x0102),
// communicator u64 @8, rank i32 @16, world size i32 @20, rail u16 @24, rails u16 @26,
// reserved u32 @28.
constexpr size_t kHelloBytes = 32;
constexpr int kMaxRails = 64;

/// Whether an acceptor of rank `acceptor` in a world of `world` may admit handshake `h` at all
/// (before what it knows of other connections): a well-formed handshake of this communicator
/// from a rank above the acceptor's (lower ranks accept, higher ones connect), rail within rails.
inline bool hello_admissible(const uint8_t* h, uint64_t comm_id, int world, int acceptor) {
  const int64_t rank = static_cast<int32_t>(le(h + 16, 4)),
                size = static_cast<int32_t>(le(h + 20, 4));
  const uint64_t rail = le(h + 24, 2), rails = le(h + 26, 2);
  return le(h, 4) == kMagic && le(h + 4, 2) == kVersion && le(h + 6, 2) == 0x0102 &&
         le(h + 8, 8) == comm_id && size == world && rank > acceptor && rank < world &&
         rails >= 1 && rails <= kMaxRails && rail < rails;
}

/// Rail 0's announcement: how many connections the pair has (what a complete peer holds).
inline uint64_t hello_rails(const uint8_t* h) { return le(h + 26, 2); }
inline uint64_t hello_rail(const uint8_t* h) { return le(h + 24, 2); }
inline int hello_rank(const uint8_t* h) { return static_cast<int32_t>(le(h + 16, 4)); }

}  // namespace shoal::fuzz_rules
