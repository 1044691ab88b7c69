// Hierarchical schedules composed from registry rows (see hierarchy.hpp).
#include "algorithms/hierarchy.hpp"

#include <algorithm>
#include <functional>

#include "core/check.hpp"

namespace shoal::algorithms {

namespace {

// Where a phase's buffers lie in the caller's: each sub-buffer is one contiguous range.
struct Placement {
  Slice input, output;      // offset = where the sub-buffer starts (bytes is unused)
  uint64_t scratch = 0;     // offset of the sub-schedule's scratch in the caller's scratch
};

const AlgorithmInfo& row_named(Collective c, std::string_view name) {
  const AlgorithmInfo* row = find_algorithm(c, name);
  SHOAL_CHECK(row != nullptr, InvalidArgument,
              "hierarchical " << to_string(c) << " phase: no " << to_string(c) << " algorithm '" << name << "'");
  return *row;
}

// One step that waits for every step of `gate`: the next phase's first steps wait for it only
// (edges stay linear in the number of steps). A copy of no bytes costs nothing.
std::vector<uint32_t> join(Schedule& s, const std::vector<uint32_t>& gate) {
  if (gate.size() <= 1) return gate;
  const uint32_t j = s.copy({Buffer::scratch, 0, 0}, {Buffer::scratch, 0, 0});
  for (uint32_t g : gate) s.add_dep(j, g);
  return {j};
}

// Appends the schedule `row` builds for `sub` (a call on a group of sub.size ranks) to `s`:
// group rank j is caller rank peer(j); every step of the phase that waits for no other step
// of it waits for `gate` (the end of the previous phase). Returns the phase's last steps
// (those no step of the phase waits for).
std::vector<uint32_t> append_phase(Schedule& s, const AlgorithmInfo& row, const CollectiveArgs& sub,
                                   const std::function<int(int)>& peer, const Placement& at,
                                   const std::vector<uint32_t>& gate) {
  Schedule part;
  row.build(part, sub);
  if (part.steps.empty()) return gate;
  auto place = [&](Slice x) {
    switch (x.buffer) {
      case Buffer::input: x.buffer = at.input.buffer; x.offset += at.input.offset; break;
      case Buffer::output: x.buffer = at.output.buffer; x.offset += at.output.offset; break;
      case Buffer::scratch: x.offset += at.scratch; break;
    }
    return x;
  };
  const std::vector<uint32_t> start = join(s, gate);
  const auto base = static_cast<uint32_t>(s.steps.size());
  std::vector<bool> has_dep(part.steps.size(), false), has_succ(part.steps.size(), false);
  for (auto [from, to] : part.edges) {
    has_dep[to] = true;
    has_succ[from] = true;
  }
  for (size_t i = 0; i < part.steps.size(); ++i) {
    Step st = part.steps[i];
    if (st.peer >= 0) st.peer = peer(st.peer);
    st.src = place(st.src);
    st.src2 = place(st.src2);
    st.dst = place(st.dst);
    s.steps.push_back(st);
    if (!has_dep[i])
      for (uint32_t g : start) s.add_dep(base + static_cast<uint32_t>(i), g);
  }
  for (auto [from, to] : part.edges) s.add_dep(base + to, base + from);
  std::vector<uint32_t> last;
  for (size_t i = 0; i < part.steps.size(); ++i)
    if (!has_succ[i]) last.push_back(base + static_cast<uint32_t>(i));
  return last;
}

CollectiveArgs sub_call(const CollectiveArgs& a, Collective c, int size, int rank, uint64_t count) {
  CollectiveArgs sub = a;
  sub.collective = c;
  sub.size = size;
  sub.rank = rank;
  sub.count = count;
  sub.in_place = false;
  sub.algorithm = nullptr;
  sub.forced = false;
  if (sub.op == ReduceOp::avg) sub.op = ReduceOp::sum;  // divided once at the end
  return sub;
}

uint64_t scratch_of(const AlgorithmInfo& row, const CollectiveArgs& sub) {
  Schedule probe;
  row.build(probe, sub);
  return probe.scratch_bytes;
}

}  // namespace

std::string hierarchy_name(const HierarchyPlan& plan) {
  return "hier(" + std::string(plan.local) + "+" + std::string(plan.inter) + ")";
}

void hierarchical(Schedule& s, const CollectiveArgs& a, const HierarchyPlan& plan) {
  const int p = a.size, L = plan.ranks_per_host;
  SHOAL_CHECK(L >= 1 && p % L == 0, InvalidArgument,
              "hierarchical schedule: " << L << " ranks per host do not divide " << p << " ranks");
  const Collective coll = a.collective;
  SHOAL_CHECK(coll == Collective::all_reduce || coll == Collective::all_gather || coll == Collective::reduce_scatter,
              InvalidArgument, "hierarchical schedule: none for " << to_string(coll));
  const int H = p / L, h = a.rank / L, l = a.rank % L;
  const uint64_t es = size_of(a.dtype);
  const std::function<int(int)> local_peer = [&](int j) { return h * L + j; };
  const std::function<int(int)> aligned_peer = [&](int j) { return j * L + l; };
  auto place = [](Buffer in, uint64_t in_off, Buffer out, uint64_t out_off, uint64_t scratch) {
    return Placement{{in, in_off, 0}, {out, out_off, 0}, scratch};
  };
  if (a.count == 0) return;
  std::vector<uint32_t> gate;
  auto after_gate = [&](uint32_t step) {
    for (uint32_t g : gate) s.add_dep(step, g);
  };

  if (coll == Collective::all_reduce) {
    SHOAL_CHECK(a.count % static_cast<uint64_t>(L) == 0, InvalidArgument,
                "hierarchical all_reduce schedule: " << a.count << " elements do not split over " << L
                                                     << " ranks per host");
    const uint64_t c = a.count / static_cast<uint64_t>(L), mine = static_cast<uint64_t>(l) * c * es;
    const auto rs = sub_call(a, Collective::reduce_scatter, L, l, c);
    const auto ar = sub_call(a, Collective::all_reduce, H, h, c);
    const auto ag = sub_call(a, Collective::all_gather, L, l, c);
    const AlgorithmInfo& rs_row = row_named(Collective::reduce_scatter, plan.local);
    const AlgorithmInfo& ar_row = row_named(Collective::all_reduce, plan.inter);
    const AlgorithmInfo& ag_row = row_named(Collective::all_gather, plan.local);
    // The phases run one after another: their scratch shares one area.
    const uint64_t s0 = s.scratch_bytes;
    s.scratch_bytes += std::max({scratch_of(rs_row, rs), scratch_of(ar_row, ar), scratch_of(ag_row, ag)});
    gate = append_phase(s, rs_row, rs, local_peer, place(Buffer::input, 0, Buffer::output, mine, s0), gate);
    gate = append_phase(s, ar_row, ar, aligned_peer, place(Buffer::output, mine, Buffer::output, mine, s0), gate);
    if (a.op == ReduceOp::avg) {
      const uint32_t f = s.finalize({Buffer::output, mine, c * es});
      after_gate(f);
      gate = {f};
    }
    append_phase(s, ag_row, ag, local_peer, place(Buffer::output, mine, Buffer::output, 0, s0), gate);
    return;
  }

  const uint64_t b = a.count * es;  // one rank's block
  // Local-rank-major order: block (h', l') of global rank order sits at l' * H + h'.
  auto major = [&](int hh, int ll) { return (static_cast<uint64_t>(ll) * H + hh) * b; };
  auto global = [&](int hh, int ll) { return (static_cast<uint64_t>(hh) * L + ll) * b; };
  if (coll == Collective::all_gather) {
    const auto inter = sub_call(a, Collective::all_gather, H, h, a.count);
    const auto local = sub_call(a, Collective::all_gather, L, l, a.count * H);
    const AlgorithmInfo& inter_row = row_named(Collective::all_gather, plan.inter);
    const AlgorithmInfo& local_row = row_named(Collective::all_gather, plan.local);
    const uint64_t gathered = s.scratch_bytes;      // H blocks: local rank l of every host
    const uint64_t all = gathered + H * b;          // p blocks, local-rank major
    const uint64_t s0 = all + static_cast<uint64_t>(p) * b;
    s.scratch_bytes = s0 + std::max(scratch_of(inter_row, inter), scratch_of(local_row, local));
    gate = append_phase(s, inter_row, inter, aligned_peer, place(Buffer::input, 0, Buffer::scratch, gathered, s0), gate);
    gate = join(s, append_phase(s, local_row, local, local_peer,
                                place(Buffer::scratch, gathered, Buffer::scratch, all, s0), gate));
    for (int hh = 0; hh < H; ++hh)
      for (int ll = 0; ll < L; ++ll)
        after_gate(s.copy({Buffer::output, global(hh, ll), b}, {Buffer::scratch, all + major(hh, ll), b}));
    return;
  }

  // reduce_scatter
  const auto local = sub_call(a, Collective::reduce_scatter, L, l, a.count * H);
  const auto inter = sub_call(a, Collective::reduce_scatter, H, h, a.count);
  const AlgorithmInfo& local_row = row_named(Collective::reduce_scatter, plan.local);
  const AlgorithmInfo& inter_row = row_named(Collective::reduce_scatter, plan.inter);
  const uint64_t all = s.scratch_bytes;                        // p blocks, local-rank major
  const uint64_t mine = all + static_cast<uint64_t>(p) * b;    // H blocks: summed over the host
  const uint64_t s0 = mine + H * b;
  s.scratch_bytes = s0 + std::max(scratch_of(local_row, local), scratch_of(inter_row, inter));
  for (int hh = 0; hh < H; ++hh)
    for (int ll = 0; ll < L; ++ll)
      gate.push_back(s.copy({Buffer::scratch, all + major(hh, ll), b}, {Buffer::input, global(hh, ll), b}));
  gate = append_phase(s, local_row, local, local_peer, place(Buffer::scratch, all, Buffer::scratch, mine, s0), gate);
  gate = append_phase(s, inter_row, inter, aligned_peer, place(Buffer::scratch, mine, Buffer::output, 0, s0), gate);
  if (a.op == ReduceOp::avg) after_gate(s.finalize({Buffer::output, 0, b}));
}

}  // namespace shoal::algorithms
