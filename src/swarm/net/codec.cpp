#include "swarm/net/codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.hpp"

namespace shoal::swarm {

namespace {

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// IEEE binary32 -> binary16, round to nearest even; NaN stays NaN (quiet), overflow -> inf.
uint16_t to_half(float x) {
  const uint32_t f = bits_of(x);
  const uint32_t sign = (f >> 16) & 0x8000u;
  uint32_t a = f & 0x7fffffffu;
  if (a >= 0x7f800000u)  // inf, or NaN with its top payload bits and the quiet bit set
    return static_cast<uint16_t>(sign | 0x7c00u |
                                 (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0u));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a < 0x38800000u) {
    // Below 2^-14: a half subnormal (or 0). Adding 0.5 puts the value's 2^-24 units in the
    // low mantissa bits and lets the FPU round to nearest even.
    const float t = float_of(a) + 0.5f;
    return static_cast<uint16_t>(sign | (bits_of(t) - 0x3f000000u));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even;
  // a carry out of the mantissa correctly bumps the exponent.
  a += 0xc8000fffu + ((a >> 13) & 1u);
  return static_cast<uint16_t>(sign | (a >> 13));
}

float from_half(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float
    const float v = static_cast<float>(m) * 0x1p-24f;
    return float_of(sign | bits_of(v));
  }
  if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));
  return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

}  // namespace

Codec parse_codec(const std::string& name) {
  if (name == "none") return Codec::None;
  if (name == "fp16" || name == "float16") return Codec::Float16;
  if (name == "int8" || name == "blockwise8") return Codec::Blockwise8;
  SHOAL_THROW(InvalidArgument, "unknown codec '" << name << "': use none, fp16 or int8");
}

const char* codec_name(Codec codec) {
  switch (codec) {
    case Codec::None:
      return "none";
    case Codec::Float16:
      return "fp16";
    case Codec::Blockwise8:
      return "int8";
  }
  return "unknown";
}

size_t encoded_bytes(int64_t count, Codec codec, uint32_t block) {
  SHOAL_CHECK(count >= 0, InvalidArgument, "codec: negative element count " << count);
  const auto n = static_cast<uint64_t>(count);
  constexpr uint64_t kMax = std::numeric_limits<size_t>::max();
  switch (codec) {
    case Codec::None:
      SHOAL_CHECK(n <= kMax / 4, InvalidArgument,
                  "codec: " << n << " float32 values overflow a byte count");
      return n * 4;
    case Codec::Float16:
      SHOAL_CHECK(n <= kMax / 2, InvalidArgument,
                  "codec: " << n << " float16 values overflow a byte count");
      return n * 2;
    case Codec::Blockwise8: {
      SHOAL_CHECK(block > 0, InvalidArgument, "codec: int8 needs a block size above 0");
      const uint64_t blocks = n / block + (n % block != 0);  // no overflow, unlike n + block - 1
      SHOAL_CHECK(blocks <= (kMax - n) / 4, InvalidArgument,
                  "codec: " << n << " int8 values overflow a byte count");
      return blocks * 4 + n;
    }
  }
  SHOAL_THROW(InvalidArgument, "codec: unknown codec " << unsigned(codec));
}

WireTensor encode_float(const float* values, std::vector<int64_t> shape, Codec codec,
                        std::shared_ptr<const void> owner, uint32_t block) {
  WireTensor t;
  t.dtype = DataType::float32;
  t.codec = codec;
  t.shape = std::move(shape);
  const int64_t count = t.numel();
  const size_t n = static_cast<size_t>(count);
  t.bytes = encoded_bytes(count, codec, block);
  SHOAL_CHECK(values != nullptr || n == 0, InvalidArgument, "codec: no values to encode");
  if (codec == Codec::None) {
    t.data = reinterpret_cast<const uint8_t*>(values);
    t.owner = std::move(owner);
    return t;
  }
  auto buf = std::make_shared<std::vector<uint8_t>>(t.bytes);
  uint8_t* out = buf->data();
  if (codec == Codec::Float16) {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = to_half(values[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
  } else {
    t.block = block;
    const size_t blocks = n / block + (n % block != 0);
    auto* q = reinterpret_cast<int8_t*>(out + blocks * 4);
    for (size_t b = 0; b < blocks; ++b) {
      const size_t lo = b * block, hi = std::min(n, lo + block);
      float absmax = 0;
      for (size_t i = lo; i < hi; ++i) {
        // A NaN or inf has no int8 code: refuse rather than spread it over the block.
        SHOAL_CHECK(std::isfinite(values[i]), InvalidArgument,
                    "codec int8: value "
                        << i << " is " << values[i]
                        << "; int8 compression needs finite values (use fp16 or none)");
        absmax = std::max(absmax, std::fabs(values[i]));
      }
      const float scale = absmax / 127.0f;
      std::memcpy(out + 4 * b, &scale, 4);
      for (size_t i = lo; i < hi; ++i) {
        const float r = scale > 0 ? std::nearbyint(values[i] / scale) : 0.0f;
        q[i] = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
      }
    }
  }
  t.data = out;
  t.owner = std::move(buf);
  return t;
}

WireTensor raw_tensor(DataType dtype, const void* data, std::vector<int64_t> shape,
                      std::shared_ptr<const void> owner) {
  WireTensor t;
  t.dtype = dtype;
  t.codec = Codec::None;
  t.shape = std::move(shape);
  const auto n = static_cast<uint64_t>(t.numel());
  SHOAL_CHECK(n <= std::numeric_limits<size_t>::max() / 8, InvalidArgument,
              "raw tensor of " << n << " elements overflows a byte count");
  t.bytes = n * size_of(dtype);
  SHOAL_CHECK(data != nullptr || t.bytes == 0, InvalidArgument, "raw tensor: no data");
  t.data = static_cast<const uint8_t*>(data);
  t.owner = std::move(owner);
  return t;
}

void decode_float(const WireTensor& tensor, float* out) {
  SHOAL_CHECK(tensor.dtype == DataType::float32, InvalidArgument,
              "decode_float: the tensor is " << to_string(tensor.dtype) << ", not float32");
  const int64_t count = tensor.numel();
  const size_t n = static_cast<size_t>(count);
  const size_t want =
      encoded_bytes(count, tensor.codec, tensor.codec == Codec::Blockwise8 ? tensor.block : 1);
  SHOAL_CHECK(tensor.bytes == want, InvalidArgument,
              "decode_float: " << tensor.bytes << " bytes but " << n << " values under codec "
                               << codec_name(tensor.codec) << " need " << want);
  SHOAL_CHECK(tensor.data != nullptr || n == 0, InvalidArgument, "decode_float: no data");
  if (n == 0) return;
  const uint8_t* in = tensor.data;
  switch (tensor.codec) {
    case Codec::None:
      std::memcpy(out, in, n * 4);
      return;
    case Codec::Float16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, in + 2 * i, 2);
        out[i] = from_half(h);
      }
      return;
    case Codec::Blockwise8: {
      const size_t block = tensor.block;
      const size_t blocks = n / block + (n % block != 0);
      const auto* q = reinterpret_cast<const int8_t*>(in + blocks * 4);
      for (size_t b = 0; b < blocks; ++b) {
        float scale;
        std::memcpy(&scale, in + 4 * b, 4);
        const size_t lo = b * block, hi = std::min(n, lo + block);
        for (size_t i = lo; i < hi; ++i) out[i] = static_cast<float>(q[i]) * scale;
      }
      return;
    }
  }
}

}  // namespace shoal::swarm
