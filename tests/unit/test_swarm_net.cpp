// SWARM messages, compression and RPC (src/swarm/net): every message type round-trips; the
// codecs keep their error bounds and exact values; hostile or broken frames are refused with
// InvalidArgumentError naming what is wrong; the RPC server answers concurrent clients, turns
// handler exceptions into the right error at the client, survives malformed peers, and its
// clients time out, notice a stopped server and refuse mismatched replies.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <thread>

#include "shoal/error.hpp"
#include "swarm/net/codec.hpp"
#include "swarm/net/rpc.hpp"
#include "swarm/net/wire.hpp"
#include "transport/tcp/auth.hpp"
#include "transport/tcp/socket.hpp"

namespace shoal::swarm {
namespace {

using namespace std::chrono_literals;

// ---- helpers --------------------------------------------------------------------------------

std::vector<uint8_t> tensor_bytes(const WireTensor& t) { return {t.data, t.data + t.bytes}; }

void expect_same(const Message& a, const Message& b) {
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.flags, b.flags);
  EXPECT_EQ(a.request_id, b.request_id);
  EXPECT_EQ(a.stage, b.stage);
  EXPECT_EQ(a.round, b.round);
  EXPECT_EQ(a.microbatch, b.microbatch);
  EXPECT_EQ(a.text, b.text);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].dtype, b.tensors[i].dtype) << i;
    EXPECT_EQ(a.tensors[i].codec, b.tensors[i].codec) << i;
    EXPECT_EQ(a.tensors[i].shape, b.tensors[i].shape) << i;
    EXPECT_EQ(a.tensors[i].block, b.tensors[i].block) << i;
    EXPECT_EQ(tensor_bytes(a.tensors[i]), tensor_bytes(b.tensors[i])) << i;
  }
}

Message round_trip(const Message& m) {
  const auto bytes = encode_to_bytes(m);
  return decode_from_bytes(bytes.data(), bytes.size(), 1u << 30);
}

std::shared_ptr<std::vector<float>> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  auto v = std::make_shared<std::vector<float>>(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  for (auto& x : *v) x = dist(rng);
  return v;
}

Message sample_message(MsgType type) {
  Message m;
  m.type = type;
  m.flags = 3;
  m.request_id = 0x0102030405060708ull;
  m.stage = 2;
  m.round = 77;
  m.microbatch = 123456789;
  m.text = type == MsgType::Info ? R"({"stage":2,"queue":5})" : "";
  return m;
}

// Offsets in a frame (16-byte header first) of a message with `text_len` text bytes.
constexpr size_t kBodyAt = kFrameHeaderBytes;
size_t n_tensors_at(size_t text_len) { return kBodyAt + 28 + text_len; }
size_t first_tensor_at(size_t text_len) { return n_tensors_at(text_len) + 4; }

