#include "swarm/net/averaging.hpp"

#include <cmath>
#include <numeric>

#include "core/check.hpp"

namespace shoal::swarm {

std::vector<size_t> part_bounds(size_t count, std::span<const double> weights, size_t align) {
  SHOAL_CHECK(!weights.empty(), InvalidArgument, "averaging: parts for no member");
  SHOAL_CHECK(align > 0, InvalidArgument, "averaging: parts aligned to 0 values");
  double total = 0;
  for (double w : weights) {
    SHOAL_CHECK(
        std::isfinite(w) && w > 0, InvalidArgument,
        "averaging: a member's weight (bandwidth) of " << w << "; weights must be positive");
    total += w;
  }
  std::vector<size_t> bounds(weights.size() + 1, 0);
  double acc = 0;
  for (size_t i = 0; i + 1 < weights.size(); ++i) {
    acc += weights[i];
    // Round each boundary to the alignment, never below the previous one.
    auto at = static_cast<size_t>(std::llround(acc / total * static_cast<double>(count) /
                                               static_cast<double>(align))) *
              align;
    bounds[i + 1] = std::clamp(at, bounds[i], count);
  }
  bounds.back() = count;
  return bounds;
}

CompressedAverager::CompressedAverager(Codec codec, uint32_t block) : codec_(codec), block_(block) {
  SHOAL_CHECK(block > 0, InvalidArgument, "averaging: blocks of 0 values");
}

void CompressedAverager::reset() {
  residual_.clear();
  owner_residual_.clear();
  owner_lo_ = owner_hi_ = 0;
}

namespace {
WireTensor view(Codec codec, uint32_t block, const uint8_t* data, size_t values) {
  WireTensor t;
  t.codec = codec;
  t.shape = {static_cast<int64_t>(values)};
  t.block = codec == Codec::Blockwise8 ? block : 0;
  t.data = data;
  t.bytes = encoded_bytes(static_cast<int64_t>(values), codec, block);
  return t;
}
}  // namespace

void CompressedAverager::all_reduce(Communicator& comm, float* values, size_t count,
                                    std::span<const double> weights) {
  const auto p = static_cast<size_t>(comm.size());
  const auto me = static_cast<size_t>(comm.rank());
  std::vector<double> equal(p, 1.0);
  if (weights.empty()) weights = equal;
  SHOAL_CHECK(weights.size() == p, InvalidArgument,
              "averaging: " << weights.size() << " weights for " << p << " members");
  // int8's scales are per block: parts on block boundaries keep every block whole.
  auto bounds = part_bounds(count, weights, codec_ == Codec::Blockwise8 ? block_ : 1);
  auto len = [&](size_t i) { return bounds[i + 1] - bounds[i]; };
  auto bytes_of = [&](size_t values_) {
    return encoded_bytes(static_cast<int64_t>(values_), codec_, block_);
  };

  // 1. Each owner gets its part of every member's values plus what compression dropped before.
  std::vector<float> residual(count, 0.0f), decoded(count);
  if (residual_.size() == count) residual = residual_;
  std::vector<float> carried(count);
  for (size_t k = 0; k < count; ++k) carried[k] = values[k] + residual[k];
  std::vector<uint8_t> send;
  std::vector<size_t> send_counts(p), send_displs(p), recv_counts(p), recv_displs(p);
  for (size_t j = 0; j < p; ++j) {
    auto piece = encode_float(carried.data() + bounds[j], {static_cast<int64_t>(len(j))}, codec_,
                              {}, block_);
    send_displs[j] = send.size();
    send_counts[j] = piece.bytes;
    send.insert(send.end(), piece.data, piece.data + piece.bytes);
    decode_float(piece, decoded.data() + bounds[j]);
    recv_counts[j] = bytes_of(len(me));
    recv_displs[j] = j * recv_counts[j];
  }
  for (size_t k = 0; k < count; ++k) residual[k] = carried[k] - decoded[k];
  const uint64_t sent_first = send.size() - send_counts[me];
  std::vector<uint8_t> pieces(p * bytes_of(len(me)));
  comm.all_to_all_v(send.data(), send_counts, send_displs, pieces.data(), recv_counts, recv_displs,
                    DataType::uint8);

  // 2. The owner sums the pieces (and its own dropped sum), compresses and sends it to all.
  const size_t mine = len(me);
  std::vector<float> sum(mine, 0.0f), piece(mine);
  for (size_t i = 0; i < p; ++i) {
    decode_float(view(codec_, block_, pieces.data() + recv_displs[i], mine), piece.data());
    for (size_t k = 0; k < mine; ++k) sum[k] += piece[k];
  }
  bool same_part =
      owner_lo_ == bounds[me] && owner_hi_ == bounds[me + 1] && owner_residual_.size() == mine;
  std::vector<float> owner_residual(mine, 0.0f);
  if (same_part)
    for (size_t k = 0; k < mine; ++k) sum[k] += owner_residual_[k];
  auto total = encode_float(sum.data(), {static_cast<int64_t>(mine)}, codec_, {}, block_);
  decode_float(total, piece.data());
  for (size_t k = 0; k < mine; ++k) owner_residual[k] = sum[k] - piece[k];
  size_t result_bytes = 0;
  for (size_t i = 0; i < p; ++i) {
    send_counts[i] = total.bytes;
    send_displs[i] = 0;  // the same encoded sum to every member
    recv_counts[i] = bytes_of(len(i));
    recv_displs[i] = result_bytes;
    result_bytes += recv_counts[i];
  }
  std::vector<uint8_t> result(result_bytes);
  comm.all_to_all_v(total.data, send_counts, send_displs, result.data(), recv_counts, recv_displs,
                    DataType::uint8);
  for (size_t i = 0; i < p; ++i)
    decode_float(view(codec_, block_, result.data() + recv_displs[i], len(i)), values + bounds[i]);

  // Both exchanges went through: commit what was dropped, for the next call.
  residual_ = std::move(residual);
  owner_residual_ = std::move(owner_residual);
  owner_lo_ = bounds[me];
  owner_hi_ = bounds[me + 1];
  bytes_sent_ += sent_first + (p - 1) * total.bytes;
}

}  // namespace shoal::swarm
