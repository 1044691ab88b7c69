// Communicator: a group of ranks and the collectives among them.
//
// Conventions (as in NCCL and MPI):
//  - counts are in elements; every rank of a collective passes the same count, dtype, op, root;
//  - calls on one communicator complete in issue order, and every rank issues its collectives
//    in the same order (a difference raises MismatchError instead of corrupting memory);
//  - `X(...)` blocks, `X_async(...)` returns a Work; buffers must outlive the Work;
//  - out of place takes (send, recv); in place takes one buffer;
//  - typed std::span overloads infer the DataType and the count.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>

#include "shoal/error.hpp"
#include "shoal/store.hpp"
#include "shoal/types.hpp"
#include "shoal/work.hpp"

namespace shoal {

namespace detail { class CommImpl; }

/// Per-communicator settings; unset fields take the SHOAL_* environment defaults.
struct Options {
  /// Bound on every wait (SHOAL_TIMEOUT); zero means the environment's value.
  std::chrono::milliseconds timeout{0};
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
  Work all_reduce_async(void* buf, size_t count, DataType dtype, ReduceOp op) {
    return all_reduce_async(buf, buf, count, dtype, op);
  }
  template <class T> void all_reduce(std::span<T> buf, ReduceOp op) {
    all_reduce(buf.data(), buf.size(), data_type_of_v<T>, op);
  }
  template <class T> void all_reduce(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    check_equal(send.size(), recv.size(), "all_reduce");
    all_reduce(send.data(), recv.data(), send.size(), data_type_of_v<T>, op);
  }
  template <class T> Work all_reduce_async(std::span<T> buf, ReduceOp op) {
    return all_reduce_async(buf.data(), buf.size(), data_type_of_v<T>, op);
  }
  template <class T> Work all_reduce_async(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    check_equal(send.size(), recv.size(), "all_reduce");
    return all_reduce_async(send.data(), recv.data(), send.size(), data_type_of_v<T>, op);
  }

  // ---- all_gather: recv[r*count + i] = send_r[i]; in place: rank r's block already in buf ----
  Work all_gather_async(const void* send, void* recv, size_t count, DataType dtype);
  void all_gather(const void* send, void* recv, size_t count, DataType dtype) {
    all_gather_async(send, recv, count, dtype).wait();
  }
  void all_gather(void* buf, size_t count, DataType dtype) {
    all_gather(static_cast<char*>(buf) + rank() * count * size_of(dtype), buf, count, dtype);
  }
  template <class T> void all_gather(std::span<const T> send, std::span<T> recv) {
    check_equal(send.size() * size(), recv.size(), "all_gather");
    all_gather(send.data(), recv.data(), send.size(), data_type_of_v<T>);
  }
  template <class T> void all_gather(std::span<T> buf) {
    check_divisible(buf.size(), "all_gather");
    all_gather(buf.data(), buf.size() / size(), data_type_of_v<T>);
  }
  template <class T> Work all_gather_async(std::span<const T> send, std::span<T> recv) {
    check_equal(send.size() * size(), recv.size(), "all_gather");
    return all_gather_async(send.data(), recv.data(), send.size(), data_type_of_v<T>);
  }

  // ---- reduce_scatter: recv[i] = op over ranks of send[rank*count + i] ----
  Work reduce_scatter_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  void reduce_scatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
    reduce_scatter_async(send, recv, count, dtype, op).wait();
  }
  /// In place: buf holds size()*count elements; the result lands in this rank's block.
  void reduce_scatter(void* buf, size_t count, DataType dtype, ReduceOp op) {
    reduce_scatter(buf, static_cast<char*>(buf) + rank() * count * size_of(dtype), count, dtype, op);
  }
  template <class T> void reduce_scatter(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    check_equal(recv.size() * size(), send.size(), "reduce_scatter");
    reduce_scatter(send.data(), recv.data(), recv.size(), data_type_of_v<T>, op);
  }
  template <class T> Work reduce_scatter_async(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    check_equal(recv.size() * size(), send.size(), "reduce_scatter");
    return reduce_scatter_async(send.data(), recv.data(), recv.size(), data_type_of_v<T>, op);
  }

  // ---- broadcast: every rank's recv = root's send ----
  Work broadcast_async(const void* send, void* recv, size_t count, DataType dtype, int root);
  void broadcast(const void* send, void* recv, size_t count, DataType dtype, int root) {
    broadcast_async(send, recv, count, dtype, root).wait();
  }
  void broadcast(void* buf, size_t count, DataType dtype, int root) { broadcast(buf, buf, count, dtype, root); }
  Work broadcast_async(void* buf, size_t count, DataType dtype, int root) {
    return broadcast_async(buf, buf, count, dtype, root);
  }
  template <class T> void broadcast(std::span<T> buf, int root) {
    broadcast(buf.data(), buf.size(), data_type_of_v<T>, root);
  }
  template <class T> Work broadcast_async(std::span<T> buf, int root) {
    return broadcast_async(buf.data(), buf.size(), data_type_of_v<T>, root);
  }

