// The vectored (Segment) forms of all_reduce, all_gather and reduce_scatter: the segments
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
  impl_->fence_hierarchical();
  const bool in_place = same_pieces(input, output);
  return impl_->submit_vectored(Collective::all_reduce, std::move(input), std::move(output), in,
                                dtype, op, in_place,
                                impl_->forced_algorithm(Collective::all_reduce, &call));
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
  impl_->fence_hierarchical();
  return impl_->submit_vectored(Collective::all_gather, std::move(input), std::move(output), in,
                                dtype, ReduceOp::sum, false,
                                impl_->forced_algorithm(Collective::all_gather, &call));
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
  impl_->fence_hierarchical();
  return impl_->submit_vectored(Collective::reduce_scatter, std::move(input), std::move(output),
                                out, dtype, op, false,
                                impl_->forced_algorithm(Collective::reduce_scatter, &call));
}

}  // namespace shoal

namespace shoal::detail {

Work CommImpl::submit_vectored(Collective collective, std::vector<comm::Piece> input,
                               std::vector<comm::Piece> output, uint64_t count, DataType dtype,
                               ReduceOp op, bool in_place,
                               const algorithms::AlgorithmInfo* forced) {
  algorithms::CollectiveArgs a = checked_args(collective, count, dtype, op, -1, -1, 0);
  a.in_place = in_place;
  // Within the shared slots the plain call's path is faster than a schedule by far more than
  // packing that little costs; beyond them (the direct flat path, by address) it is not.
  const bool flat = !forced && flat_eligible(a) && comm::flat_decision_bytes(a) <= flat_max_bytes_;
  a.algorithm = forced ? forced : dispatch(a, flat);
  a.forced = forced != nullptr;
  comm::OpRequest req;
  req.args = a;
  req.signature = algorithms::signature(a);
  unchecked_ = 0;
  if (!flat) {
    req.input_pieces = std::move(input);
    req.output_pieces = std::move(output);
    return Work(engine->submit(req));
  }
  // The shared-slot path reads and writes one buffer: the pieces are packed into one and the
  // result copied out before the Work completes.
  auto in = std::make_shared<std::vector<uint8_t>>(algorithms::input_bytes(a));
  auto out = in_place ? in : std::make_shared<std::vector<uint8_t>>(algorithms::output_bytes(a));
  for (const auto& p : input) std::memcpy(in->data() + p.offset, p.data, p.bytes);
  req.input = in->data();
  req.output = out->data();
  req.finish = [in, out, output = std::move(output)] {
    for (const auto& p : output) std::memcpy(p.data, out->data() + p.offset, p.bytes);
  };
  req.flat_seq = ++flat_seq_;
  return Work(engine->submit(req));
}

}  // namespace shoal::detail
