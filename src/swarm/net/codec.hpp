// Compression of activations and gradients that cross stages: float16, and blockwise 8-bit
// quantization (per block of `block` values one float32 scale = absmax/127, values rounded to
// int8), as in Dettmers et al.'s 8-bit optimizers and SWARM's activation compression.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "swarm/net/wire.hpp"

namespace shoal::swarm {

inline constexpr uint32_t kDefaultQuantBlock = 256;

/// Parses "none", "fp16" or "int8" (InvalidArgumentError otherwise).
Codec parse_codec(const std::string& name);
const char* codec_name(Codec codec);

/// Encodes `count` float32 values into a WireTensor that owns its bytes. Codec::None keeps a
/// pointer to `values` (no copy): `owner` must keep them alive.
WireTensor encode_float(const float* values, std::vector<int64_t> shape, Codec codec,
                        std::shared_ptr<const void> owner = {},
                        uint32_t block = kDefaultQuantBlock);

/// A tensor of any dtype sent as its own bytes (no copy).
WireTensor raw_tensor(DataType dtype, const void* data, std::vector<int64_t> shape,
                      std::shared_ptr<const void> owner);

/// Decodes a float32 tensor (any codec) into `out` (numel() values). InvalidArgumentError when
/// the byte count does not match the shape and codec.
void decode_float(const WireTensor& tensor, float* out);

/// Encoded size in bytes of `count` float32 values under `codec`.
size_t encoded_bytes(int64_t count, Codec codec, uint32_t block = kDefaultQuantBlock);

}  // namespace shoal::swarm
