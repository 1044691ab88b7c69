#include "swarm/net/wire.hpp"

#include <cstring>
#include <limits>

#include "core/check.hpp"
#include "swarm/net/codec.hpp"

namespace shoal::swarm {

namespace {

// request_id u64 | stage u32 | round u32 | microbatch u64 | text_len u32 | n_tensors u32
constexpr uint64_t kFixedBodyBytes = 8 + 4 + 4 + 8 + 4 + 4;
// dtype codec ndim pad | block u32 | data_bytes u64 (dims come on top)
constexpr uint64_t kMinTensorBytes = 4 + 4 + 8;
constexpr unsigned kMaxDims = 8;

bool known_type(uint8_t t) {
  switch (static_cast<MsgType>(t)) {
    case MsgType::Forward:
    case MsgType::Backward:
    case MsgType::GetState:
    case MsgType::Info:
    case MsgType::Reply:
    case MsgType::Error:
      return true;
  }
  return false;
}

template <class T>
void put(std::vector<uint8_t>& out, T value) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));
}

// Reads little-endian fields off a body, checking every length against what remains.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_, sizeof(T));
    skip(sizeof(T));
    return v;
  }
  void need(uint64_t bytes, const char* what) const {
    SHOAL_CHECK(
        bytes <= left_, InvalidArgument,
        "swarm frame: " << what << " needs " << bytes << " bytes but " << left_ << " remain");
  }
  const uint8_t* take(uint64_t bytes, const char* what) {
    need(bytes, what);
    const uint8_t* at = p_;
    skip(bytes);
    return at;
  }
  size_t left() const { return left_; }

 private:
  void skip(size_t n) {
    p_ += n;
    left_ -= n;
  }
  const uint8_t* p_;
  size_t left_;
};

// Elements of `shape`, or -1 if a dim is negative or the product overflows int64.
int64_t checked_numel(const std::vector<int64_t>& shape) {
  for (int64_t d : shape)
    if (d < 0) return -1;
  for (int64_t d : shape)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

// The encoded byte count a tensor must have; throws naming `index` when its header is inconsistent.
uint64_t expected_bytes(const WireTensor& t, size_t index) {
  SHOAL_CHECK(static_cast<unsigned>(t.dtype) < static_cast<unsigned>(kNumDataTypes),
              InvalidArgument,
              "swarm frame: tensor " << index << " has unknown dtype " << unsigned(t.dtype));
  SHOAL_CHECK(t.shape.size() <= kMaxDims, InvalidArgument,
              "swarm frame: tensor " << index << " has " << t.shape.size() << " dims (at most "
                                     << kMaxDims << ")");
  const int64_t n = checked_numel(t.shape);
  SHOAL_CHECK(
      n >= 0, InvalidArgument,
      "swarm frame: tensor " << index << " has a negative dim or more elements than int64 holds");
  switch (t.codec) {
    case Codec::None: {
      SHOAL_CHECK(t.block == 0, InvalidArgument,
                  "swarm frame: tensor " << index << " is uncompressed but has block " << t.block);
      uint64_t bytes;
      SHOAL_CHECK(
          !__builtin_mul_overflow(static_cast<uint64_t>(n), size_of(t.dtype), &bytes),
          InvalidArgument,
          "swarm frame: tensor " << index << " of " << n << " elements overflows a byte count");
      return bytes;
    }
    case Codec::Float16:
    case Codec::Blockwise8:
      SHOAL_CHECK(t.dtype == DataType::float32, InvalidArgument,
                  "swarm frame: tensor " << index << " uses codec " << codec_name(t.codec)
                                         << " but is " << to_string(t.dtype)
                                         << " (only float32 is compressed)");
      SHOAL_CHECK((t.codec == Codec::Blockwise8) == (t.block != 0), InvalidArgument,
                  "swarm frame: tensor " << index << " with codec " << codec_name(t.codec)
                                         << " has block " << t.block);
      return encoded_bytes(n, t.codec, t.block);
  }
  SHOAL_THROW(InvalidArgument,
              "swarm frame: tensor " << index << " has unknown codec " << unsigned(t.codec));
}

}  // namespace

int64_t WireTensor::numel() const {
  const int64_t n = checked_numel(shape);
  SHOAL_CHECK(n >= 0, InvalidArgument,
              "swarm tensor: a negative dim or more elements than int64 holds");
  return n;
}