template <class T>
void poke(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

void set_body_bytes(std::vector<uint8_t>& b, uint64_t n) { poke(b, 8, n); }

// Decoding `bytes` throws InvalidArgumentError whose message contains `needle`.
void expect_rejected(const std::vector<uint8_t>& bytes, const std::string& needle,
                     uint64_t max = 1u << 30) {
  try {
    decode_from_bytes(bytes.data(), bytes.size(), max);
    ADD_FAILURE() << "accepted a frame that should fail with '" << needle << "'";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// A frame with one float32 tensor of shape {4} and no text.
std::vector<uint8_t> one_tensor_frame() {
  static const float v[4] = {1, 2, 3, 4};
  Message m = sample_message(MsgType::Forward);
  m.tensors.push_back(raw_tensor(DataType::float32, v, {4}, nullptr));
  return encode_to_bytes(m);
}

// ---- wire -----------------------------------------------------------------------------------

TEST(SwarmWire, EveryTypeRoundTrips) {
  auto values = random_floats(300, 1);
  for (MsgType type : {MsgType::Forward, MsgType::Backward, MsgType::GetState, MsgType::Info,
                       MsgType::Reply, MsgType::Error}) {
    Message m = sample_message(type);
    if (type == MsgType::Error) m.text = "stage 2 is overloaded";
    if (type != MsgType::Info) {
      m.tensors.push_back(encode_float(values->data(), {3, 100}, Codec::None, values));
      m.tensors.push_back(encode_float(values->data(), {300}, Codec::Float16));
      m.tensors.push_back(encode_float(values->data(), {10, 30}, Codec::Blockwise8, {}, 64));
    }
    expect_same(m, round_trip(m));
  }
}

TEST(SwarmWire, TensorsOfEveryDtypeAndShape) {
  std::vector<uint8_t> pool(8 * 64);
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<uint8_t>(i * 37 + 11);
  const std::vector<std::vector<int64_t>> shapes = {{},  {0},       {3, 0, 2},
                                                    {7}, {2, 3, 4}, {1, 1, 2, 1, 2, 1, 2, 1}};
  Message m = sample_message(MsgType::GetState);
  for (int d = 0; d < kNumDataTypes; ++d)
    for (const auto& shape : shapes)
      m.tensors.push_back(raw_tensor(static_cast<DataType>(d), pool.data(), shape, {}));
  const Message back = round_trip(m);
  expect_same(m, back);
  EXPECT_EQ(back.tensors[0].numel(), 1);  // a scalar
  EXPECT_EQ(back.tensors[1].numel(), 0);
  EXPECT_EQ(back.tensors[2].numel(), 0);
  EXPECT_EQ(back.tensors[4].numel(), 24);
  EXPECT_EQ(back.tensors[4 + 6 * 7].bytes, 24u * 8);  // float64 {2,3,4}
}

TEST(SwarmWire, EmptyMessageAndEmptyTensor) {
  Message m;
  expect_same(m, round_trip(m));
  m.tensors.push_back(encode_float(nullptr, {0, 5}, Codec::Blockwise8));
  m.tensors.push_back(encode_float(nullptr, {0}, Codec::Float16));
  m.tensors.push_back(encode_float(nullptr, {0}, Codec::None));
  const Message back = round_trip(m);
  expect_same(m, back);
  float none;
  for (const auto& t : back.tensors) decode_float(t, &none);
}

TEST(SwarmWire, PiecesPointAtTheTensorsOwnMemory) {
  auto values = random_floats(1000, 2);
  Message m = sample_message(MsgType::Forward);
  m.tensors.push_back(encode_float(values->data(), {1000}, Codec::None, values));
  m.tensors.push_back(encode_float(values->data(), {1000}, Codec::Float16));
  const EncodedFrame f = encode(m);
  bool found = false;
  size_t total = 0;
  for (const auto& [p, n] : f.pieces) {
    found |= p == values->data() && n == 4000;
    total += n;
  }
  EXPECT_TRUE(found) << "the uncompressed tensor was copied";
  EXPECT_EQ(total, f.total_bytes);
  EXPECT_EQ(encode_to_bytes(m).size(), f.total_bytes);
}

TEST(SwarmWire, EncodeRefusesInconsistentTensors) {
  float v[4] = {};
  Message m;
  WireTensor t = raw_tensor(DataType::float32, v, {4}, {});
  t.bytes = 12;
  m.tensors.push_back(t);
  EXPECT_THROW(encode(m), InvalidArgumentError);
  m.tensors[0] = raw_tensor(DataType::int32, v, {4}, {});
  m.tensors[0].codec = Codec::Float16;  // only float32 is compressed
  EXPECT_THROW(encode(m), InvalidArgumentError);
  EXPECT_THROW(raw_tensor(DataType::float32, v, {-1}, {}), InvalidArgumentError);
}

TEST(SwarmWire, RejectsBadHeaders) {
  const auto good = one_tensor_frame();
  ASSERT_NO_THROW(decode_from_bytes(good.data(), good.size(), 1u << 20));
  auto b = good;
  b[0] ^= 0xff;
  expect_rejected(b, "bad magic");
  b = good;
  poke<uint16_t>(b, 4, 9);
  expect_rejected(b, "version 9");
  b = good;
  b[6] = 5;
  expect_rejected(b, "unknown message type 5");
  expect_rejected({good.begin(), good.begin() + 10}, "shorter than the 16-byte header");
  // Oversized: checked against the limit before anything else about the body.
  expect_rejected(good, "exceeds the limit of 40 bytes", 40);
  b = good;
  set_body_bytes(b, 100ull << 30);
  expect_rejected(b, "exceeds the limit");
  b = good;
  set_body_bytes(b, 8);
  b.resize(kFrameHeaderBytes + 8);
  expect_rejected(b, "shorter than the 32-byte minimum");
}

TEST(SwarmWire, RejectsTruncatedAndTrailingBytes) {
  const auto good = one_tensor_frame();
  expect_rejected({good.begin(), good.end() - 1}, "truncated body");
  auto b = good;
  b.push_back(0);
  expect_rejected(b, "1 trailing bytes after");
  // The same extra byte inside the announced body: trailing after the last tensor.
  set_body_bytes(b, b.size() - kFrameHeaderBytes);
  expect_rejected(b, "1 trailing bytes after the last tensor");
  // Body cut in the middle of the tensor's data (with a matching body length).
  b = {good.begin(), good.end() - 6};
  set_body_bytes(b, b.size() - kFrameHeaderBytes);
  expect_rejected(b, "tensor 0 says 16 bytes but 10 remain");
}

TEST(SwarmWire, RejectsBadTensors) {
  const auto good = one_tensor_frame();
  const size_t t = first_tensor_at(0);  // dtype codec ndim pad | dim | block | data_bytes
  auto b = good;
  poke<uint64_t>(b, t + 4 + 8 + 4, 100);
  expect_rejected(b, "tensor 0 says 100 bytes but its shape and codec need 16");
  b = good;
  poke<int64_t>(b, t + 4, -4);
  expect_rejected(b, "negative dim -4");
  b = good;
  b[t + 2] = 200;
  expect_rejected(b, "200 dims (at most 8)");
  b = good;
  b[t] = 99;
  expect_rejected(b, "unknown dtype 99");
  b = good;
  b[t + 1] = 7;
  expect_rejected(b, "unknown codec 7");
  b = good;
  b[t + 1] = static_cast<uint8_t>(Codec::Blockwise8);  // with block 0
  expect_rejected(b, "has block 0");
  b = good;
  b[t] = static_cast<uint8_t>(DataType::int32);
  b[t + 1] = static_cast<uint8_t>(Codec::Float16);
  expect_rejected(b, "only float32 is compressed");
  b = good;
  poke<uint32_t>(b, n_tensors_at(0), 0xffffffffu);
  expect_rejected(b, "4294967295 tensors need at least");
  b = good;
  poke<uint32_t>(b, kBodyAt + 24, 0x7fffffffu);  // text_len
  expect_rejected(b, "text of 2147483647 bytes exceeds");
  b = good;
  poke<uint32_t>(b, kBodyAt + 24, 1000);
  expect_rejected(b, "text needs 1000 bytes but");
}

TEST(SwarmWire, RejectsElementCountOverflow) {
  // 8 dims of 2^40: the product overflows int64; the frame must not be believed.
  Message m = sample_message(MsgType::Forward);
  std::vector<uint8_t> b = encode_to_bytes(m);
  poke<uint32_t>(b, n_tensors_at(0), 1);
  std::vector<uint8_t> tensor = {static_cast<uint8_t>(DataType::float32), 0, 8, 0};
  for (int i = 0; i < 8; ++i) {
    const int64_t d = int64_t{1} << 40;
    tensor.insert(tensor.end(), reinterpret_cast<const uint8_t*>(&d),
                  reinterpret_cast<const uint8_t*>(&d) + 8);
  }
  tensor.resize(tensor.size() + 12, 0);  // block 0, data_bytes 0
  b.insert(b.end(), tensor.begin(), tensor.end());
  set_body_bytes(b, b.size() - kFrameHeaderBytes);
  expect_rejected(b, "more elements than int64 holds");
  // A zero dim makes any other dim harmless: numel 0.
  poke<int64_t>(b, first_tensor_at(0) + 4, 0);
  EXPECT_EQ(decode_from_bytes(b.data(), b.size(), 1u << 20).tensors[0].numel(), 0);
}

TEST(SwarmWire, FuzzedFramesNeverCrash) {
  // A cheap in-test fuzz: random byte flips of a valid frame either decode or throw Error.
  auto values = random_floats(64, 3);
  Message m = sample_message(MsgType::Backward);
  m.text = "x";
  m.tensors.push_back(encode_float(values->data(), {8, 8}, Codec::Blockwise8, {}, 16));
  m.tensors.push_back(encode_float(values->data(), {64}, Codec::Float16));
  const auto good = encode_to_bytes(m);
  std::mt19937 rng(7);
  std::vector<float> out(1 << 12);
  for (int i = 0; i < 20000; ++i) {
    auto b = good;
    for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k)
      b[rng() % b.size()] = static_cast<uint8_t>(rng());
    if (rng() % 8 == 0) b.resize(rng() % b.size());
    try {
      const Message d = decode_from_bytes(b.data(), b.size(), 1u << 20);
      for (const auto& t : d.tensors)
        if (t.dtype == DataType::float32 && static_cast<size_t>(t.numel()) <= out.size())
          decode_float(t, out.data());
    } catch (const Error&) {
    }
  }
}

// ---- codecs ---------------------------------------------------------------------------------

// Reference binary16 -> float, by arithmetic rather than bit tricks.
float half_reference(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -24);
  if (e == 31)
    return m ? std::numeric_limits<float>::quiet_NaN()
             : sign * std::numeric_limits<float>::infinity();
  return sign * std::ldexp(static_cast<float>(1024 + m), e - 25);
}

std::vector<uint16_t> to_halves(const std::vector<float>& v) {
  const WireTensor t = encode_float(v.data(), {static_cast<int64_t>(v.size())}, Codec::Float16);
  EXPECT_EQ(t.bytes, v.size() * 2);
  std::vector<uint16_t> h(v.size());
  std::memcpy(h.data(), t.data, t.bytes);
  return h;
}

std::vector<float> through(const std::vector<float>& v, Codec codec,
                           uint32_t block = kDefaultQuantBlock) {
  const WireTensor t = encode_float(v.data(), {static_cast<int64_t>(v.size())}, codec, {}, block);
  EXPECT_EQ(t.bytes, encoded_bytes(static_cast<int64_t>(v.size()), codec, block));
  std::vector<float> out(v.size());
  decode_float(t, out.data());
  return out;
}

TEST(SwarmCodec, Float16EveryHalfRoundTripsExactly) {
  std::vector<float> all;
  std::vector<uint16_t> bits;
  for (uint32_t h = 0; h < 65536; ++h) {
    if (((h >> 10) & 31) == 31 && (h & 1023) != 0) continue;  // NaNs: below
    bits.push_back(static_cast<uint16_t>(h));
    all.push_back(half_reference(static_cast<uint16_t>(h)));
  }
  EXPECT_EQ(to_halves(all), bits);
  const auto back = through(all, Codec::Float16);
  for (size_t i = 0; i < all.size(); ++i)
    ASSERT_EQ(std::memcmp(&back[i], &all[i], 4), 0) << "half " << bits[i];
}

TEST(SwarmCodec, Float16ExactValuesAndRounding) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> in = {0.0f,
                                 -0.0f,
                                 1.0f,
                                 65504.0f,
                                 inf,
                                 -inf,
                                 65519.0f,
                                 65520.0f,
                                 0x1p-24f,
                                 0x1p-25f,
                                 0x1.8p-24f,
                                 0x1p-14f,
                                 1.0f + 0x1p-11f,
                                 1.0f + 0x1.8p-10f,
                                 1e-10f,
                                 -70000.0f};
  const std::vector<float> want = {0.0f, -0.0f,    1.0f, 65504.0f, inf,      -inf, 65504.0f,
                                   inf,  0x1p-24f, 0.0f, 0x1p-23f, 0x1p-14f, 1.0f, 1.0f + 0x1p-9f,
                                   0.0f, -inf};
  const auto out = through(in, Codec::Float16);
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i], want[i]) << "input " << in[i];
    EXPECT_EQ(std::signbit(out[i]), std::signbit(want[i])) << "input " << in[i];
  }
  const auto nan =
      through({std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()},
              Codec::Float16);
  EXPECT_TRUE(std::isnan(nan[0]) && std::isnan(nan[1]));
}

