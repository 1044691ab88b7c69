// Flat collectives: all_reduce, all_gather, reduce_scatter, broadcast and reduce among ranks
// that all share one host's memory, through shared slots instead of point-to-point messages,
// with no schedule (and, for a blocking call with nothing else in flight, no progress-thread
// hand-off).
//
// Each rank publishes its input in its own segment's slot and raises the slot's sequence
// number, which shares a cache line with the first 48 bytes of data: a small operation costs a
// peer one cache-line transfer per rank. Then every rank works straight from the peers' slots:
//  - all_reduce up to 16 KiB: every rank reduces everything itself; above, each rank reduces
//    its slice into its result area, publishes that, and copies the others' slices;
//  - beyond the slots (SHOAL_FLAT_ROUNDS), all_reduce and reduce_scatter run in rounds, a
//    slot's worth of the buffers at a time (a reduce_scatter publishes that round's piece of
//    each of its input blocks), each round a flat call with a number of its own;
//  - all_gather: copy every slot into place; reduce_scatter: reduce this rank's block of every
//    slot; broadcast: copy the root's slot; reduce: the root reduces every slot.
// Direct: from SHOAL_FLAT_DIRECT_BYTES of input per rank on (where every rank can read every
// other's memory; an all_reduce only beyond the slots; neither reduction in rounds), a rank
// publishes only the addresses of its input and output, and the peers read them in place
// (process_vm_readv): an all_gather or broadcast copies each input once,
// straight into its output; a reduce_scatter reduces its block of every peer's input, a
// cache-sized piece at a time, each piece over every peer while it is in cache; an all_reduce
// reduces its slice alike into its own output and writes each reduced piece, still in cache,
// into every peer's output (process_vm_writev). Each rank then raises `read`, and returns
// once every peer raised it (its buffers are the user's again). This path has no size limit
// (nothing goes through the slot) and each element is still reduced by one rank only, in the
// same order for every call.
// Every rank waits for every peer's slot, even where it needs no data (a reduce's non-roots, a
// broadcast's root beyond the queue): a peer that issued another call is caught at that call,
// and the next rule holds.
// Queued broadcasts (up to 4 KiB) are the exception: the root copies the data into an entry
// of its queue (16 entries, by call number) and returns; the others copy it out and mark the
// call done in their queued_done. Nobody else waits, so calls overlap the way eager
// messages do: a root is ahead by up to 16 calls, a rank that overwrites anything afterwards
// (the root its entry 16 calls on, anyone its slot) first waits for every peer's mark (room).
// The root checks nobody: the next call whose ranks compare signatures compares this one's
// too (CollectiveArgs::unchecked).
// Reductions run in rank order, so every rank gets the same bits. Two slots by operation parity
// make a closing barrier unnecessary: a rank rewrites a slot only once every peer has published
// the next operation, which a peer does only when it is done with the previous one.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "algorithms/schedule.hpp"
#include "comm/flat_memory.hpp"