EncodedFrame encode(const Message& msg) {
  SHOAL_CHECK(known_type(static_cast<uint8_t>(msg.type)), InvalidArgument,
              "swarm frame: cannot send unknown message type " << unsigned(msg.type));
  SHOAL_CHECK(msg.text.size() <= kMaxTextBytes, InvalidArgument,
              "swarm frame: text of " << msg.text.size() << " bytes exceeds " << kMaxTextBytes);
  SHOAL_CHECK(msg.tensors.size() <= std::numeric_limits<uint32_t>::max(), InvalidArgument,
              "swarm frame: too many tensors");
  EncodedFrame f;
  auto& h = f.header;
  h.reserve(kFrameHeaderBytes + kFixedBodyBytes + msg.text.size() +
            msg.tensors.size() * (kMinTensorBytes + 32));
  put(h, kWireMagic);
  put(h, kWireVersion);
  put(h, static_cast<uint8_t>(msg.type));
  put(h, msg.flags);
  put<uint64_t>(h, 0);  // body_bytes, filled in below
  put(h, msg.request_id);
  put(h, msg.stage);
  put(h, msg.round);
  put(h, msg.microbatch);
  put(h, static_cast<uint32_t>(msg.text.size()));
  h.insert(h.end(), msg.text.begin(), msg.text.end());
  put(h, static_cast<uint32_t>(msg.tensors.size()));
  // Header offsets where each tensor's data is spliced in; pointers are taken once `h` is final.
  std::vector<size_t> cut;
  uint64_t data_total = 0;
  for (size_t i = 0; i < msg.tensors.size(); ++i) {
    const WireTensor& t = msg.tensors[i];
    const uint64_t want = expected_bytes(t, i);
    SHOAL_CHECK(want == t.bytes, InvalidArgument,
                "swarm frame: tensor " << i << " holds " << t.bytes
                                       << " bytes but its shape and codec need " << want);
    SHOAL_CHECK(t.data != nullptr || t.bytes == 0, InvalidArgument,
                "swarm frame: tensor " << i << " has no data");
    put(h, static_cast<uint8_t>(t.dtype));
    put(h, static_cast<uint8_t>(t.codec));
    put(h, static_cast<uint8_t>(t.shape.size()));
    put<uint8_t>(h, 0);
    for (int64_t d : t.shape) put(h, d);
    put(h, t.block);
    put<uint64_t>(h, t.bytes);
    cut.push_back(h.size());
    data_total += t.bytes;
  }
  const uint64_t body = h.size() - kFrameHeaderBytes + data_total;
  std::memcpy(h.data() + 8, &body, sizeof body);
  f.total_bytes = kFrameHeaderBytes + body;
  size_t from = 0;
  for (size_t i = 0; i < msg.tensors.size(); ++i) {
    f.pieces.emplace_back(h.data() + from, cut[i] - from);
    if (msg.tensors[i].bytes > 0) f.pieces.emplace_back(msg.tensors[i].data, msg.tensors[i].bytes);
    from = cut[i];
  }
  if (from < h.size()) f.pieces.emplace_back(h.data() + from, h.size() - from);
  return f;
}

uint64_t parse_header(const uint8_t* header, uint64_t max_body_bytes, MsgType* type) {
  uint32_t magic;
  uint16_t version;
  uint64_t body;
  std::memcpy(&magic, header, 4);
  std::memcpy(&version, header + 4, 2);
  const uint8_t t = header[6];
  std::memcpy(&body, header + 8, 8);
  SHOAL_CHECK(magic == kWireMagic, InvalidArgument,
              "swarm frame: bad magic 0x" << std::hex << magic << " (expected 0x" << kWireMagic
                                          << " \"SWRM\"): not a SWARM peer");
  SHOAL_CHECK(version == kWireVersion, InvalidArgument,
              "swarm frame: version " << version << " but this build speaks " << kWireVersion
                                      << ": run the same shoal on every peer");
  SHOAL_CHECK(known_type(t), InvalidArgument, "swarm frame: unknown message type " << unsigned(t));
  SHOAL_CHECK(body <= max_body_bytes, InvalidArgument,
              "swarm frame: body of " << body << " bytes exceeds the limit of " << max_body_bytes
                                      << " bytes (SHOAL_SWARM_MAX_MESSAGE)");
  SHOAL_CHECK(body >= kFixedBodyBytes, InvalidArgument,
              "swarm frame: body of " << body << " bytes is shorter than the " << kFixedBodyBytes
                                      << "-byte minimum");
  if (type) *type = static_cast<MsgType>(t);
  return body;
}