TEST(SwarmCodec, Float16RelativeError) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-14, 15);
  std::vector<float> v(100000);
  for (auto& x : v) x = std::ldexp(mant(rng), exp(rng)) * (rng() % 2 ? 1.0f : -1.0f);
  const auto out = through(v, Codec::Float16);
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::fabs(v[i]) > 65504.0f) continue;
    ASSERT_LE(std::fabs(out[i] - v[i]), 1e-3f * std::fabs(v[i])) << v[i];
  }
}

TEST(SwarmCodec, Blockwise8ErrorBoundPerBlock) {
  for (uint32_t block : {1u, 7u, 64u, 256u}) {
    auto v = *random_floats(1000, block, 3.0f);
    for (size_t i = 300; i < 400; ++i) v[i] *= 1000.0f;  // blocks of very different ranges
    for (size_t i = 500; i < 520; ++i) v[i] = 0.0f;
    const auto out = through(v, Codec::Blockwise8, block);
    EXPECT_EQ(encoded_bytes(1000, Codec::Blockwise8, block), (1000 + block - 1) / block * 4 + 1000);
    for (size_t lo = 0; lo < v.size(); lo += block) {
      const size_t hi = std::min(v.size(), lo + block);
      float absmax = 0;
      for (size_t i = lo; i < hi; ++i) absmax = std::max(absmax, std::fabs(v[i]));
      for (size_t i = lo; i < hi; ++i)
        ASSERT_LE(std::fabs(out[i] - v[i]), absmax / 254.0f * (1 + 1e-5f) + 1e-30f)
            << "block " << block << " value " << i;
    }
  }
}

