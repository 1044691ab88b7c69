// Test hook for tests/fuzz/fuzz_store.cpp: the TCP store server's request handling (request
// parsing, keys, waits, watches, replies) without its accept loop or thread, over socket
// pairs. Nothing in the library calls it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shoal::store_fuzz {

/// Feeds `data` to a fresh detached server as the request streams of up to two clients
/// (the input's own bytes say how it is cut and who sends what).
void serve_requests(const uint8_t* data, size_t size);

}  // namespace shoal::store_fuzz
