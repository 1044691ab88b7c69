// The vectored (Segment) forms of all_reduce, all_gather, reduce_scatter, gather and scatter:
// the segments
// become the engine's pieces (comm/engine.hpp), which its sends gather from and its receives
// scatter into.
#include <algorithm>
#include <cstring>
#include <memory>

#include "comm/comm_impl.hpp"
#include "comm/flat.hpp"
#include "core/check.hpp"

namespace shoal {

using algorithms::Collective;

namespace {

template <class S>
std::vector<comm::Piece> pieces_of(std::span<const S> segments, DataType dtype, const char* name,
                                   const char* side, uint64_t& count) {
  SHOAL_CHECK(static_cast<int>(dtype) < kNumDataTypes, InvalidArgument,
              name << ": invalid data type " << static_cast<int>(dtype));
  const uint64_t es = size_of(dtype);
  std::vector<comm::Piece> pieces;
  pieces.reserve(segments.size());
  count = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const auto& s = segments[i];
    if (s.count == 0) continue;
    SHOAL_CHECK(s.data != nullptr, InvalidArgument,
                name << ": " << side << " segment " << i << " is null but holds " << s.count
                     << " elements");
    pieces.push_back({static_cast<uint8_t*>(const_cast<void*>(static_cast<const void*>(s.data))),
                      s.count * es, count * es});
    count += s.count;
  }
  return pieces;
}

bool same_pieces(const std::vector<comm::Piece>& a, const std::vector<comm::Piece>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](auto& x, auto& y) {
           return x.data == y.data && x.bytes == y.bytes;
         });
}

// `count` as in the buffer forms (the pieces' totals are checked against it by the caller);
// the call's buffers are `pieces`, which must outlive the call (not its Work: the executor
// takes them).
Work vectored(detail::CommImpl& impl, Collective collective, comm::Pieces& pieces, uint64_t count,
              DataType dtype, ReduceOp op, const CallOptions& call, int root = -1) {
  comm::Request r = comm::request_of(collective, nullptr, nullptr, count, dtype, op, root);
  impl.apply_call_options(r, &call);
  r.may_use_hierarchy = true;
  r.vectored = &pieces;
  return impl.call(r);
}

}  // namespace

Work Communicator::all_reduce_async(std::span<const ConstSegment> send,
                                    std::span<const Segment> recv, DataType dtype, ReduceOp op,
                                    const CallOptions& call) {
  uint64_t in = 0, out = 0;
  auto input = pieces_of(send, dtype, "all_reduce", "send", in);
  auto output = pieces_of(recv, dtype, "all_reduce", "recv", out);
  check_equal(in, out, "all_reduce");
  if (send.size() == 1 && recv.size() == 1)
    return all_reduce_async(send[0].data, recv[0].data, in, dtype, op, call);
  const bool in_place = same_pieces(input, output);
  comm::Pieces pieces{std::move(input), std::move(output), in_place};
  return vectored(*impl_, Collective::all_reduce, pieces, in, dtype, op, call);
}

Work Communicator::all_gather_async(std::span<const ConstSegment> send,
                                    std::span<const Segment> recv, DataType dtype,
                                    const CallOptions& call) {
  uint64_t in = 0, out = 0;
  auto input = pieces_of(send, dtype, "all_gather", "send", in);
  auto output = pieces_of(recv, dtype, "all_gather", "recv", out);
  check_equal(in * static_cast<uint64_t>(size()), out, "all_gather");
  if (send.size() == 1 && recv.size() == 1)
    return all_gather_async(send[0].data, recv[0].data, in, dtype, call);
  comm::Pieces pieces{std::move(input), std::move(output), false};
  return vectored(*impl_, Collective::all_gather, pieces, in, dtype, ReduceOp::sum, call);
}

Work Communicator::reduce_scatter_async(std::span<const ConstSegment> send,
                                        std::span<const Segment> recv, DataType dtype, ReduceOp op,
                                        const CallOptions& call) {
  uint64_t in = 0, out = 0;
  auto input = pieces_of(send, dtype, "reduce_scatter", "send", in);
  auto output = pieces_of(recv, dtype, "reduce_scatter", "recv", out);
  check_equal(in, out * static_cast<uint64_t>(size()), "reduce_scatter");
  if (send.size() == 1 && recv.size() == 1)
    return reduce_scatter_async(send[0].data, recv[0].data, out, dtype, op, call);
  comm::Pieces pieces{std::move(input), std::move(output), false};
  return vectored(*impl_, Collective::reduce_scatter, pieces, out, dtype, op, call);
}

// Only the root's gathered (scattered) side is read, as in the plain calls: elsewhere it is
// left empty, and the linear schedules never touch it.
Work Communicator::gather_async(std::span<const ConstSegment> send, std::span<const Segment> recv,
                                DataType dtype, int root) {
  uint64_t in = 0, out = 0;
  auto input = pieces_of(send, dtype, "gather", "send", in);
  std::vector<comm::Piece> output;
  if (rank() == root) {
    output = pieces_of(recv, dtype, "gather", "recv", out);
    check_equal(in * static_cast<uint64_t>(size()), out, "gather");
  }
  if (send.size() == 1 && (rank() != root || recv.size() == 1))
    return gather_async(send[0].data, rank() == root ? recv[0].data : nullptr, in, dtype, root);
  comm::Pieces pieces{std::move(input), std::move(output), false};
  return vectored(*impl_, Collective::gather, pieces, in, dtype, ReduceOp::sum, {}, root);
}

Work Communicator::scatter_async(std::span<const ConstSegment> send, std::span<const Segment> recv,
                                 DataType dtype, int root) {
  uint64_t in = 0, out = 0;
  auto output = pieces_of(recv, dtype, "scatter", "recv", out);
  std::vector<comm::Piece> input;
  if (rank() == root) {
    input = pieces_of(send, dtype, "scatter", "send", in);
    check_equal(in, out * static_cast<uint64_t>(size()), "scatter");
  }
  if (recv.size() == 1 && (rank() != root || send.size() == 1))
    return scatter_async(rank() == root ? send[0].data : nullptr, recv[0].data, out, dtype, root);
  comm::Pieces pieces{std::move(input), std::move(output), false};
  return vectored(*impl_, Collective::scatter, pieces, out, dtype, ReduceOp::sum, {}, root);
}

}  // namespace shoal
