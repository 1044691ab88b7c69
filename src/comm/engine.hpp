// The progress engine of one communicator: a thread that owns the connections (epoll) and
// executes schedules. Operations start in issue order; a collective starts once the previous
// collective has finished, while sends and receives start at once and overlap anything (a rank
// can post a send and a receive and wait for both, or a collective behind a receive that
// waits). Collectives complete in issue order; a send or receive completes when it is done.
//
// Any failure (dead peer, mismatch, malformed frame, timeout) breaks the communicator: every
// pending operation fails with that error, the peers are told (an abort frame) so they fail
// fast too, and later calls fail at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/schedule.hpp"
#include "comm/failure.hpp"
#include "comm/flat.hpp"
#include "comm/request.hpp"
#include "comm/work_state.hpp"
#include "transport/connection.hpp"
#include "transport/shm/shm_mesh.hpp"

namespace shoal::comm {

using Clock = std::chrono::steady_clock;

struct OpRequest {
  algorithms::CollectiveArgs args;
  const void* input = nullptr;
  void* output = nullptr;
  // Non-empty: the input (output) is these pieces instead of one buffer (a vectored call). Frames
  // stay contiguous on the wire; the pieces are gathered and scattered at the ends.
  std::vector<Piece> input_pieces, output_pieces;
  std::function<void()> finish;  // run on success, before the Work completes (copy-outs)
  // Run on success, before the Work completes, with the seconds from the operation's start (a
  // collective starts once the previous one has finished) to its end: the planner's learning.
  std::function<void(double)> timed;
  uint32_t flat_seq = 0;   // non-zero: a flat collective (comm/flat.hpp), not a schedule
  uint32_t signature = 0;  // algorithms::signature(args), computed once by the submitter
};

class Engine : public transport::ConnectionListener {
 public:
  /// Takes ownership of `streams` (one per peer, null for this rank), of `shm` (the shared
  /// memory some of them use; may be null) and of `flat` (the flat collectives' memory in it,
  /// where every rank shares memory; else null).
  Engine(int rank, int size, uint64_t comm_id,
         std::vector<std::unique_ptr<transport::Stream>> streams,
         std::unique_ptr<transport::shm::ShmMesh> shm, std::unique_ptr<FlatMemory> flat,
         std::chrono::milliseconds timeout);
  /// Finishes pending operations (bounded by the timeout), says goodbye, stops the thread.
  ~Engine();

  /// Queues an operation; never blocks on the network.
  std::shared_ptr<detail::WorkState> submit(const OpRequest& request);

  // ---- for operations that run on the caller's thread (flat collectives) ----
  /// True when every operation submitted so far has completed.
  bool idle() const;
  /// Takes the next collective number, as a collective submitted here would.
  uint64_t reserve_collective_number();
  /// The error the communicator broke with, or null. `broken()` is cheap (one atomic load);
  /// both see a break_from_caller at once, before the progress thread has applied it.
  std::exception_ptr broken_error() const;
  bool broken() const { return failure_.broken(); }
  /// Breaks the communicator from another thread: the progress thread tells the peers. The
  /// shared-memory abort note is left at once, before this returns: a caller may then free a
  /// buffer a local peer is still reading, and that peer's failed read reports this cause.
  void break_from_caller(ErrorCode code, const std::string& message, int culprit);
  /// For a communicator inside another (the hierarchy's groups): errors then also name the
  /// culprit by its rank in `world_ranks` (the outer communicator's), with `context` saying
  /// where. Call before the first operation.
  void set_outer_names(std::string context, std::vector<int> world_ranks);
  /// The culprit to pass to break_from_caller for a rank of the outer communicator that is not
  /// in this one (a relayed failure): the peers' errors name it by that outer rank.
  static int outside_culprit(int outer_rank) { return outer_rank >= 0 ? -2 - outer_rank : -1; }
  /// Called on the progress thread when the communicator breaks, with the error it broke with
  /// (one listener; null removes it, waiting for a call in progress to end).
  using BreakListener = std::function<void(ErrorCode, const std::string&, int culprit)>;
  void set_break_listener(BreakListener listener);
  const transport::shm::ShmMesh* shm() const { return shm_.get(); }
  /// The flat collectives' memory (null unless every rank shares memory).
  const FlatMemory* flat() const { return flat_.get(); }
  /// Scheduled operations submitted so far that run `row` (registry()'s rows): what each
  /// call actually ran, after the dispatcher, SHOAL_ALGO and per-call options.
  uint64_t runs_of(const algorithms::AlgorithmInfo& row) const;
  /// True once `peer` closed its communicator (cleanly).
  bool peer_closed(int peer) const { return peer_closed_[peer].load(std::memory_order_acquire); }
  /// True once this rank learned that `peer` failed (its connection broke, or a peer said so).
  bool peer_failed(int peer) const { return peer_failed_[peer].load(std::memory_order_acquire); }

 private:
  struct Op;
  struct IoSlot {
    Op* op;
    uint32_t step;
  };

