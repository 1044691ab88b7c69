// SWARM messages: the requests and replies that cross between trainers and stage servers.
// Versioned and length-checked: a frame from another version, of a bad type, with a length
// that does not add up or above the receiver's limit is rejected with InvalidArgumentError
// naming what was wrong, before anything is allocated for it. Tensors travel as raw bytes
// (optionally compressed, codec.hpp) and are sent by scatter-gather from their own memory.
//
// Frame (little-endian):
//   magic "SWRM" u32 | version u16 | type u8 | flags u8 | body_bytes u64
//   body: request_id u64 | stage u32 | round u32 | microbatch u64 | text_len u32 | text
//         | n_tensors u32 | per tensor: dtype u8 codec u8 ndim u8 pad u8 | dims i64 x ndim
//                                     | block u32 | data_bytes u64 | data
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shoal/error.hpp"  // the InvalidArgumentError etc. these functions throw
#include "shoal/types.hpp"

namespace shoal::swarm {

inline constexpr uint32_t kWireMagic = 0x4d525753;  // "SWRM"
inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 16;
/// Longest `text` a frame may carry (error messages and JSON metadata; state travels as tensors).
inline constexpr uint32_t kMaxTextBytes = 16u << 20;

enum class MsgType : uint8_t {
  Forward = 1,  // stage input -> stage output
  Backward =
      2,  // stage input + output gradient (or targets, last stage) -> input gradient (+ loss)
  GetState = 3,  // -> the stage's parameters and optimizer state (joining / migrating peers)
  Info = 4,      // -> JSON text: stage, round, queue, throughput
  Reply = 64,
  Error = 65,  // text: the server's error message
};

/// How a tensor's bytes are encoded on the wire.
enum class Codec : uint8_t {
  None = 0,        // the tensor's own bytes
  Float16 = 1,     // float32 sent as IEEE half
  Blockwise8 = 2,  // float32 sent as int8 with one float32 absmax scale per block
};

/// A tensor on the wire. `data` points either into memory the sender owns (kept alive by
/// `owner` while the frame is written) or into the received frame (owned by `owner`).
struct WireTensor {
  DataType dtype = DataType::float32;  // dtype of the *decoded* tensor
  Codec codec = Codec::None;
  std::vector<int64_t> shape;
  uint32_t block = 0;  // Blockwise8 block size (values per scale), else 0
  const uint8_t* data = nullptr;
  size_t bytes = 0;  // encoded bytes at `data`
  std::shared_ptr<const void> owner;

  int64_t numel() const;
};

struct Message {
  MsgType type = MsgType::Info;
  uint8_t flags = 0;
  uint64_t request_id = 0;
  uint32_t stage = 0;
  uint32_t round = 0;
  uint64_t microbatch = 0;
  std::string text;  // error message or JSON metadata
  std::vector<WireTensor> tensors;
};

/// The bytes of `msg` other than the tensors' data, and the (pointer, length) pieces that make
/// up the whole frame in order: write them with writev, no copy of tensor data. The pieces
/// point into `header` and the tensors' memory: move an EncodedFrame, never copy it, and keep
/// the message's tensors alive until it is written.
struct EncodedFrame {
  std::vector<uint8_t> header;                         // fixed header + metadata
  std::vector<std::pair<const void*, size_t>> pieces;  // header pieces and tensor data
  size_t total_bytes = 0;
};
EncodedFrame encode(const Message& msg);

/// Parses the 16-byte frame header; returns the body length. Throws InvalidArgumentError for a
/// wrong magic or version, an unknown type, or a body above `max_body_bytes`.
uint64_t parse_header(const uint8_t* header, uint64_t max_body_bytes, MsgType* type = nullptr);

/// Parses a whole body (after parse_header) that `owner` keeps alive; tensors point into it
/// (unaligned: read them with memcpy or decode_float). Every length is checked against what
/// remains and against the decoded shape; trailing bytes are rejected.
Message decode(const uint8_t* header, std::shared_ptr<const std::vector<uint8_t>> body);

/// Whole frame into one buffer (tests, fuzzing) and back.
std::vector<uint8_t> encode_to_bytes(const Message& msg);
Message decode_from_bytes(const uint8_t* data, size_t size, uint64_t max_body_bytes);

}  // namespace shoal::swarm