  // ---- reduce: root's recv = op over ranks of send (recv unused elsewhere, may be null) ----
  Work reduce_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root);
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root) {
    reduce_async(send, recv, count, dtype, op, root).wait();
  }
  void reduce(void* buf, size_t count, DataType dtype, ReduceOp op, int root) {
    reduce(buf, buf, count, dtype, op, root);
  }
  template <class T> void reduce(std::span<T> buf, ReduceOp op, int root) {
    reduce(buf.data(), buf.size(), data_type_of_v<T>, op, root);
  }
  template <class T> void reduce(std::span<const T> send, std::span<T> recv, ReduceOp op, int root) {
    reduce(send.data(), recv.data(), send.size(), data_type_of_v<T>, op, root);
  }

  // ---- all_to_all: recv[r*count + i] = send_r[rank*count + i] ----
  Work all_to_all_async(const void* send, void* recv, size_t count, DataType dtype);
  void all_to_all(const void* send, void* recv, size_t count, DataType dtype) {
    all_to_all_async(send, recv, count, dtype).wait();
  }
  void all_to_all(void* buf, size_t count, DataType dtype) { all_to_all(buf, buf, count, dtype); }
  template <class T> void all_to_all(std::span<const T> send, std::span<T> recv) {
    check_equal(send.size(), recv.size(), "all_to_all");
    check_divisible(send.size(), "all_to_all");
    all_to_all(send.data(), recv.data(), send.size() / size(), data_type_of_v<T>);
  }
  template <class T> void all_to_all(std::span<T> buf) {
    check_divisible(buf.size(), "all_to_all");
    all_to_all(buf.data(), buf.size() / size(), data_type_of_v<T>);
  }

  // ---- gather: root's recv[r*count + i] = send_r[i]; scatter: recv = root's send[rank*count ...] ----
  Work gather_async(const void* send, void* recv, size_t count, DataType dtype, int root);
  void gather(const void* send, void* recv, size_t count, DataType dtype, int root) {
    gather_async(send, recv, count, dtype, root).wait();
  }
  template <class T> void gather(std::span<const T> send, std::span<T> recv, int root) {
    if (rank() == root) check_equal(send.size() * size(), recv.size(), "gather");
    gather(send.data(), recv.data(), send.size(), data_type_of_v<T>, root);
  }
  Work scatter_async(const void* send, void* recv, size_t count, DataType dtype, int root);
  void scatter(const void* send, void* recv, size_t count, DataType dtype, int root) {
    scatter_async(send, recv, count, dtype, root).wait();
  }
  template <class T> void scatter(std::span<const T> send, std::span<T> recv, int root) {
    if (rank() == root) check_equal(recv.size() * size(), send.size(), "scatter");
    scatter(send.data(), recv.data(), recv.size(), data_type_of_v<T>, root);
  }

  // ---- barrier: returns once every rank has entered it ----
  Work barrier_async();
  void barrier() { barrier_async().wait(); }

  // ---- point to point: a send matches the recv issued in the same position for that pair of
  //      ranks (MPI's non-overtaking order, no wildcards); a different tag or count there is a
  //      MismatchError. send_async + recv_async may be in flight together. ----
  Work send_async(const void* buf, size_t count, DataType dtype, int peer, int tag = 0);
  void send(const void* buf, size_t count, DataType dtype, int peer, int tag = 0) {
    send_async(buf, count, dtype, peer, tag).wait();
  }
  Work recv_async(void* buf, size_t count, DataType dtype, int peer, int tag = 0);
  void recv(void* buf, size_t count, DataType dtype, int peer, int tag = 0) {
    recv_async(buf, count, dtype, peer, tag).wait();
  }
  template <class T> void send(std::span<const T> buf, int peer, int tag = 0) {
    send(buf.data(), buf.size(), data_type_of_v<T>, peer, tag);
  }
  template <class T> void recv(std::span<T> buf, int peer, int tag = 0) {
    recv(buf.data(), buf.size(), data_type_of_v<T>, peer, tag);
  }

  /// Human-readable description: ranks, hosts, transport, settings in force.
  std::string describe() const;

  detail::CommImpl& impl() { return *impl_; }

 private:
  explicit Communicator(std::unique_ptr<detail::CommImpl> impl);
  /// `blocking`: the caller waits at once, so a small all_reduce may run on its thread.
  Work all_reduce_call(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, bool blocking);
  void check_equal(size_t a, size_t b, const char* op) const;
  void check_divisible(size_t n, const char* op) const;
  std::unique_ptr<detail::CommImpl> impl_;
};

}  // namespace shoal