Message decode(const uint8_t* header, std::shared_ptr<const std::vector<uint8_t>> body) {
  SHOAL_CHECK(body != nullptr, InvalidArgument, "swarm frame: no body");
  MsgType type;
  const uint64_t body_bytes = parse_header(header, std::numeric_limits<uint64_t>::max(), &type);
  SHOAL_CHECK(body_bytes == body->size(), InvalidArgument,
              "swarm frame: header says " << body_bytes << " body bytes but " << body->size()
                                          << " were given");
  Message m;
  m.type = type;
  m.flags = header[7];
  Reader r(body->data(), body->size());
  m.request_id = r.get<uint64_t>("request_id");
  m.stage = r.get<uint32_t>("stage");
  m.round = r.get<uint32_t>("round");
  m.microbatch = r.get<uint64_t>("microbatch");
  const uint32_t text_len = r.get<uint32_t>("text_len");
  SHOAL_CHECK(text_len <= kMaxTextBytes, InvalidArgument,
              "swarm frame: text of " << text_len << " bytes exceeds " << kMaxTextBytes);
  const uint8_t* text = r.take(text_len, "text");
  m.text.assign(reinterpret_cast<const char*>(text), text_len);
  const uint32_t n = r.get<uint32_t>("n_tensors");
  // Bound the count by the bytes left before reserving anything for it.
  SHOAL_CHECK(uint64_t{n} * kMinTensorBytes <= r.left(), InvalidArgument,
              "swarm frame: " << n << " tensors need at least " << uint64_t{n} * kMinTensorBytes
                              << " bytes but " << r.left() << " remain");
  m.tensors.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    WireTensor t;
    const uint8_t dtype = r.get<uint8_t>("tensor dtype");
    const uint8_t codec = r.get<uint8_t>("tensor codec");
    const uint8_t ndim = r.get<uint8_t>("tensor ndim");
    const uint8_t pad = r.get<uint8_t>("tensor pad");
    SHOAL_CHECK(dtype < kNumDataTypes, InvalidArgument,
                "swarm frame: tensor " << i << " has unknown dtype " << unsigned(dtype));
    SHOAL_CHECK(codec <= static_cast<uint8_t>(Codec::Blockwise8), InvalidArgument,
                "swarm frame: tensor " << i << " has unknown codec " << unsigned(codec));
    SHOAL_CHECK(ndim <= kMaxDims, InvalidArgument,
                "swarm frame: tensor " << i << " has " << unsigned(ndim) << " dims (at most "
                                       << kMaxDims << ")");
    SHOAL_CHECK(pad == 0, InvalidArgument,
                "swarm frame: tensor " << i << " has a non-zero pad byte");
    t.dtype = static_cast<DataType>(dtype);
    t.codec = static_cast<Codec>(codec);
    t.shape.resize(ndim);
    for (auto& d : t.shape) {
      d = r.get<int64_t>("tensor dims");
      SHOAL_CHECK(d >= 0, InvalidArgument,
                  "swarm frame: tensor " << i << " has negative dim " << d);
    }
    t.block = r.get<uint32_t>("tensor block");
    const uint64_t bytes = r.get<uint64_t>("tensor data_bytes");
    const uint64_t want = expected_bytes(t, i);
    SHOAL_CHECK(bytes == want, InvalidArgument,
                "swarm frame: tensor " << i << " says " << bytes
                                       << " bytes but its shape and codec need " << want);
    SHOAL_CHECK(
        bytes <= r.left(), InvalidArgument,
        "swarm frame: tensor " << i << " says " << bytes << " bytes but " << r.left() << " remain");
    t.data = r.take(bytes, "tensor data");
    t.bytes = bytes;
    t.owner = body;
    m.tensors.push_back(std::move(t));
  }
  SHOAL_CHECK(r.left() == 0, InvalidArgument,
              "swarm frame: " << r.left() << " trailing bytes after the last tensor");
  return m;
}

std::vector<uint8_t> encode_to_bytes(const Message& msg) {
  EncodedFrame f = encode(msg);
  std::vector<uint8_t> out;
  out.reserve(f.total_bytes);
  for (const auto& [p, n] : f.pieces) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  return out;
}

Message decode_from_bytes(const uint8_t* data, size_t size, uint64_t max_body_bytes) {
  SHOAL_CHECK(size >= kFrameHeaderBytes, InvalidArgument,
              "swarm frame: " << size << " bytes, shorter than the " << kFrameHeaderBytes
                              << "-byte header");
  const uint64_t body = parse_header(data, max_body_bytes);
  const uint64_t have = size - kFrameHeaderBytes;
  SHOAL_CHECK(have >= body, InvalidArgument,
              "swarm frame: truncated body: the header says " << body << " bytes but " << have
                                                              << " follow");
  SHOAL_CHECK(
      have == body, InvalidArgument,
      "swarm frame: " << have - body << " trailing bytes after the " << body << "-byte body");
  auto owned = std::make_shared<const std::vector<uint8_t>>(data + kFrameHeaderBytes, data + size);
  return decode(data, std::move(owned));
}

}  // namespace shoal::swarm