TEST(SwarmCodec, Blockwise8ZeroBlocksAndBadInput) {
  const std::vector<float> zeros(300, 0.0f);
  const WireTensor t = encode_float(zeros.data(), {300}, Codec::Blockwise8, {}, 256);
  for (size_t i = 0; i < t.bytes; ++i) ASSERT_EQ(t.data[i], 0) << i;  // scale 0, values 0
  EXPECT_EQ(through(zeros, Codec::Blockwise8), zeros);
  std::vector<float> v = {1, 2, std::numeric_limits<float>::quiet_NaN(), 4};
  try {
    encode_float(v.data(), {4}, Codec::Blockwise8);
    ADD_FAILURE() << "NaN accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("finite"), std::string::npos) << e.what();
  }
  v[2] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(encode_float(v.data(), {4}, Codec::Blockwise8), InvalidArgumentError);
  EXPECT_THROW(encode_float(v.data(), {4}, Codec::Blockwise8, {}, 0), InvalidArgumentError);
  // Extremes are exact: +-absmax maps to +-127.
  const auto ends = through({-5.0f, 5.0f, 0.0f}, Codec::Blockwise8);
  EXPECT_FLOAT_EQ(ends[0], -5.0f);
  EXPECT_FLOAT_EQ(ends[1], 5.0f);
  EXPECT_EQ(ends[2], 0.0f);
}

