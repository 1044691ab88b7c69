// Full-mesh connection set-up through the store: every rank listens, publishes its address,
// connects to the lower ranks and accepts the higher ones, with a validated handshake.
#pragma once

#include <string>
#include <vector>

#include "shoal/store.hpp"
#include "transport/tcp/socket.hpp"

namespace shoal::transport::tcp {

/// Returns one connected, configured socket per peer (index = peer rank; -1 for this rank).
/// `key_prefix` scopes the store keys to this communicator. Throws TimeoutError naming the
/// ranks that never showed up.
std::vector<int> connect_mesh(Store& store, const std::string& key_prefix, int rank, int size,
                              uint64_t comm_id, const std::string& listen_ip,
                              Clock::time_point deadline);

}  // namespace shoal::transport::tcp
