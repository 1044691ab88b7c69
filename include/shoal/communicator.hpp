// Communicator: a group of ranks and the collectives among them.
//
// Conventions (as in NCCL and MPI):
//  - counts are in elements; every rank of a collective passes the same count, dtype, op, root;
//  - calls on one communicator complete in issue order, and every rank issues its collectives
//    in the same order (a difference raises MismatchError instead of corrupting memory);
//  - `X(...)` blocks, `X_async(...)` returns a Work; buffers must outlive the Work;
//  - out of place takes (send, recv); in place takes one buffer;
//  - typed std::span overloads infer the DataType and the count;
//  - across hosts, large all_reduce, all_gather and reduce_scatter run hierarchically on
//    sub-communicators (SHOAL_HIERARCHICAL, docs/algorithms.md) behind a helper thread: another
//    call issued while such an operation is pending waits for it first, keeping issue order.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shoal/error.hpp"
#include "shoal/store.hpp"
#include "shoal/types.hpp"
#include "shoal/work.hpp"

namespace shoal {

namespace detail {
class CommImpl;
struct Internals;
}  // namespace detail
struct HostSplit;

/// Per-communicator settings; unset fields take the SHOAL_* environment defaults.
struct Options {
  /// Bound on every wait (SHOAL_TIMEOUT); zero means the environment's value.
  std::chrono::milliseconds timeout{0};
  /// How the cost model learns this communicator's links at creation (SHOAL_TUNE_CALIBRATE):
  /// `on` times a few calls, `latency` takes only the connections' round trips (no calls: for
  /// short-lived groups on long paths, whose creation timed calls would dominate), `off` keeps
  /// the defaults. Empty means the environment's value. Every rank passes the same.
  std::string calibrate;
};

/// Per-call settings of all_reduce, all_gather and reduce_scatter; every rank must pass the
/// same (a difference is a MismatchError like any other).
struct CallOptions {
  /// A registry row of the collective (`shoal-info --algorithms`), e.g. "rabenseifner": it runs
  /// this call, before SHOAL_ALGO and the dispatcher, and never the flat or hierarchical paths.
  /// Or a path: "flat" (every rank on one host's shared memory, a call the slots or the direct
  /// path serve) or "hierarchical" (hosts of equal rank counts, several of each). Empty: the
  /// usual choice. An unknown name, or a path the call cannot take, is an InvalidArgumentError
  /// raised before anything is sent.
  std::string algorithm;
};

/// One buffer of a vectored call: `count` elements of the call's type at `data`.
struct ConstSegment {
  const void* data = nullptr;
  size_t count = 0;
};
struct Segment {
  void* data = nullptr;
  size_t count = 0;
  operator ConstSegment() const { return {data, count}; }
};

class Communicator {
 public:
  /// Joins the job described by the launcher's environment: torchrun, shoal-run, Open MPI's
  /// mpirun, MPICH/Hydra or SLURM srun (see docs/launchers.md).
  static Communicator from_environment(const Options& options = {});
  /// Joins `size` ranks that rendezvous through `store` (shared by all of them).
  static Communicator create(std::shared_ptr<Store> store, int rank, int size,
                             const Options& options = {});

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  /// Waits for pending operations, says goodbye to the peers and releases every resource.
  ~Communicator();

  int rank() const;
  int size() const;
  /// Rank among the ranks on this host, and their number (discovered at creation).
  int local_rank() const;
  int local_size() const;
  /// Number of distinct hosts in the communicator.
  int num_hosts() const;

  // ---- sub-communicators ----
  /// An empty communicator (what split() gives a rank that passes kNoColor): only valid(),
  /// moving and destruction are allowed on it.
  Communicator() = default;
  /// False for an empty communicator.
  bool valid() const { return impl_ != nullptr; }
  /// The color of a rank that joins no sub-communicator in split().
  static constexpr int kNoColor = -1;
  /// Collective over this communicator, like MPI_Comm_split: the ranks passing the same color
  /// form a new communicator, ranked by (key, rank here); a negative color (kNoColor) gives an
  /// empty one. Every rank calls it at the same position among its collectives (a rank calling
  /// something else there raises MismatchError). Children inherit the timeout and the calibration
  /// (Options) and are
  /// independent of the parent (their own connections and progress thread).
  Communicator split(int color, int key);
  /// Two splits at once: the ranks of this host, and the ranks with this local rank on every
  /// host (ordered by host). Collective, like split().
  HostSplit split_by_host();