TEST(SwarmCodec, NamesSizesAndDecodeChecks) {
  EXPECT_EQ(parse_codec("none"), Codec::None);
  EXPECT_EQ(parse_codec("fp16"), Codec::Float16);
  EXPECT_EQ(parse_codec("int8"), Codec::Blockwise8);
  for (Codec c : {Codec::None, Codec::Float16, Codec::Blockwise8})
    EXPECT_EQ(parse_codec(codec_name(c)), c);
  EXPECT_THROW(parse_codec("zstd"), InvalidArgumentError);
  EXPECT_EQ(encoded_bytes(10, Codec::None), 40u);
  EXPECT_EQ(encoded_bytes(10, Codec::Float16), 20u);
  EXPECT_EQ(encoded_bytes(0, Codec::Blockwise8), 0u);
  EXPECT_EQ(encoded_bytes(257, Codec::Blockwise8, 256), 2u * 4 + 257);
  EXPECT_THROW(encoded_bytes(-1, Codec::None), InvalidArgumentError);
  EXPECT_THROW(encoded_bytes(std::numeric_limits<int64_t>::max(), Codec::Blockwise8, 1),
               InvalidArgumentError);
  int32_t ints[2] = {1, 2};
  float out[2];
  EXPECT_THROW(decode_float(raw_tensor(DataType::int32, ints, {2}, {}), out), InvalidArgumentError);
  WireTensor t = encode_float(reinterpret_cast<float*>(ints), {2}, Codec::None);
  t.bytes = 4;
  EXPECT_THROW(decode_float(t, out), InvalidArgumentError);
  // Codec::None keeps the caller's memory and owner.
  auto owned = random_floats(4, 9);
  const WireTensor none = encode_float(owned->data(), {2, 2}, Codec::None, owned);
  EXPECT_EQ(static_cast<const void*>(none.data), static_cast<const void*>(owned->data()));
  EXPECT_EQ(none.owner.get(), owned.get());
}

// ---- RPC ------------------------------------------------------------------------------------

// Echoes the request; text "boom" throws a std::exception, "mismatch" a MismatchError, "slow"
// sleeps 1.5 s first.
Message echo(Message&& request) {
  if (request.text == "boom") throw std::runtime_error("the handler blew up");
  if (request.text == "mismatch") throw MismatchError("round 3 is over");
  if (request.text == "slow") std::this_thread::sleep_for(1500ms);
  Message reply = std::move(request);
  reply.type = MsgType::Reply;
  reply.stage += 1;
  return reply;
}