namespace shoal::comm {

/// The error text for a peer that closed its communicator instead of joining collective #number.
std::string closed_without_joining(int rank, uint64_t number, int peer);

/// Announces, in this rank's segment, the collective it enters (engine or flat alike).
void announce_collective(const FlatMemory& memory, int rank, uint64_t number, uint32_t signature);
/// Where `peer` is relative to collective `number`: before it (< 0), in it (0, with the
/// signature it entered with) or past it (> 0).
struct Announcement {
  int32_t relative;
  uint32_t signature;
};
Announcement announced_by(const FlatMemory& memory, int peer, uint64_t number);

/// Bytes a rank publishes in its slot for `a` (the flat path is possible when they fit).
uint64_t flat_published_bytes(const algorithms::CollectiveArgs& a);
/// The size every rank judges a flat call by, alike on all ranks: the input per rank (the
/// root's, in a broadcast; the whole input of `size` blocks, in a reduce_scatter).
uint64_t flat_decision_bytes(const algorithms::CollectiveArgs& a);
/// How many rounds through the slots `a` takes: with `rounds`, an all_reduce or reduce_scatter
/// beyond the slots runs through them a slot's worth at a time (a reduce_scatter a piece of
/// each of its input blocks), each round a flat call of its own with its own flat collective
/// number; else 1.
uint32_t flat_rounds(const algorithms::CollectiveArgs& a, const FlatLimits& limits);
/// Whether `a` runs direct (by address): all_gather, broadcast and reduce_scatter from
/// `direct_bytes` of input per rank, all_reduce from there but only beyond the slots; neither
/// reduction where it runs in rounds.
bool flat_direct(const algorithms::CollectiveArgs& a, const FlatLimits& limits);
/// Whether `a` is a queued broadcast (up to FlatRegion::kQueuedBytes, within the slots): the
/// root leaves the data in its queue and returns; each other rank copies it from there. Only
/// those two wait for each other, so a root runs up to FlatRegion::kQueueEntries calls ahead.
bool flat_queued(const algorithms::CollectiveArgs& a, const FlatLimits& limits);
/// Whether `a` has a flat version: one that fits the slots (in rounds too), or a direct one.
bool flat_fits(const algorithms::CollectiveArgs& a, const FlatLimits& limits);

/// Flat collective number `seq` (1, 2, ... in issue order, the same on every rank; a call of
/// several rounds takes the numbers `seq` to `seq` + flat_rounds() - 1), which is collective number
/// `op_number` of the communicator, with `signature`.
class FlatCollective {
 public:
  FlatCollective(const FlatMemory& memory, const algorithms::CollectiveArgs& args, uint32_t seq,
                 uint64_t op_number, uint32_t signature, const void* input, void* output);
  /// Does what can be done without waiting; true once finished. Throws MismatchError when a
  /// peer published a different call.
  bool advance();
  /// Whether the last advance() got anywhere (a peer found, a stage or a round finished): a
  /// caller that polls keeps polling while a call of many rounds moves, instead of sleeping.
  bool moved() const { return moved_; }
  /// After advance() returned false: throws MismatchError if the peer it waits for entered
  /// this collective with other arguments or moved past it without publishing (so it will not).
  void watch_peer() const;
  /// The peer it waits for when advance() returned false.
  int waiting_for() const { return stage_ == Stage::take ? args_.root : peer_at(step_); }
  /// Runs to the end on this thread: spins, yields, then sleeps on a futex between advances.
  /// `check(rank)` runs while waiting for `rank` and throws to abandon (broken, timeout).
  void run(const std::function<void(int waiting_for)>& check);
  /// After advance() returned false: sleeps in a futex on the word it waits for, which the peer
  /// wakes when it publishes, for at most `max` (a poller that would otherwise sleep blind).
  void sleep(std::chrono::nanoseconds max) const;

 private:
  // room: wait until the peers are done with what this call overwrites (after queued
  // broadcasts); take: (queued broadcast, not the root) copy the root's entry; gather:
  // (all_reduce in slots' slices) copy the slices the peers reduced; release: (direct) wait
  // until every peer that reads (or writes) this rank's buffers is done with them.
  enum class Stage { room, publish, take, combine, gather, release };
  /// Advances the current round; true once it is finished.
  bool advance_round();
  /// Points the call at round `round_`: its elements, its buffers' part, its number.
  void start_round();
  bool room();
  bool take();
  bool combine();
  bool gather();
  bool release();
  void pull(int q, uint64_t offset, void* to, uint64_t len) const;
  void push(int q, uint64_t offset, const void* from, uint64_t len) const;
  void copy_with(int q, uint64_t offset, void* to, const void* from, uint64_t len) const;
  void reduce_direct(uint64_t lo, uint64_t n, uint8_t* dst) const;
  void watch(int q) const;
  /// The word the call waits on after advance() returned false (the waited-for peer's), and
  /// the value it waits for there.
  std::atomic<uint32_t>& awaited_word() const;
  uint32_t awaited_value() const { return stage_ == Stage::room ? room_for_ : seq_; }
  void check_slot(int q, const FlatSlotHeader& slot) const;
  [[noreturn]] void mismatch(int peer, const std::string& what) const;

  const FlatMemory& memory_;
  // The current round's: its count, its flat collective number, its part of the buffers.
  algorithms::CollectiveArgs args_;
  uint32_t seq_;
  const void* input_;
  void* output_;
  const uint64_t op_number_;
  const uint32_t signature_;
  const uint64_t es_;
  // The whole call's.
  const uint64_t count_;
  uint64_t first_ = 0;  // the current round's first element (of each block)
  const uint32_t first_seq_;
  const uint8_t* const call_input_;
  uint8_t* const call_output_;
  const uint32_t rounds_;
  uint32_t round_ = 0;
  const bool direct_;
  const bool reduces_;  // all_reduce, reduce_scatter, reduce
  const bool queued_;
  Stage stage_ = Stage::room;
  uint32_t room_for_ = 0;  // (room) the call every peer must be done with
  // The peer looked at in step s of a stage: in rank order where a reduction needs it (every
  // rank then gets the same bits), else starting from this rank itself (its own block needs no
  // wait, and the peers' readers spread over different sources).
  int peer_at(int s) const {
    return stage_ == Stage::combine && reduces_ && !direct_ ? s : (args_.rank + s) % args_.size;
  }
  int step_ = 0;  // the next step of the stage
  bool moved_ = false;
};

}  // namespace shoal::comm