  // ---- all_reduce: recv[i] = op over ranks of send[i] ----
  Work all_reduce_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
    return all_reduce_call(send, recv, count, dtype, op, false);
  }
  void all_reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
    all_reduce_call(send, recv, count, dtype, op, true).wait();
  }
  void all_reduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
    all_reduce(buf, buf, count, dtype, op);
  }
  /// With per-call options (the algorithm to use).
  void all_reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                  const CallOptions& call) {
    all_reduce_call(send, recv, count, dtype, op, true, &call).wait();
  }
  Work all_reduce_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                        const CallOptions& call) {
    return all_reduce_call(send, recv, count, dtype, op, false, &call);
  }
  Work all_reduce_async(void* buf, size_t count, DataType dtype, ReduceOp op) {
    return all_reduce_async(buf, buf, count, dtype, op);
  }
  template <class T>
  void all_reduce(std::span<T> buf, ReduceOp op) {
    all_reduce(buf.data(), buf.size(), data_type_of_v<T>, op);
  }
  template <class T>
  void all_reduce(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    check_equal(send.size(), recv.size(), "all_reduce");
    all_reduce(send.data(), recv.data(), send.size(), data_type_of_v<T>, op);
  }
  template <class T>
  Work all_reduce_async(std::span<T> buf, ReduceOp op) {
    return all_reduce_async(buf.data(), buf.size(), data_type_of_v<T>, op);
  }
  template <class T>
  Work all_reduce_async(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    check_equal(send.size(), recv.size(), "all_reduce");
    return all_reduce_async(send.data(), recv.data(), send.size(), data_type_of_v<T>, op);
  }

  // ---- all_gather: recv[r*count + i] = send_r[i]; in place: rank r's block already in buf ----
  Work all_gather_async(const void* send, void* recv, size_t count, DataType dtype);
  void all_gather(const void* send, void* recv, size_t count, DataType dtype) {
    all_gather_call(send, recv, count, dtype, true).wait();
  }
  void all_gather(const void* send, void* recv, size_t count, DataType dtype,
                  const CallOptions& call) {
    all_gather_call(send, recv, count, dtype, true, &call).wait();
  }
  Work all_gather_async(const void* send, void* recv, size_t count, DataType dtype,
                        const CallOptions& call) {
    return all_gather_call(send, recv, count, dtype, false, &call);
  }
  void all_gather(void* buf, size_t count, DataType dtype) {
    all_gather(static_cast<char*>(buf) + rank() * count * size_of(dtype), buf, count, dtype);
  }
  template <class T>
  void all_gather(std::span<const T> send, std::span<T> recv) {
    check_equal(send.size() * size(), recv.size(), "all_gather");
    all_gather(send.data(), recv.data(), send.size(), data_type_of_v<T>);
  }
  template <class T>
  void all_gather(std::span<T> buf) {
    check_divisible(buf.size(), "all_gather");
    all_gather(buf.data(), buf.size() / size(), data_type_of_v<T>);
  }
  template <class T>
  Work all_gather_async(std::span<const T> send, std::span<T> recv) {
    check_equal(send.size() * size(), recv.size(), "all_gather");
    return all_gather_async(send.data(), recv.data(), send.size(), data_type_of_v<T>);
  }

  // ---- reduce_scatter: recv[i] = op over ranks of send[rank*count + i] ----
  Work reduce_scatter_async(const void* send, void* recv, size_t count, DataType dtype,
                            ReduceOp op);
  void reduce_scatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
    reduce_scatter_call(send, recv, count, dtype, op, true).wait();
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                      const CallOptions& call) {
    reduce_scatter_call(send, recv, count, dtype, op, true, &call).wait();
  }
  Work reduce_scatter_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                            const CallOptions& call) {
    return reduce_scatter_call(send, recv, count, dtype, op, false, &call);
  }
  /// In place: buf holds size()*count elements; the result lands in this rank's block.
  void reduce_scatter(void* buf, size_t count, DataType dtype, ReduceOp op) {
    reduce_scatter(buf, static_cast<char*>(buf) + rank() * count * size_of(dtype), count, dtype,
                   op);
  }
  template <class T>
  void reduce_scatter(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    check_equal(recv.size() * size(), send.size(), "reduce_scatter");
    reduce_scatter(send.data(), recv.data(), recv.size(), data_type_of_v<T>, op);
  }
  template <class T>
  Work reduce_scatter_async(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    check_equal(recv.size() * size(), send.size(), "reduce_scatter");
    return reduce_scatter_async(send.data(), recv.data(), recv.size(), data_type_of_v<T>, op);
  }

  // ---- broadcast: every rank's recv = root's send ----
  Work broadcast_async(const void* send, void* recv, size_t count, DataType dtype, int root);
  void broadcast(const void* send, void* recv, size_t count, DataType dtype, int root) {
    broadcast_call(send, recv, count, dtype, root, true).wait();
  }
  void broadcast(void* buf, size_t count, DataType dtype, int root) {
    broadcast(buf, buf, count, dtype, root);
  }
  Work broadcast_async(void* buf, size_t count, DataType dtype, int root) {
    return broadcast_async(buf, buf, count, dtype, root);
  }
  template <class T>
  void broadcast(std::span<T> buf, int root) {
    broadcast(buf.data(), buf.size(), data_type_of_v<T>, root);
  }
  template <class T>
  Work broadcast_async(std::span<T> buf, int root) {
    return broadcast_async(buf.data(), buf.size(), data_type_of_v<T>, root);
  }

  // ---- reduce: root's recv = op over ranks of send (recv unused elsewhere, may be null) ----
  Work reduce_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                    int root);
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root) {
    reduce_call(send, recv, count, dtype, op, root, true).wait();
  }
  void reduce(void* buf, size_t count, DataType dtype, ReduceOp op, int root) {
    reduce(buf, buf, count, dtype, op, root);
  }
  template <class T>
  void reduce(std::span<T> buf, ReduceOp op, int root) {
    reduce(buf.data(), buf.size(), data_type_of_v<T>, op, root);
  }
  template <class T>
  void reduce(std::span<const T> send, std::span<T> recv, ReduceOp op, int root) {
    reduce(send.data(), recv.data(), send.size(), data_type_of_v<T>, op, root);
  }

  // ---- all_to_all: recv[r*count + i] = send_r[rank*count + i] ----
  Work all_to_all_async(const void* send, void* recv, size_t count, DataType dtype);
  void all_to_all(const void* send, void* recv, size_t count, DataType dtype) {
    all_to_all_async(send, recv, count, dtype).wait();
  }
  void all_to_all(void* buf, size_t count, DataType dtype) { all_to_all(buf, buf, count, dtype); }
  template <class T>
  void all_to_all(std::span<const T> send, std::span<T> recv) {
    check_equal(send.size(), recv.size(), "all_to_all");
    check_divisible(send.size(), "all_to_all");
    all_to_all(send.data(), recv.data(), send.size() / size(), data_type_of_v<T>);
  }
  template <class T>
  void all_to_all(std::span<T> buf) {
    check_divisible(buf.size(), "all_to_all");
    all_to_all(buf.data(), buf.size() / size(), data_type_of_v<T>);
  }

  // ---- gather: root's recv[r*count + i] = send_r[i]; scatter: recv = root's send[rank*count ...]
  // ----
  Work gather_async(const void* send, void* recv, size_t count, DataType dtype, int root);
  void gather(const void* send, void* recv, size_t count, DataType dtype, int root) {
    gather_async(send, recv, count, dtype, root).wait();
  }
  template <class T>
  void gather(std::span<const T> send, std::span<T> recv, int root) {
    if (rank() == root) check_equal(send.size() * size(), recv.size(), "gather");
    gather(send.data(), recv.data(), send.size(), data_type_of_v<T>, root);
  }
  Work scatter_async(const void* send, void* recv, size_t count, DataType dtype, int root);
  void scatter(const void* send, void* recv, size_t count, DataType dtype, int root) {
    scatter_async(send, recv, count, dtype, root).wait();
  }
  template <class T>
  void scatter(std::span<const T> send, std::span<T> recv, int root) {
    if (rank() == root) check_equal(recv.size() * size(), send.size(), "scatter");
    scatter(send.data(), recv.data(), recv.size(), data_type_of_v<T>, root);
  }

  // ---- vectored all_reduce, all_gather, reduce_scatter: each side's segments, in order, make
  //      up the plain call's buffer, so several tensors go in one call without a staging copy
  //      (a schedule's frames are gathered from and scattered into the segments). Every rank
  //      makes the same form of call. all_gather: send holds `count` elements in all, recv
  //      size() * count with rank r's block at [r*count, (r+1)*count) of recv's concatenation
  //      (torch's list outputs: one segment per rank and tensor); reduce_scatter the reverse.
  //      An all_reduce whose send and recv list the same segments is in place. Calls small
  //      enough for the shared slots (SHOAL_FLAT_MAX_BYTES) are packed into one buffer and run
  //      there, the others run a schedule (never the hierarchical path). A call with one
  //      segment on each side is the plain call. ----
  Work all_reduce_async(std::span<const ConstSegment> send, std::span<const Segment> recv,
                        DataType dtype, ReduceOp op, const CallOptions& call = {});
  Work all_gather_async(std::span<const ConstSegment> send, std::span<const Segment> recv,
                        DataType dtype, const CallOptions& call = {});
  Work reduce_scatter_async(std::span<const ConstSegment> send, std::span<const Segment> recv,
                            DataType dtype, ReduceOp op, const CallOptions& call = {});
  /// Vectored gather and scatter: the root's recv (gather) or send (scatter) segments, in
  /// order, make up the plain call's buffer of size() * count elements (torch's list of
  /// tensors: one segment per rank), which the root receives into (sends from) in place,
  /// without a staging buffer. As in the plain calls, only the root's segments on that side
  /// are read; every rank's other side holds the count.
  Work gather_async(std::span<const ConstSegment> send, std::span<const Segment> recv,
                    DataType dtype, int root);
  Work scatter_async(std::span<const ConstSegment> send, std::span<const Segment> recv,
                     DataType dtype, int root);

  // ---- all_to_all_v: send_counts[j] elements at send_displs[j] (in elements) go to rank j,
  //      which receives them at its recv_displs[rank()] with recv_counts[rank()] elements. One
  //      send and one receive per peer, all in flight at once (point-to-point frames under a tag
  //      reserved for it, kAllToAllVTag). First every pair's counts are compared (a blocking
  //      exchange of 2 integers per peer and an all_reduce): a count that differs from the
  //      peer's is a MismatchError on every rank, before any data moves. Every span has size()
  //      entries; send and recv must not overlap. ----
  static constexpr int kAllToAllVTag = -0x5a110000;
  Work all_to_all_v_async(const void* send, std::span<const size_t> send_counts,
                          std::span<const size_t> send_displs, void* recv,
                          std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                          DataType dtype);
  void all_to_all_v(const void* send, std::span<const size_t> send_counts,
                    std::span<const size_t> send_displs, void* recv,
                    std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                    DataType dtype) {
    all_to_all_v_async(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype)
        .wait();
  }

  // ---- barrier: returns once every rank has entered it ----
  Work barrier_async() { return barrier_call(false); }
  /// On one host's shared memory, in the calling thread (nothing in flight): no progress thread
  /// that keeps polling after it, beside the calls that follow on this core.
  void barrier() { barrier_call(true).wait(); }

  // ---- point to point: a send goes to the first receive posted for its sender and tag, or
  //      from any source (kAnySource) with its tag, whichever was posted first (MPI's matching
  //      rule: one queue per tag, non-overtaking within it). Messages of different tags do not
  //      wait for each other. A different count or type than the matched receive's is a
  //      MismatchError. send_async + recv_async may be in flight together; Work::source() says
  //      whose message a receive took. ----
  static constexpr int kAnySource = -1;
  Work send_async(const void* buf, size_t count, DataType dtype, int peer, int tag = 0);
  void send(const void* buf, size_t count, DataType dtype, int peer, int tag = 0) {
    send_async(buf, count, dtype, peer, tag).wait();
  }
  Work recv_async(void* buf, size_t count, DataType dtype, int peer, int tag = 0);
  void recv(void* buf, size_t count, DataType dtype, int peer, int tag = 0) {
    recv_async(buf, count, dtype, peer, tag).wait();
  }
  template <class T>
  void send(std::span<const T> buf, int peer, int tag = 0) {
    send(buf.data(), buf.size(), data_type_of_v<T>, peer, tag);
  }
  template <class T>
  void recv(std::span<T> buf, int peer, int tag = 0) {
    recv(buf.data(), buf.size(), data_type_of_v<T>, peer, tag);
  }

  // ---- links: the rate of every directed pair of ranks, and the ring that follows them ----
  /// Times every directed pair of ranks, one pair at a time (SHOAL_LINKS_BYTES each way), and
  /// uses the rates (use_links). Collective; returns bytes per second at [from * size() + to],
  /// 0 on the diagonal, equal on every rank. SHOAL_LINKS=measure does it at creation.
  std::vector<double> measure_links();
  /// Uses these rates (bytes per second, as measure_links returns them; the same on every
  /// rank, from the next call on): the planner prices all_reduce, all_gather and reduce_scatter
  /// on them (docs/algorithms.md, "Links") and the link_ring rows go around in the order they
  /// give. InvalidArgumentError for a rate that is not positive and finite off the diagonal.
  void use_links(std::span<const double> bytes_per_s);
  /// The ranks in the order the link_ring rows go around them: rank order until links are
  /// known.
  std::vector<int> ring_order() const;

  // ---- failures ----
  /// Fails every pending and later operation of this communicator with AbortedError, here and
  /// (through abort frames, or the abort note in shared memory) on every rank it can reach.
  /// Callable from any thread, also while another thread is blocked in a collective.
  void abort();
  /// After a failure: the ranks still alive agree, through the store, on who they are and
  /// form a new communicator of them, ranked in their old order (like MPI_Comm_shrink,
  /// ncclCommShrink), with this one's Options. Every survivor calls it; the first to arrive waits
  /// until every rank it does not know to be dead has joined, or `wait` (0: SHOAL_SHRINK_WAIT) has
  /// passed, and publishes the members. A survivor that joins after that gets PeerFailureError.
  Communicator shrink(std::chrono::milliseconds wait = std::chrono::milliseconds{0});
  /// shrink() leaving out `exclude` (ranks of this communicator, alive or not; like
  /// ncclCommShrink's exclusion list): only the others call it, and the first to arrive waits
  /// for none of the excluded. InvalidArgumentError if this rank or a rank outside [0, size)
  /// is in the list.
  Communicator shrink(const std::vector<int>& exclude,
                      std::chrono::milliseconds wait = std::chrono::milliseconds{0});
  /// A larger communicator: this one's ranks keep their numbers and `joining` new processes,
  /// which call join(store, name) with the job's store (the one this communicator's ancestor
  /// was created with, also after shrink() or split()) and the same name, follow in order of
  /// arrival. Collective over this communicator; `name` must be new in the job.
  Communicator grow(int joining, const std::string& name);
  /// The new process's side of grow(): waits for the job's grow(name) through `store`.
  static Communicator join(std::shared_ptr<Store> store, const std::string& name,
                           const Options& options = {});

  /// Human-readable description: ranks, hosts, transport, settings in force.
  std::string describe() const;

 private:
  friend struct detail::Internals;  // the library's own access (comm/comm_impl.hpp)
  explicit Communicator(std::unique_ptr<detail::CommImpl> impl);
  /// `blocking`: the caller waits at once, so a small collective may run on its thread.
  Work all_reduce_call(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                       bool blocking, const CallOptions* call = nullptr);
  Work all_gather_call(const void* send, void* recv, size_t count, DataType dtype, bool blocking,
                       const CallOptions* call = nullptr);
  Work reduce_scatter_call(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                           bool blocking, const CallOptions* call = nullptr);
  Work broadcast_call(const void* send, void* recv, size_t count, DataType dtype, int root,
                      bool blocking);
  Work reduce_call(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                   int root, bool blocking);
  Work barrier_call(bool blocking);
  void check_equal(size_t a, size_t b, const char* op) const;
  void check_divisible(size_t n, const char* op) const;
  std::unique_ptr<detail::CommImpl> impl_;
};

/// The result of Communicator::split_by_host().
struct HostSplit {
  Communicator local;         // ranks on this host, ordered by rank
  Communicator rank_aligned;  // local rank i of every host, ordered by host (first rank)
};

}  // namespace shoal