Message request_with(uint64_t id, const std::shared_ptr<std::vector<float>>& values,
                     const std::string& text = "") {
  Message m = sample_message(MsgType::Forward);
  m.request_id = id;
  m.text = text;
  if (values) {
    m.tensors.push_back(
        encode_float(values->data(), {static_cast<int64_t>(values->size())}, Codec::None, values));
    m.tensors.push_back(
        encode_float(values->data(), {static_cast<int64_t>(values->size())}, Codec::Float16));
  }
  return m;
}

// A raw connection to the server, for bytes no client would send.
struct Raw {
  int fd;
  explicit Raw(uint16_t port)
      : fd(transport::tcp::connect_with_retry("127.0.0.1", port, transport::tcp::Clock::now() + 5s,
                                              "server")) {}
  ~Raw() { close(fd); }
  void send(const std::vector<uint8_t>& b) const {
    std::string err;
    ASSERT_TRUE(
        transport::tcp::write_all(fd, b.data(), b.size(), transport::tcp::Clock::now() + 5s, err))
        << err;
  }
  Message receive() const {
    std::vector<uint8_t> header(kFrameHeaderBytes);
    std::string err;
    const auto deadline = transport::tcp::Clock::now() + 5s;
    EXPECT_TRUE(transport::tcp::read_all(fd, header.data(), header.size(), deadline, err)) << err;
    const uint64_t n = parse_header(header.data(), 1u << 20);
    header.resize(kFrameHeaderBytes + n);
    EXPECT_TRUE(transport::tcp::read_all(fd, header.data() + kFrameHeaderBytes, n, deadline, err))
        << err;
    return decode_from_bytes(header.data(), header.size(), 1u << 20);
  }
  bool closed_by_peer() const {
    uint8_t b;
    std::string err;
    return !transport::tcp::read_all(fd, &b, 1, transport::tcp::Clock::now() + 5s, err) &&
           err != "timed out";
  }
};

TEST(SwarmRpc, EchoKeepsEveryField) {
  RpcServer server("127.0.0.1", 0, echo);
  RpcClient client("127.0.0.1", server.port(), 5s);
  EXPECT_EQ(client.address(), "127.0.0.1:" + std::to_string(server.port()));
  auto values = random_floats(10000, 11);
  for (uint64_t id = 1; id <= 5; ++id) {
    const Message req = request_with(id, values, "hello");
    const Message reply = client.call(req, 5s);
    Message want = req;
    want.type = MsgType::Reply;
    want.stage += 1;
    expect_same(want, reply);
  }
  EXPECT_TRUE(client.usable());
  // A message with no tensors and the server's own reply type.
  const Message empty = client.call(request_with(9, nullptr), 5s);
  EXPECT_EQ(empty.request_id, 9u);
  EXPECT_TRUE(empty.tensors.empty());
}

TEST(SwarmRpc, ConcurrentClients) {
  std::atomic<int> handled{0};
  RpcServer server("0.0.0.0", 0, [&](Message&& m) {
    ++handled;
    return echo(std::move(m));
  });
  constexpr int kThreads = 6, kCalls = 25;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      RpcClient client("127.0.0.1", server.port(), 5s);
      for (int i = 0; i < kCalls; ++i) {
        auto values = random_floats(1 + (t * 997 + i * 31) % 5000, t * 100 + i);
        const Message reply = client.call(request_with(t * 1000 + i + 1, values), 10s);
        std::vector<float> back(values->size());
        decode_float(reply.tensors.at(0), back.data());
        if (reply.request_id == static_cast<uint64_t>(t * 1000 + i + 1) && back == *values) ++ok;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), kThreads * kCalls);
  EXPECT_EQ(handled.load(), kThreads * kCalls);
}

TEST(SwarmRpc, WorkAfterAReplyRunsOnceTheReplyIsOutAndBeforeTheNextRequest) {
  // The first request's handler leaves work that blocks until the test releases it: its reply
  // must arrive meanwhile; the connection's second request waits for the work, and a failing
  // piece of work is logged, not fatal.
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  std::atomic<int> after_done{0};
  RpcServer server("127.0.0.1", 0, [&](Message&& m) {
    if (m.request_id == 1) {
      after_reply([&] {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return released; });
        ++after_done;
      });
      after_reply([] { throw InternalError("bookkeeping failed"); });
    } else {
      EXPECT_EQ(after_done.load(), 1) << "request " << m.request_id << " read before the work ran";
    }
    return echo(std::move(m));
  });
  RpcClient client("127.0.0.1", server.port(), 5s);
  auto values = random_floats(100, 3);
  const Message first = client.call(request_with(1, values), 5s);  // the work is still blocked
  EXPECT_EQ(first.request_id, 1u);
  EXPECT_EQ(after_done.load(), 0);
  std::thread release([&] {
    std::this_thread::sleep_for(100ms);
    std::lock_guard<std::mutex> lock(mu);
    released = true;
    cv.notify_all();
  });
  const Message second = client.call(request_with(2, values), 5s);
  release.join();
  EXPECT_EQ(second.request_id, 2u);
  EXPECT_EQ(after_done.load(), 1);
  EXPECT_TRUE(client.usable());
  // Outside a handler the work runs at once.
  int ran = 0;
  after_reply([&] { ++ran; });
  EXPECT_EQ(ran, 1);
}

