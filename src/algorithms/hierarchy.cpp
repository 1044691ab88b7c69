// Hierarchical schedules composed from registry rows (see hierarchy.hpp).
#include "algorithms/hierarchy.hpp"

#include <algorithm>
#include <functional>

#include "core/check.hpp"

namespace shoal::algorithms {

namespace {

// Where a phase's buffers lie in the caller's: each sub-buffer is one contiguous range.
struct Placement {
  Buffer input;
  uint64_t input_at;
  Buffer output;
  uint64_t output_at;
  uint64_t scratch_at;  // the sub-schedule's scratch in the caller's scratch
};

const AlgorithmInfo& row_named(Collective c, std::string_view name) {
  const AlgorithmInfo* row = find_algorithm(c, name);
  SHOAL_CHECK(row != nullptr, InvalidArgument,
              "hierarchical " << to_string(c) << " phase: no " << to_string(c) << " algorithm '"
                              << name << "'");
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

// Appends `part` (the schedule of a call on a group of ranks) to `s`: group rank j is caller
// rank peer(j); every step of the phase that waits for no other step of it waits for `gate`
// (the end of the previous phase). Returns the phase's last steps (those no step of the phase
// waits for).
std::vector<uint32_t> append_phase(Schedule& s, const Schedule& part,
                                   const std::function<int(int)>& peer, const Placement& at,
                                   const std::vector<uint32_t>& gate) {
  if (part.steps.empty()) return gate;
  auto place = [&](Slice x) {
    switch (x.buffer) {
      case Buffer::input:
        x.buffer = at.input;
        x.offset += at.input_at;
        break;
      case Buffer::output:
        x.buffer = at.output;
        x.offset += at.output_at;
        break;
      case Buffer::scratch:
        x.offset += at.scratch_at;
        break;
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

// The schedule `name`'s row builds for a call of `c` on a group of `size` ranks (this rank is
// `rank` there), `count` elements; avg sums here and is divided once at the end.
Schedule sub_schedule(const CollectiveArgs& a, Collective c, std::string_view name, int size,
                      int rank, uint64_t count) {
  CollectiveArgs sub = a;
  sub.collective = c;
  sub.size = size;
  sub.rank = rank;
  sub.count = count;
  sub.in_place = false;
  sub.algorithm = nullptr;
  sub.forced = false;
  if (sub.op == ReduceOp::avg) sub.op = ReduceOp::sum;
  Schedule part;
  row_named(c, name).build(part, sub);
  return part;
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
  SHOAL_CHECK(coll == Collective::all_reduce || coll == Collective::all_gather ||
                  coll == Collective::reduce_scatter,
              InvalidArgument, "hierarchical schedule: none for " << to_string(coll));
  const int H = p / L, h = a.rank / L, l = a.rank % L;
  const uint64_t es = size_of(a.dtype);
  const std::function<int(int)> local_peer = [&](int j) { return h * L + j; };
  const std::function<int(int)> aligned_peer = [&](int j) { return j * L + l; };
  if (a.count == 0) return;
  std::vector<uint32_t> gate;
  auto after_gate = [&](uint32_t step) {
    for (uint32_t g : gate) s.add_dep(step, g);
  };

  if (coll == Collective::all_reduce) {
    SHOAL_CHECK(a.count % static_cast<uint64_t>(L) == 0, InvalidArgument,
                "hierarchical all_reduce schedule: " << a.count << " elements do not split over "
                                                     << L << " ranks per host");
    const uint64_t c = a.count / static_cast<uint64_t>(L), mine = static_cast<uint64_t>(l) * c * es;
    const Schedule rs = sub_schedule(a, Collective::reduce_scatter, plan.local, L, l, c);
    const Schedule ar = sub_schedule(a, Collective::all_reduce, plan.inter, H, h, c);
    const Schedule ag = sub_schedule(a, Collective::all_gather, plan.local, L, l, c);
    // The phases run one after another: their scratch shares one area.
    const uint64_t s0 = s.scratch_bytes;
    s.scratch_bytes += std::max({rs.scratch_bytes, ar.scratch_bytes, ag.scratch_bytes});
    gate = append_phase(s, rs, local_peer, {Buffer::input, 0, Buffer::output, mine, s0}, gate);
    gate =
        append_phase(s, ar, aligned_peer, {Buffer::output, mine, Buffer::output, mine, s0}, gate);
    if (a.op == ReduceOp::avg) {
      const uint32_t f = s.finalize({Buffer::output, mine, c * es});
      after_gate(f);
      gate = {f};
    }
    append_phase(s, ag, local_peer, {Buffer::output, mine, Buffer::output, 0, s0}, gate);
    return;
  }

  const uint64_t b = a.count * es;  // one rank's block
  // Local-rank-major order: block (h', l') of global rank order sits at l' * H + h'.
  auto major = [&](int hh, int ll) { return (static_cast<uint64_t>(ll) * H + hh) * b; };
  auto global = [&](int hh, int ll) { return (static_cast<uint64_t>(hh) * L + ll) * b; };
  if (coll == Collective::all_gather) {
    const Schedule inter = sub_schedule(a, Collective::all_gather, plan.inter, H, h, a.count);
    const Schedule local = sub_schedule(a, Collective::all_gather, plan.local, L, l, a.count * H);
    const uint64_t gathered = s.scratch_bytes;  // H blocks: local rank l of every host
    const uint64_t all = gathered + H * b;      // p blocks, local-rank major
    const uint64_t s0 = all + static_cast<uint64_t>(p) * b;
    s.scratch_bytes = s0 + std::max(inter.scratch_bytes, local.scratch_bytes);
    gate = append_phase(s, inter, aligned_peer, {Buffer::input, 0, Buffer::scratch, gathered, s0},
                        gate);
    gate = join(s, append_phase(s, local, local_peer,
                                {Buffer::scratch, gathered, Buffer::scratch, all, s0}, gate));
    for (int hh = 0; hh < H; ++hh)
      for (int ll = 0; ll < L; ++ll)
        after_gate(
            s.copy({Buffer::output, global(hh, ll), b}, {Buffer::scratch, all + major(hh, ll), b}));
    return;
  }

  // reduce_scatter
  const Schedule local = sub_schedule(a, Collective::reduce_scatter, plan.local, L, l, a.count * H);
  const Schedule inter = sub_schedule(a, Collective::reduce_scatter, plan.inter, H, h, a.count);
  const uint64_t all = s.scratch_bytes;                      // p blocks, local-rank major
  const uint64_t mine = all + static_cast<uint64_t>(p) * b;  // H blocks: summed over the host
  const uint64_t s0 = mine + H * b;
  s.scratch_bytes = s0 + std::max(local.scratch_bytes, inter.scratch_bytes);
  for (int hh = 0; hh < H; ++hh)
    for (int ll = 0; ll < L; ++ll)
      gate.push_back(
          s.copy({Buffer::scratch, all + major(hh, ll), b}, {Buffer::input, global(hh, ll), b}));
  gate =
      append_phase(s, local, local_peer, {Buffer::scratch, all, Buffer::scratch, mine, s0}, gate);
  gate = append_phase(s, inter, aligned_peer, {Buffer::scratch, mine, Buffer::output, 0, s0}, gate);
  if (a.op == ReduceOp::avg) after_gate(s.finalize({Buffer::output, 0, b}));
}

}  // namespace shoal::algorithms
