#include "comm/flat.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <vector>

#include "comm/spin.hpp"
#include "core/check.hpp"
#include "core/reduce.hpp"
#include "transport/shm/ring_stream.hpp"
#include "transport/shm/segment.hpp"

namespace shoal::comm {

namespace {

using algorithms::Collective;

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// The owner published operation `seq` (or a later one) in `word`: wrap-safe comparison.
inline bool reached(const std::atomic<uint32_t>& word, uint32_t seq) {
  return static_cast<int32_t>(word.load(std::memory_order_acquire) - seq) >= 0;
}

// Sleeps in a futex on `word` (shared memory, so not a private one) until its owner, whose words
// `h` holds, raises it to `seq` and wakes its waiters, for at most `max_ns`.
void sleep_on(FlatWords& h, std::atomic<uint32_t>& word, uint32_t seq, int64_t max_ns) {
  h.waiters.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t seen = word.load(std::memory_order_seq_cst);
  if (static_cast<int32_t>(seen - seq) < 0) {
    const int64_t slept_at = monotonic_ns();
    timespec ts{static_cast<time_t>(max_ns / 1'000'000'000),
                static_cast<long>(max_ns % 1'000'000'000)};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, seen, &ts, nullptr, 0);
    const int64_t woken_at = h.woken_ns.load(std::memory_order_relaxed);
    if (woken_at > slept_at && reached(word, seq)) note_wake_latency(monotonic_ns() - woken_at);
  }
  h.waiters.fetch_sub(1, std::memory_order_seq_cst);
}

// Spin briefly on `word` (not on a host of more ranks than cores), then poll it for the spin
// budget, then sleep on it in a futex (shared memory, so not a private one), with a bounded
// sleep so that `check` runs regularly (broken communicator, timeout, mismatch). `h` holds the
// words of the word's owner.
void wait_for(FlatWords& h, std::atomic<uint32_t>& word, uint32_t seq, int who, bool oversubscribed,
              const std::function<void(int)>& check) {
  // With more ranks than cores the peer we wait for may need this very core: spinning only
  // delays it, so such a rank yields at once and between polls; so does one that last saw the
  // peer on its own CPU (unbound ranks). Otherwise it keeps its core between polls: a yield
  // hands a core shared with a busy process to that process for a whole time slice
  // (docs/benchmarks.md, "Under load").
  const int pauses = oversubscribed ? 0 : 64;
  for (int i = 0; i < pauses; ++i) {
    if (reached(word, seq)) return;
    cpu_relax();
  }
  check(who);
  const auto poll_until = std::chrono::steady_clock::now() + spin_budget();
  while (std::chrono::steady_clock::now() < poll_until) {
    if (reached(word, seq)) return;
    if (oversubscribed || h.cpu.load(std::memory_order_relaxed) == sched_getcpu())
      sched_yield();
    else
      for (int i = 0; i < 32; ++i) cpu_relax();
  }
  for (;;) {
    if (reached(word, seq)) return;  // a peer that published and then left is not a failure
    check(who);
    sleep_on(h, word, seq, 20'000'000);  // wake at least every 20 ms to run `check`
  }
}

// Publishes `seq` in `word` (after the data it guards) and wakes peers asleep on it.
void raise(FlatWords& h, std::atomic<uint32_t>& word, uint32_t seq) {
  h.cpu.store(sched_getcpu(), std::memory_order_relaxed);
  word.store(seq, std::memory_order_seq_cst);
  if (h.waiters.load(std::memory_order_seq_cst) != 0) {
    h.woken_ns.store(monotonic_ns(), std::memory_order_relaxed);
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr,
            0);
  }
}

// Up to this size an all_reduce reduces the whole message on every rank; above, each rank
// reduces its slice and the others copy it (less reading, one more synchronisation).
constexpr uint64_t kWholeBytes = 16 * 1024;

bool reduces(Collective c) {
  return c == Collective::all_reduce || c == Collective::reduce_scatter || c == Collective::reduce;
}

// What a direct flat collective publishes in its slot instead of its input: where, in its
// process, its input and (an all_reduce, into which the peers write their reduced slices) its
// output are.
struct DirectAddresses {
  uint64_t input, output;
};

// A direct reduction pulls a peer's part in pieces this big into a buffer of the calling
// thread's, and reduces each while it is in cache (2 ranks: 256 KiB 5-10% faster than 64 KiB,
// 512 KiB the same; a core's L2 is 2 MiB here).
constexpr uint64_t kPullChunk = 256 * 1024;

}  // namespace

std::string closed_without_joining(int rank, uint64_t number, int peer) {
  return "rank " + std::to_string(rank) + ": collective #" + std::to_string(number) + ": rank " +
         std::to_string(peer) +
         " closed its communicator without joining it: the ranks issued "
         "different sequences of calls";
}

void announce_collective(const FlatMemory& memory, int rank, uint64_t number, uint32_t signature) {
  memory.of(rank).words().announced.store(
      static_cast<uint64_t>(static_cast<uint32_t>(number + 1)) << 32 | signature,
      std::memory_order_release);
}

Announcement announced_by(const FlatMemory& memory, int peer, uint64_t number) {
  const uint64_t word = memory.of(peer).words().announced.load(std::memory_order_acquire);
  return {
      static_cast<int32_t>(static_cast<uint32_t>(word >> 32) - static_cast<uint32_t>(number + 1)),
      static_cast<uint32_t>(word)};
}

uint64_t flat_published_bytes(const algorithms::CollectiveArgs& a) {
  const uint64_t es = size_of(a.dtype);
  switch (a.collective) {
    case Collective::all_reduce:
    case Collective::all_gather:
    case Collective::reduce:
      return a.count * es;
    case Collective::reduce_scatter:
      return a.count * es * static_cast<uint64_t>(a.size);
    case Collective::broadcast:
      return a.rank == a.root ? a.count * es : 0;
    default:
      return 0;
  }
}

uint64_t flat_decision_bytes(const algorithms::CollectiveArgs& a) {
  return a.count * size_of(a.dtype) *
         static_cast<uint64_t>(a.collective == Collective::reduce_scatter ? a.size : 1);
}

namespace {
constexpr uint64_t kMaxRounds = uint64_t{1} << 24;

// Elements of each block that a round of `a` takes through slots of `slot_bytes`.
uint64_t flat_round_count(const algorithms::CollectiveArgs& a, uint64_t slot_bytes) {
  // A reduce_scatter publishes a piece of each of its `size` input blocks.
  const uint64_t blocks = a.collective == Collective::reduce_scatter ? a.size : 1;
  return slot_bytes / (size_of(a.dtype) * blocks);
}
}  // namespace

uint32_t flat_rounds(const algorithms::CollectiveArgs& a, const FlatLimits& limits) {
  // The reductions only: an all_gather or a broadcast in rounds copies every byte twice (into
  // the slot, out of it) where the direct path copies it once, and measured slower at 2 ranks.
  const bool reduction =
      a.collective == Collective::all_reduce || a.collective == Collective::reduce_scatter;
  if (!limits.rounds || !reduction || a.size < 2 || flat_decision_bytes(a) <= limits.slot_bytes)
    return 1;
  const uint64_t per_round = flat_round_count(a, limits.slot_bytes);
  const uint64_t rounds = per_round == 0 ? 0 : (a.count + per_round - 1) / per_round;
  // Not even an element of each block fits, or so many rounds that their flat numbers would
  // span more than the wrap-safe comparisons of those numbers allow: not in rounds.
  if (rounds == 0 || rounds > kMaxRounds) return 1;
  return static_cast<uint32_t>(rounds);
}

bool flat_direct(const algorithms::CollectiveArgs& a, const FlatLimits& limits) {
  const uint64_t input = flat_decision_bytes(a);
  switch (a.collective) {
    case Collective::all_gather:
    case Collective::broadcast:
    case Collective::reduce_scatter:
      break;
    // In the slots an all_reduce reduces slices as fast (measured: docs/benchmarks.md), with
    // one wait less.
    case Collective::all_reduce:
      if (input <= limits.slot_bytes) return false;
      break;
    default:
      return false;
  }
  if (flat_rounds(a, limits) > 1) return false;
  return a.size > 1 && a.count > 0 && input >= limits.direct_bytes;
}

bool flat_queued(const algorithms::CollectiveArgs& a, const FlatLimits& limits) {
  const uint64_t bytes = a.count * size_of(a.dtype);
  return a.collective == Collective::broadcast && a.size > 1 && bytes > 0 &&
         bytes <= std::min(FlatRegion::kQueuedBytes, limits.slot_bytes) && !flat_direct(a, limits);
}

bool flat_fits(const algorithms::CollectiveArgs& a, const FlatLimits& limits) {
  // A barrier publishes an empty slot and waits for every peer's.
  if (a.collective == Collective::barrier) return a.size > 1 && limits.slot_bytes > 0;
  if (flat_direct(a, limits) || flat_rounds(a, limits) > 1) return true;
  switch (a.collective) {
    case Collective::all_reduce:
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::broadcast:
    case Collective::reduce:
      break;
    default:
      return false;
  }
  const uint64_t bytes = flat_decision_bytes(a);
  return a.size > 1 && bytes > 0 && bytes <= limits.slot_bytes;
}

FlatCollective::FlatCollective(const FlatMemory& memory, const algorithms::CollectiveArgs& args,
                               uint32_t seq, uint64_t op_number, uint32_t signature,
                               const void* input, void* output)
    : memory_(memory),
      args_(args),
      seq_(seq),
      input_(input),
      output_(output),
      op_number_(op_number),
      signature_(signature),
      es_(size_of(args.dtype)),
      count_(args.count),
      first_seq_(seq),
      call_input_(static_cast<const uint8_t*>(input)),
      call_output_(static_cast<uint8_t*>(output)),
      rounds_(flat_rounds(args, memory.limits())),
      direct_(flat_direct(args, memory.limits())),
      reduces_(reduces(args.collective)),
      queued_(flat_queued(args, memory.limits())) {
  if (rounds_ > 1) start_round();
  announce_collective(memory, args.rank, op_number, signature);
}

void FlatCollective::start_round() {
  const uint64_t per_round = flat_round_count(args_, memory_.slot_bytes());
  first_ = round_ * per_round;
  args_.count = std::min(per_round, count_ - first_);
  input_ = call_input_ + first_ * es_;
  output_ = call_output_ + first_ * es_;
  seq_ = first_seq_ + round_;
  stage_ = Stage::room;
  step_ = 0;
}

bool FlatCollective::advance() {
  const uint32_t round = round_;
  const Stage stage = stage_;
  const int step = step_;
  bool done = false;
  while (advance_round()) {
    if (++round_ == rounds_) {
      done = true;
      break;
    }
    start_round();
  }
  moved_ = done || round_ != round || stage_ != stage || step_ != step;
  return done;
}

void FlatCollective::mismatch(int peer, const std::string& what) const {
  SHOAL_THROW(Mismatch,
              "rank " << args_.rank << ": " << algorithms::to_string(args_.collective) << " #"
                      << op_number_ << ": rank " << peer << " " << what
                      << ": every rank must issue the same collectives with the same "
                         "counts, types, ops and roots, in the same order",
              peer);
}

void FlatCollective::watch_peer() const {
  if (stage_ == Stage::combine || stage_ == Stage::take) watch(waiting_for());
}

void FlatCollective::watch(int q) const {
  const auto [announced, signature] = announced_by(memory_, q, op_number_);
  // A peer in this same collective with another signature issued a different call (perhaps
  // one that is not flat, so it would never publish here)...
  if (announced == 0 && signature != signature_)
    mismatch(q, "entered this collective with different arguments");
  // ...and one already past it did not run it as this flat collective: it publishes before it
  // announces the next one, so its input would be visible now.
  if (announced > 0 && stage_ == Stage::combine && !reached(memory_.of(q).slot(seq_).seq, seq_))
    mismatch(q,
             "moved past this collective without publishing its input: it issued a different call");
  if (announced > 0 && stage_ == Stage::take && !reached(memory_.of(q).entry(seq_).seq, seq_))
    mismatch(q, "moved past this broadcast without queuing its data: it issued a different call");
}

void FlatCollective::check_slot(int q, const FlatSlotHeader& slot) const {
  // In a broadcast only the root publishes data; in the others every rank publishes alike.
  const uint64_t expected = args_.collective != Collective::broadcast ? flat_published_bytes(args_)
                            : q == args_.root                         ? args_.count * es_
                                                                      : 0;
  if (slot.signature != signature_ || slot.bytes != expected)
    mismatch(q, "published " + std::to_string(slot.bytes) + " bytes where this rank expected " +
                    std::to_string(expected) + " (or another collective, type, op or root)");
}

bool FlatCollective::advance_round() {
  if (stage_ == Stage::room) {
    if (!room()) return false;
    stage_ = Stage::publish;
    step_ = 0;
  }
  if (stage_ == Stage::publish && queued_) {
    if (args_.rank != args_.root) {
      stage_ = Stage::take;
    } else {
      // The root: into the queue entry, then done (room() made sure the entry is free).
      const auto& mine = memory_.of(args_.rank);
      const uint64_t bytes = args_.count * es_;
      FlatSlotHeader& entry = mine.entry(seq_);
      entry.signature = signature_;
      entry.bytes = bytes;
      std::memcpy(mine.entry_data(seq_), input_, bytes);
      raise(mine.words(), entry.seq, seq_);
      if (output_ != input_) std::memcpy(output_, input_, bytes);
      raise(mine.words(), mine.words().queued_done, seq_);
      return true;
    }
  }
  if (stage_ == Stage::take) return take();
  if (stage_ == Stage::publish) {
    const auto& mine = memory_.of(args_.rank);
    FlatSlotHeader& slot = mine.slot(seq_);
    const uint64_t bytes = flat_published_bytes(args_);
    slot.signature = signature_;
    slot.bytes = bytes;
    if (direct_) {
      const DirectAddresses where{reinterpret_cast<uintptr_t>(input_),
                                  reinterpret_cast<uintptr_t>(output_)};
      std::memcpy(mine.slot_data(seq_), &where, sizeof where);
    } else if (args_.collective == Collective::reduce_scatter && rounds_ > 1) {
      // This round's piece of every input block, packed: the slot holds `size` blocks of it.
      const uint64_t piece = args_.count * es_;
      for (int b = 0; b < args_.size; ++b)
        std::memcpy(mine.slot_data(seq_) + b * piece,
                    call_input_ + (static_cast<uint64_t>(b) * count_ + first_) * es_, piece);
    } else if (bytes > 0) {
      std::memcpy(mine.slot_data(seq_), input_, bytes);
    }
    raise(mine.words(), slot.seq, seq_);
    stage_ = Stage::combine;
    step_ = 0;
  }
  auto& words = memory_.of(args_.rank).words();
  if (stage_ == Stage::combine) {
    if (!combine()) return false;
    // Every peer published this call, so it is done with the one before.
    uint32_t& known = memory_.known_done();
    if (static_cast<int32_t>(seq_ - 1 - known) > 0) known = seq_ - 1;
    if (direct_) {
      // Everything this rank reads of the peers' buffers is read (and, all_reduce, everything
      // it writes into them written).
      raise(words, words.read, seq_);
      stage_ = Stage::release;
    } else if (args_.collective == Collective::all_reduce && args_.count * es_ > kWholeBytes) {
      raise(words, words.done, seq_);  // a slice reduced for the peers to copy
      stage_ = Stage::gather;
    } else {
      return true;
    }
    step_ = 0;
  }
  if (stage_ == Stage::gather) return gather();
  return release();
}

// Before a call overwrites what its peers may still read — its slot and result area, last
// used two calls back; (the root of a queued broadcast) its queue entry, kQueueEntries calls
// back — every peer must be done with that call. After a call that waited for every peer this
// rank knows they are (they all entered it); only queued broadcasts in between leave that
// unknown, and then each peer's queued_done tells (every call since is a queued one, which
// each peer marks when done, so the wait ends).
bool FlatCollective::room() {
  if (queued_ && args_.rank != args_.root) return true;  // writes nothing of its own
  uint32_t& known = memory_.known_done();
  room_for_ = seq_ - (queued_ ? FlatRegion::kQueueEntries : 2);
  if (static_cast<int32_t>(known - room_for_) >= 0) return true;
  for (; step_ < args_.size; ++step_) {
    const int q = peer_at(step_);
    if (q != args_.rank && !reached(memory_.of(q).words().queued_done, room_for_)) return false;
  }
  known = room_for_;
  return true;
}

// (queued broadcast, not the root) Copies the root's queue entry and marks the call done.
bool FlatCollective::take() {
  const auto& root = memory_.of(args_.root);
  const FlatSlotHeader& entry = root.entry(seq_);
  if (!reached(entry.seq, seq_)) return false;
  check_slot(args_.root, entry);
  std::memcpy(output_, root.entry_data(seq_), args_.count * es_);
  auto& mine = memory_.of(args_.rank).words();
  raise(mine, mine.queued_done, seq_);
  return true;
}

// (direct) Copies `len` bytes from `offset` into rank q's input, whose address q published, to
// `to`; or (push) from `from` to `offset` into q's output.
void FlatCollective::pull(int q, uint64_t offset, void* to, uint64_t len) const {
  copy_with(q, offset, to, nullptr, len);
}
void FlatCollective::push(int q, uint64_t offset, const void* from, uint64_t len) const {
  copy_with(q, offset, nullptr, from, len);
}

void FlatCollective::copy_with(int q, uint64_t offset, void* to, const void* from,
                               uint64_t len) const {
  const auto& seg = memory_.of(q);
  DirectAddresses where{};
  std::memcpy(&where, seg.slot_data(seq_), sizeof where);
  std::string error;
  const int pid = memory_.pid_of(q);
  if (to ? transport::shm::pull_from(pid, where.input + offset, to, len, error)
         : transport::shm::push_to(pid, where.output + offset, from, len, error))
    return;
  const std::string call = "rank " + std::to_string(args_.rank) + ": " +
                           std::string(algorithms::to_string(args_.collective)) + " #" +
                           std::to_string(op_number_);
  // A peer whose call failed leaves its note before it returns (and its user may free the
  // buffers): the note is the cause.
  if (const auto note = transport::shm::abort_note_of(memory_.mesh().segment_of(q).header()))
    throw_error(note->code,
                call + ": rank " + std::to_string(q) + " failed and reported: " + note->message,
                note->culprit);
  SHOAL_THROW(PeerFailure,
              call << ": cannot " << (to ? "read rank " : "write rank ") << q << "'s "
                   << (to ? "input in" : "output into") << " its memory (" << error
                   << "): it probably died",
              q);
}

// (direct all_reduce, reduce_scatter) Reduces elements [lo, lo + n) of every rank's input into
// `dst`, a cache-sized piece at a time: the own input's piece with the next peer's (three
// operands: nothing copied first), then the others' onto it, pulled into a buffer of the
// calling thread's; an all_reduce then writes each reduced piece, still in cache, into every
// peer's output (they read nothing back from this rank's).
void FlatCollective::reduce_direct(uint64_t lo, uint64_t n, uint8_t* dst) const {
  thread_local std::vector<uint8_t> piece(kPullChunk);
  const uint64_t per_piece = kPullChunk / es_;
  const int p = args_.size, me = args_.rank;
  const auto* own = static_cast<const uint8_t*>(input_) + lo * es_;
  for (uint64_t done = 0; done < n; done += per_piece) {
    const uint64_t m = std::min(per_piece, n - done);
    uint8_t* to = dst + done * es_;
    for (int s = 1; s < p; ++s) {
      pull((me + s) % p, (lo + done) * es_, piece.data(), m * es_);
      if (s == 1)
        kernels::reduce(to, own + done * es_, piece.data(), m, args_.dtype, args_.op);
      else
        kernels::reduce_into(to, piece.data(), m, args_.dtype, args_.op);
    }
    if (args_.op == ReduceOp::avg) kernels::finalize_avg(to, m, args_.dtype, p);
    if (args_.collective == Collective::all_reduce)
      for (int s = 1; s < p; ++s) push((me + s) % p, (lo + done) * es_, to, m * es_);
  }
}

bool FlatCollective::combine() {
  const Collective c = args_.collective;
  const int p = args_.size, me = args_.rank;
  const uint64_t count = args_.count, bytes = count * es_;
  // What this rank combines: the element range [lo, hi) of each published input, into dst.
  uint64_t lo = 0, hi = count;
  uint8_t* dst = static_cast<uint8_t*>(output_);
  if (c == Collective::all_reduce && (direct_ || bytes > kWholeBytes)) {
    lo = algorithms::block_begin(count, p, me);
    hi = algorithms::block_begin(count, p, me + 1);
    // Direct: reduced in place in the output, and written from there into the peers'.
    dst = direct_ ? dst + lo * es_ : memory_.of(me).result(seq_) + lo * es_;
  } else if (c == Collective::reduce_scatter) {
    lo = static_cast<uint64_t>(me) * count;
    hi = lo + count;
  }
  // In a broadcast and a reduce too, every rank waits for every peer's slot: that is how a
  // peer that called something else is caught, and what makes the next operation's slot free.
  const bool takes_data = c != Collective::reduce || me == args_.root;
  for (; step_ < p; ++step_) {
    const int q = peer_at(step_);
    const auto& seg = memory_.of(q);
    const FlatSlotHeader& slot = seg.slot(seq_);
    if (q != me && !reached(slot.seq, seq_)) return false;
    check_slot(q, slot);
    // Our own contribution is read from the input where that is safe and hot: a copy (the
    // output may alias the input, then there is nothing to copy), not a reduction.
    const uint8_t* data = seg.slot_data(seq_) + lo * es_;
    const void* from = q == me ? input_ : data;
    if (c == Collective::broadcast) {
      if (q != args_.root || output_ == from) continue;
      if (direct_ && q != me)
        pull(q, 0, output_, bytes);
      else
        std::memcpy(output_, from, bytes);
    } else if (c == Collective::all_gather) {
      // Blocks of the whole call's count apart (in rounds, this round's piece of each).
      uint8_t* to = static_cast<uint8_t*>(output_) + static_cast<uint64_t>(q) * count_ * es_;
      if (direct_ && q != me)
        pull(q, 0, to, bytes);
      else if (to != from)
        std::memcpy(to, from, bytes);
    } else if (direct_) {
      continue;  // reduced below, once every peer's buffers are known
    } else if (takes_data && hi > lo) {
      if (q == 0)
        std::memcpy(dst, data, (hi - lo) * es_);
      else
        kernels::reduce_into(dst, data, hi - lo, args_.dtype, args_.op);
    }
  }
  // Direct: only this rank reduces these elements, in the same order of peers in every call, so
  // every rank still gets the same bits; in place the own input's piece is the destination
  // itself, read before anything is reduced onto it.
  if (direct_ && reduces_)
    reduce_direct(lo, hi - lo, dst);
  else if (args_.op == ReduceOp::avg && reduces(c) && takes_data && hi > lo)
    kernels::finalize_avg(dst, hi - lo, args_.dtype, p);
  return true;
}

// (all_reduce in slices) Copy the slices the peers reduced from their result areas.
bool FlatCollective::gather() {
  for (; step_ < args_.size; ++step_) {
    const int q = peer_at(step_);
    const auto& seg = memory_.of(q);
    if (q != args_.rank && !reached(seg.words().done, seq_)) return false;
    const uint64_t b = algorithms::block_begin(args_.count, args_.size, q);
    const uint64_t e = algorithms::block_begin(args_.count, args_.size, q + 1);
    if (e > b)
      std::memcpy(static_cast<uint8_t*>(output_) + b * es_, seg.result(seq_) + b * es_,
                  (e - b) * es_);
  }
  return true;
}

// (direct) Waits until every peer that reads this rank's buffers (or, all_reduce, writes its
// output) is done with them: every peer, but in a broadcast only the root's readers (the
// others' inputs are not read).
bool FlatCollective::release() {
  if (args_.collective == Collective::broadcast && args_.rank != args_.root) return true;
  for (; step_ < args_.size; ++step_) {
    const int q = peer_at(step_);
    if (q != args_.rank && !reached(memory_.of(q).words().read, seq_)) return false;
  }
  return true;
}

void FlatCollective::run(const std::function<void(int)>& check) {
  auto watch_and_check = [&](int q) {
    watch(q);
    check(q);
  };
  while (!advance()) {
    const int q = waiting_for();
    wait_for(memory_.of(q).words(), awaited_word(), awaited_value(), q, memory_.oversubscribed(),
             watch_and_check);
  }
}

std::atomic<uint32_t>& FlatCollective::awaited_word() const {
  const auto& peer = memory_.of(waiting_for());
  return stage_ == Stage::room      ? peer.words().queued_done
         : stage_ == Stage::take    ? peer.entry(seq_).seq
         : stage_ == Stage::combine ? peer.slot(seq_).seq
         : stage_ == Stage::gather  ? peer.words().done
                                    : peer.words().read;
}

void FlatCollective::sleep(std::chrono::nanoseconds max) const {
  sleep_on(memory_.of(waiting_for()).words(), awaited_word(), awaited_value(), max.count());
}

}  // namespace shoal::comm