TEST(SwarmRpc, HandlerExceptionsReachTheClient) {
  RpcServer server("127.0.0.1", 0, echo);
  RpcClient client("127.0.0.1", server.port(), 5s);
  try {
    client.call(request_with(1, nullptr, "mismatch"), 5s);
    ADD_FAILURE() << "no error";
  } catch (const MismatchError& e) {
    EXPECT_EQ(std::string(e.what()), client.address() + ": round 3 is over");
  }
  try {
    client.call(request_with(2, nullptr, "boom"), 5s);
    ADD_FAILURE() << "no error";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("the handler blew up"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(client.usable());  // an error reply leaves the connection in step
  EXPECT_EQ(client.call(request_with(3, nullptr), 5s).request_id, 3u);
}

TEST(SwarmRpc, TimeoutClosesTheClient) {
  RpcServer server("127.0.0.1", 0, echo);
  RpcClient client("127.0.0.1", server.port(), 5s);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(client.call(request_with(1, nullptr, "slow"), 150ms), TimeoutError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_FALSE(client.usable());
  EXPECT_THROW(client.call(request_with(2, nullptr), 1s), PeerFailureError);
  // The server is fine; a new client works.
  RpcClient again("127.0.0.1", server.port(), 5s);
  EXPECT_EQ(again.call(request_with(3, nullptr), 5s).request_id, 3u);
}

TEST(SwarmRpc, StoppedServerIsAPeerFailure) {
  auto server = std::make_unique<RpcServer>("127.0.0.1", 0, echo);
  const uint16_t port = server->port();
  RpcClient client("127.0.0.1", port, 5s);
  EXPECT_EQ(client.call(request_with(1, nullptr), 5s).request_id, 1u);
  const auto start = std::chrono::steady_clock::now();
  server->stop();
  server->stop();  // idempotent
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_THROW(client.call(request_with(2, nullptr), 5s), PeerFailureError);
  EXPECT_FALSE(client.usable());
  server.reset();
  EXPECT_THROW(RpcClient("127.0.0.1", port, 200ms), TimeoutError);
}

TEST(SwarmRpc, MalformedPeersAreRefusedAndOthersServed) {
  RpcServer server("127.0.0.1", 0, echo);
  RpcClient good("127.0.0.1", server.port(), 5s);
  {
    Raw raw(server.port());
    raw.send(std::vector<uint8_t>(64, 0x41));
    const Message reply = raw.receive();
    EXPECT_EQ(reply.type, MsgType::Error);
    EXPECT_EQ(reply.flags, static_cast<uint8_t>(ErrorCode::InvalidArgument));
    EXPECT_NE(reply.text.find("bad magic"), std::string::npos) << reply.text;
    EXPECT_TRUE(raw.closed_by_peer());
  }
  {
    // A well-formed header over a body whose tensor lies about its size.
    Raw raw(server.port());
    auto frame = one_tensor_frame();
    poke<uint64_t>(frame, first_tensor_at(0) + 16, 12);
    raw.send(frame);
    const Message reply = raw.receive();
    EXPECT_EQ(reply.type, MsgType::Error);
    EXPECT_EQ(reply.request_id, 0x0102030405060708ull);
    EXPECT_NE(reply.text.find("tensor 0 says 12 bytes"), std::string::npos) << reply.text;
    EXPECT_TRUE(raw.closed_by_peer());
  }
  {
    // A reply sent as a request.
    Raw raw(server.port());
    raw.send(encode_to_bytes(sample_message(MsgType::Reply)));
    EXPECT_NE(raw.receive().text.find("not message type 64"), std::string::npos);
  }
  {
    // A peer that connects and vanishes mid-header.
    Raw raw(server.port());
    raw.send({0x53, 0x57});
  }
  EXPECT_EQ(good.call(request_with(5, random_floats(100, 1)), 5s).request_id, 5u);
}

TEST(SwarmRpc, OversizedFrameIsRefusedFromItsHeader) {
  RpcServer server("127.0.0.1", 0, echo);
  Raw raw(server.port());
  std::vector<uint8_t> header(kFrameHeaderBytes);
  poke(header, 0, kWireMagic);
  poke(header, 4, kWireVersion);
  header[6] = static_cast<uint8_t>(MsgType::Forward);
  poke<uint64_t>(header, 8, 100ull << 30);  // 100 GiB: far above the 1 GiB default
  raw.send(header);
  const Message reply = raw.receive();
  EXPECT_EQ(reply.type, MsgType::Error);
  EXPECT_EQ(reply.flags, static_cast<uint8_t>(ErrorCode::InvalidArgument));
  EXPECT_NE(reply.text.find("exceeds the limit of 1073741824 bytes"), std::string::npos)
      << reply.text;
  EXPECT_TRUE(raw.closed_by_peer());
  RpcClient client("127.0.0.1", server.port(), 5s);
  EXPECT_EQ(client.call(request_with(1, nullptr), 5s).request_id, 1u);
}

TEST(SwarmRpc, ClientRefusesAReplyToAnotherRequest) {
  uint16_t port = 0;
  const int lfd = transport::tcp::listen_on("127.0.0.1", port);
  std::thread fake([lfd] {
    pollfd p{lfd, POLLIN, 0};
    poll(&p, 1, 5000);
    const int fd = accept(lfd, nullptr, nullptr);
    std::vector<uint8_t> buf(kFrameHeaderBytes);
    std::string err;
    const auto deadline = transport::tcp::Clock::now() + 5s;
    transport::tcp::read_all(fd, buf.data(), buf.size(), deadline, err);
    const uint64_t n = parse_header(buf.data(), 1u << 20);
    buf.resize(kFrameHeaderBytes + n);
    transport::tcp::read_all(fd, buf.data() + kFrameHeaderBytes, n, deadline, err);
    Message reply = decode_from_bytes(buf.data(), buf.size(), 1u << 20);
    reply.type = MsgType::Reply;
    reply.request_id += 1;
    const auto out = encode_to_bytes(reply);
    transport::tcp::write_all(fd, out.data(), out.size(), deadline, err);
    uint8_t b;
    transport::tcp::read_all(fd, &b, 1, deadline, err);  // until the client hangs up
    close(fd);
  });
  {
    RpcClient client("127.0.0.1", port, 5s);
    try {
      client.call(request_with(41, nullptr), 5s);
      ADD_FAILURE() << "accepted a mismatched reply";
    } catch (const PeerFailureError& e) {
      EXPECT_NE(std::string(e.what()).find("reply to request 42 while waiting for 41"),
                std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(client.usable());
  }
  fake.join();
  close(lfd);
}

// Runs in a child process with SHOAL_AUTH_KEY set (the key is read once per process).
TEST(SwarmRpc, AuthenticatedChild) {
  ASSERT_EQ(auth::job_key(), "swarm-secret");
  RpcServer server("127.0.0.1", 0, echo);
  RpcClient client("127.0.0.1", server.port(), 5s);
  EXPECT_EQ(client.call(request_with(1, nullptr), 5s).request_id, 1u);
  {
    // A stranger that skips the handshake gets a challenge, never a reply, and is dropped.
    Raw raw(server.port());
    raw.send(encode_to_bytes(request_with(2, nullptr, std::string(100, 'x'))));
    std::vector<uint8_t> got(256);
    size_t n = 0;
    for (ssize_t r; (r = recv(raw.fd, got.data() + n, got.size() - n, 0)) > 0;)
      n += static_cast<size_t>(r);
    EXPECT_EQ(n, 64u);  // the server's nonce and MAC, then the hang-up
    EXPECT_FALSE(n >= 4 && std::memcmp(got.data(), &kWireMagic, 4) == 0);
  }
  EXPECT_EQ(client.call(request_with(3, nullptr), 5s).request_id, 3u);
}

TEST(SwarmRpc, AuthenticatedServerRefusesStrangers) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("SHOAL_AUTH_KEY", "swarm-secret", 1);
    setenv("SHOAL_TEST_CHILD", "1", 1);  // test_main.cpp runs *Child tests only then
    execl("/proc/self/exe", "test_swarm_net", "--gtest_filter=SwarmRpc.AuthenticatedChild",
          nullptr);
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the authenticated child failed (its output is above)";
}

}  // namespace
}  // namespace shoal::swarm
