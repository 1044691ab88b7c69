// Full-mesh connection set-up through the store: every rank listens, publishes its address,
// connects to the lower ranks and accepts the higher ones, with a validated handshake.
#pragma once

#include <string>
#include <vector>

#include "shoal/store.hpp"
#include "transport/tcp/socket.hpp"

namespace shoal::transport::tcp {

/// Returns the connected, configured sockets to every peer (index = peer rank; empty for this
/// rank): the first over the primary addresses, then one per further NIC the pair shares (the
/// higher rank connects from each of its extra `rails` to the peer's address in the same
/// subnet). `key_prefix` scopes the store keys to this communicator. Throws TimeoutError
/// naming the ranks that never showed up.
std::vector<std::vector<int>> connect_mesh(Store& store, const std::string& key_prefix, int rank, int size,
                                           uint64_t comm_id, const std::vector<InterfaceAddress>& rails,
                                           Clock::time_point deadline);

}  // namespace shoal::transport::tcp
