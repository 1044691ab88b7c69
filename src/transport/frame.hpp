// The wire frame: a fixed header, validated by the receiver before any payload byte is
// accepted, followed by `length` payload bytes. Little-endian (shoal runs on x86-64 and
// aarch64 hosts; mixed-endian jobs are rejected by the version handshake).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shoal::transport {

inline constexpr uint32_t kFrameMagic = 0x4c4f4853;  // "SHOL"
inline constexpr uint16_t kProtocolVersion = 4;      // 4: p2p frames carry the user's tag

enum class FrameKind : uint8_t {
  collective = 1,  // payload of a collective's step
  p2p = 2,         // payload of send/recv
  goodbye = 3,     // the sender closes its communicator cleanly; no more frames follow
  abort = 4,       // the sender broke; payload is an error code byte and a message
  ack = 5,        // the receiver pulled a by-reference frame (same seq and tag): its buffer is free
  heartbeat = 6,  // no payload: the sender's progress thread is alive (sent when the link is quiet)
};

/// FrameHeader::tag of a heartbeat whose sender waits in a collective (seq and signature say
/// which; tag 0: in none): lets a peer in the same collective with other arguments fail where no
/// frame of the call ever reaches it (both ranks of a reduce believing they are its root, over
/// TCP).
inline constexpr uint32_t kHeartbeatInCollective = 1;

/// The p2p tag of a collective's own point-to-point phases (the hierarchy's): such frames keep
/// their order against the collectives' frames of the pair, as every frame did before tags
/// selected queues, so that a rank in another collective there is a MismatchError at once.
inline constexpr uint32_t kOrderedP2pTag = 0xa5ed0001;

/// FrameHeader::flags
inline constexpr uint8_t kFlagByReference = 1;  // payload is the 8-byte address of the data in the
                                                // sender's memory; the receiver pulls it (CMA)

#pragma pack(push, 1)
struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t version = kProtocolVersion;
  FrameKind kind = FrameKind::collective;
  uint8_t flags = 0;
  uint64_t comm_id = 0;
  uint64_t seq = 0;        // operation number: collective counter, or p2p counter of the pair
                           // with the top bit set
  uint32_t tag = 0;        // collective: index of this frame among the operation's frames to
                           // this peer; p2p: the user's tag
  uint32_t signature = 0;  // hash of (collective, dtype, op, count, root): catches mismatched calls
  uint64_t length = 0;     // payload bytes
};
#pragma pack(pop)
static_assert(sizeof(FrameHeader) == 40);

/// Checks magic, version, communicator, kind and length bound. Returns an error text naming
/// what is wrong, or nullopt if the header is acceptable.
std::optional<std::string> validate(const FrameHeader& header, uint64_t comm_id,
                                    uint64_t max_length);

/// The handshake a connecting rank sends first.
#pragma pack(push, 1)
struct Hello {
  uint32_t magic = kFrameMagic;
  uint16_t version = kProtocolVersion;
  uint16_t endian_check = 0x0102;
  uint64_t comm_id = 0;
  int32_t rank = -1;
  int32_t size = 0;
  uint16_t rail = 0;   // which of the pair's connections this is (one per NIC)
  uint16_t rails = 1;  // on rail 0: how many connections the pair has
  uint32_t reserved = 0;
};
#pragma pack(pop)

std::optional<std::string> validate(const Hello& hello, uint64_t comm_id, int size);

}  // namespace shoal::transport