  void loop();
  void admit_new_ops();
  void start_ready_ops();
  void start(Op& op);
  void make_ready(Op& op, uint32_t step);
  void run_local(Op& op, uint32_t step);
  void step_done(Op& op, uint32_t step);
  void try_post(int peer);
  void finish_ops();
  /// Writes and reads on every connection that has work posted (the first step of drain()).
  void progress_dirty();
  void drain();
  void check_timeouts();
  bool watch_collective_peers();
  int next_timeout_ms() const;
  // Heartbeats (SHOAL_HEARTBEAT): quiet links carry a heartbeat every interval, and a peer
  // silent for the limit breaks the communicator with PeerFailure naming it. Returns true when
  // it broke the communicator.
  bool check_heartbeats(Clock::time_point now);
  std::chrono::milliseconds heartbeat_limit_{0}, heartbeat_interval_{0};
  Clock::time_point next_heartbeat_{};
  // Every rank shares memory: peers' announced collectives can be watched (see check_timeouts).
  static constexpr std::chrono::milliseconds kWatchInterval{20};
  bool watch_peers_ = false;
  Clock::time_point last_watch_{};
  void break_comm(ErrorCode code, const std::string& message, int peer);
  /// `peer` as the errors name it (under submit_mutex_): inside another communicator, by its
  /// outer rank (a relayed outside_culprit() decoded), with `where` saying so; else itself.
  int outer_culprit(int peer, std::string& where) const;
  std::string describe(const Op& op) const;
  Op* find_op(uint32_t id);
  uint8_t* resolve(Op& op, const algorithms::Slice& s);
  /// The runs of memory that hold `s` into `out`: one, unless `s` lies in a vectored buffer and
  /// spans several of its pieces (none for an empty slice there).
  void runs(Op& op, const algorithms::Slice& s, std::vector<iovec>& out);
  std::vector<iovec> local_runs_[3];   // run_local's, kept to not allocate per step
  std::vector<uint32_t> ready_local_;  // start's, likewise

  // ConnectionListener: record, handled by drain() on this thread
  void on_send_complete(uint64_t cookie) override;
  void on_recv_complete(uint64_t cookie) override;
  void on_connection_error(int peer, ErrorCode code, const std::string& message) override;
  void on_peer_abort(int peer, int culprit, ErrorCode code, const std::string& message) override;
  void on_peer_in_collective(int peer, uint64_t seq, uint32_t signature) override;
  void on_peer_closed(int peer) override {
    peer_closed_[peer].store(true, std::memory_order_release);
  }
  std::optional<transport::RecvRequest> claim_any_source(int peer,
                                                         const transport::FrameHeader& header,
                                                         uint64_t before) override;
  bool any_source_waiting() const override { return !any_source_.empty(); }
  transport::RecvRequest receive_request(Op& op, uint32_t step);
  void post_any_source(Op& op, uint32_t step);

  const int rank_, size_;
  const uint64_t comm_id_;
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<transport::shm::ShmMesh> shm_;  // outlives conns_, whose rings it maps
  std::unique_ptr<FlatMemory> flat_;              // in shm_'s segments
  std::vector<std::unique_ptr<transport::Connection>> conns_;
  std::vector<int> polled_;  // peers whose streams must be polled
  std::atomic<uint32_t>* sleeping_flag_ = nullptr;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;

  // submission (any thread)
  mutable std::mutex submit_mutex_;
  std::deque<std::unique_ptr<Op>> submitted_;
  std::atomic<uint64_t> next_collective_seq_{0};  // taken under submit_mutex_ or by an idle caller
  std::vector<uint64_t> next_send_seq_, next_recv_seq_;
  uint64_t next_any_source_seq_ = 0;
  bool stopping_ = false;
  FailureState failure_;                  // its [lock] parts under submit_mutex_ (comm/failure.hpp)
  std::atomic<uint64_t> outstanding_{0};  // submitted and not yet completed
  std::unique_ptr<std::atomic<uint64_t>[]> runs_;  // per registry() row (runs_of)
  std::unique_ptr<std::atomic<bool>[]> peer_closed_;
  std::unique_ptr<std::atomic<bool>[]> peer_failed_;
  std::string outer_context_;     // guarded by submit_mutex_ (set_outer_names)
  std::vector<int> outer_ranks_;  // guarded by submit_mutex_
  std::mutex listener_mutex_;     // held while the break listener runs
  BreakListener break_listener_;  // guarded by listener_mutex_
  Op* flat_running_ = nullptr;    // the flat collective in progress, polled
  void advance_flat();

  // engine thread only
  std::deque<std::unique_ptr<Op>> waiting_;  // admitted, not started
  std::deque<std::unique_ptr<Op>> running_;  // started, in issue order
  std::vector<std::deque<IoSlot>> send_queue_, recv_queue_;
  std::deque<IoSlot> any_source_;      // receives from any source no frame has come for, in order
  std::vector<uint64_t> completions_;  // cookies reported by connections
  std::vector<int> dirty_;             // connections to progress
  std::vector<uint8_t> scratch_;
  uint32_t next_op_id_ = 1;
  // Polls (yielding) for the spin budget while work may arrive soon, then sleeps in epoll_wait;
  // submitters write the wake-up eventfd only when it sleeps.
  std::atomic<bool> sleeping_{false};
  Clock::time_point last_activity_{};
  uint64_t progress_count_ = 0, progress_seen_ = 0;  // steps done, ops admitted or finished
};

}  // namespace shoal::comm
