// libFuzzer target: arbitrary bytes as the request streams of TCP store clients, handled by
// the real server code (src/store/tcp_store.cpp, detached from its accept loop). A hostile
// or broken client may be dropped; the server must not crash, hang, leak or grow without
// bound. Input format: src/store/tcp_store_fuzz.hpp; seeds: corpus/store (mkseeds.py).
#include <cstdint>
#include <cstdlib>

#include "store/tcp_store_fuzz.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("SHOAL_STORE_MAX_VALUE", "1M", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shoal::store_fuzz::serve_requests(data, size);
  return 0;
}
