// Full-mesh connection set-up through the store: every rank listens, publishes its address,
// connects to the lower ranks and accepts the higher ones, with a validated handshake.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shoal/store.hpp"
#include "transport/frame.hpp"
#include "transport/tcp/socket.hpp"

namespace shoal::transport::tcp {

/// Most connections (rails) a pair may announce: more is not a NIC count but garbage.
inline constexpr uint16_t kMaxRails = 64;

/// The accepting side's book of handshakes (connect_mesh's, exposed for tests/fuzz): which
/// higher ranks connected over which sockets. A peer's rail 0 announces how many connections
/// it makes; the peer is complete when all of them, each rail once, are in.
class HelloBook {
 public:
  HelloBook(int rank, int size, uint64_t comm_id) : rank_(rank), size_(size), comm_id_(comm_id) {}
  /// Admits socket `fd` with the handshake `h` it sent: nullopt, and, once that completes the
  /// peer, its sockets (rail order) land in `fds[peer]`; else why it is refused (the caller
  /// keeps and closes `fd`).
  std::optional<std::string> admit(const Hello& h, int fd, std::vector<std::vector<int>>& fds);
  /// Sockets of peers not complete yet.
  std::vector<int> pending_fds() const;

 private:
  struct Pending {
    int primary = -1;
    size_t announced = 0;
    std::map<uint16_t, int> extras;  // rail -> socket
  };
  int rank_, size_;
  uint64_t comm_id_;
  std::map<int, Pending> pending_;
};

/// Returns the connected, configured sockets to every peer (index = peer rank; empty for this
/// rank): the first over the primary addresses, then, to a peer on another host (`host_of`:
/// every rank's host index), one per further NIC the pair shares (the higher rank connects from
/// each of its extra `rails` to the peer's address in the same subnet), each NIC's connection
/// times streams_for() of the round trip the first one measured. `key_prefix` scopes the store
/// keys to this communicator. Throws TimeoutError naming the ranks that never showed up.
std::vector<std::vector<int>> connect_mesh(Store& store, const std::string& key_prefix, int rank,
                                           int size, uint64_t comm_id,
                                           const std::vector<InterfaceAddress>& rails,
                                           const std::vector<int>& host_of,
                                           Clock::time_point deadline);

}  // namespace shoal::transport::tcp
