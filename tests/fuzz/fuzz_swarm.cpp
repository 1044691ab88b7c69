// libFuzzer target: arbitrary bytes as a SWARM frame (swarm::decode_from_bytes, what the RPC
// server and client do with each frame). Whatever arrives is either refused with a shoal::Error
// or decodes to tensors whose every byte lies inside the frame and whose float tensors decode
// under their codec without reading past their data.
//
// Input: one whole frame (16-byte header, then the body).
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "swarm/net/codec.hpp"
#include "swarm/net/wire.hpp"

using namespace shoal::swarm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Message m;
  try {
    m = decode_from_bytes(data, size, 1u << 20);
  } catch (const shoal::Error&) {
    return 0;
  }
  for (const auto& t : m.tensors) {
    if (t.bytes > size) std::abort();  // a tensor larger than the frame it came in
    if (t.dtype != shoal::DataType::float32) continue;
    std::vector<float> out(static_cast<size_t>(t.numel()));
    try {
      decode_float(t, out.data());
    } catch (const shoal::Error&) {
      std::abort();  // decode accepted the tensor: its codec must decode it
    }
  }
  // What decoded re-encodes to the same frame.
  if (encode_to_bytes(m) != std::vector<uint8_t>(data, data + size)) std::abort();
  return 0;
}
