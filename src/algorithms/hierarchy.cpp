// Hierarchical schedules composed from registry rows (see hierarchy.hpp).
#include "algorithms/hierarchy.hpp"

#include <algorithm>
#include <functional>

#include "algorithms/tracked.hpp"
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
  SHOAL_CHECK(composable(coll), InvalidArgument,
              "hierarchical schedule: none for " << to_string(coll));
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
    // The runtime's split: q elements per local rank, the rem = count % L left over through an
    // all_reduce on the host and one on the aligned group (fewer than L elements).
    const uint64_t q = a.count / static_cast<uint64_t>(L), rem = a.count % static_cast<uint64_t>(L);
    const uint64_t mine = static_cast<uint64_t>(l) * q * es,
                   tail = static_cast<uint64_t>(L) * q * es;
    const uint64_t s0 = s.scratch_bytes;
    std::vector<Schedule> phases;
    if (q > 0) {
      phases.push_back(sub_schedule(a, Collective::reduce_scatter, plan.local, L, l, q));
      phases.push_back(sub_schedule(a, Collective::all_reduce, plan.inter, H, h, q));
      phases.push_back(sub_schedule(a, Collective::all_gather, plan.local, L, l, q));
    }
    if (rem > 0) {
      phases.push_back(sub_schedule(a, Collective::all_reduce, plan.local, L, l, rem));
      phases.push_back(sub_schedule(a, Collective::all_reduce, plan.inter, H, h, rem));
    }
    // The phases run one after another: their scratch shares one area.
    uint64_t scratch = 0;
    for (const auto& ph : phases) scratch = std::max(scratch, ph.scratch_bytes);
    s.scratch_bytes += scratch;
    size_t next = 0;
    auto finalize_after = [&](Slice x) {
      if (a.op != ReduceOp::avg) return;
      const uint32_t f = s.finalize(x);
      after_gate(f);
      gate = {f};
    };
    if (q > 0) {
      gate = append_phase(s, phases[next++], local_peer,
                          {Buffer::input, 0, Buffer::output, mine, s0}, gate);
      gate = append_phase(s, phases[next++], aligned_peer,
                          {Buffer::output, mine, Buffer::output, mine, s0}, gate);
      finalize_after({Buffer::output, mine, q * es});
      gate = append_phase(s, phases[next++], local_peer,
                          {Buffer::output, mine, Buffer::output, 0, s0}, gate);
    }
    if (rem > 0) {
      gate = append_phase(s, phases[next++], local_peer,
                          {Buffer::input, tail, Buffer::output, tail, s0}, gate);
      gate = append_phase(s, phases[next++], aligned_peer,
                          {Buffer::output, tail, Buffer::output, tail, s0}, gate);
      finalize_after({Buffer::output, tail, rem * es});
    }
    return;
  }

  const uint64_t b = a.count * es;  // one rank's block
  auto block = [&](int hh, int ll) { return (static_cast<uint64_t>(hh) * L + ll) * b; };
  auto rank_of = [&](int hh, int ll) { return hh * L + ll; };
  Tracked t(s, a);
  if (coll == Collective::all_gather) {
    // Inter-host first: the rank's block to its aligned peers, theirs straight into place;
    // each block, once here, forwarded to the other ranks of the host, which receive it into
    // place too. Blocks go in the host order nth(0), nth(1), ... on every rank of a host, so
    // each pair's sends and receives match in order.
    auto nth = [&](int k) { return (h - k + H) % H; };
    t.copy(t.out(block(h, l), b), t.in(0, b));
    for (int k = 1; k < H; ++k) t.recv(rank_of(nth(k), l), t.out(block(nth(k), l), b));
    for (int k = 1; k < H; ++k) t.send(rank_of((h + k) % H, l), t.in(0, b));
    for (int j = 1; j < L; ++j) {
      const int from = (l - j + L) % L;
      for (int k = 0; k < H; ++k) t.recv(rank_of(h, from), t.out(block(nth(k), from), b));
    }
    for (int k = 0; k < H; ++k)
      for (int j = 1; j < L; ++j) t.send(rank_of(h, (l + j) % L), t.out(block(nth(k), l), b));
    return;
  }

  // reduce_scatter. Intra-host first: every other rank of the host sends this rank the H blocks
  // aligned with it (block (h', l) for every host h'), straight from its input, and this rank
  // sums them with its own into H blocks; an aligned reduce_scatter of those leaves its block.
  const Schedule inter = sub_schedule(a, Collective::reduce_scatter, plan.inter, H, h, a.count);
  const uint64_t host_bytes = static_cast<uint64_t>(H) * b;
  const uint64_t acc = t.alloc(static_cast<uint64_t>(L) * host_bytes);  // then L-1 receive areas
  auto area = [&](int j) { return acc + static_cast<uint64_t>(j) * host_bytes; };
  for (int j = 1; j < L; ++j) {
    const int from = (l - j + L) % L;
    for (int hh = 0; hh < H; ++hh) t.recv(rank_of(h, from), t.scratch(area(j) + hh * b, b));
  }
  for (int j = 1; j < L; ++j) {
    const int to = (l + j) % L;
    for (int hh = 0; hh < H; ++hh) t.send(rank_of(h, to), t.in(block(hh, to), b));
  }
  if (L == 1) {
    for (int hh = 0; hh < H; ++hh)
      gate.push_back(t.copy(t.scratch(acc + hh * b, b), t.in(block(hh, l), b)));
  } else {
    for (int hh = 0; hh < H; ++hh)
      gate.push_back(t.reduce(t.scratch(acc + hh * b, b), t.in(block(hh, l), b),
                              t.scratch(area(1) + hh * b, b)));
    for (int j = 2; j < L; ++j) {
      gate = {t.reduce(t.scratch(acc, host_bytes), t.scratch(acc, host_bytes),
                       t.scratch(area(j), host_bytes))};
    }
  }
  const uint64_t s0 = s.scratch_bytes;
  s.scratch_bytes += inter.scratch_bytes;
  gate = append_phase(s, inter, aligned_peer, {Buffer::scratch, acc, Buffer::output, 0, s0}, gate);
  if (a.op == ReduceOp::avg) after_gate(s.finalize({Buffer::output, 0, b}));
}

}  // namespace shoal::algorithms
