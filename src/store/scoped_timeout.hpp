// Sets a store's timeout for one scope (a communicator's own bound on its rendezvous) and puts
// the old one back when the scope ends, also when a store call throws.
#pragma once

#include "shoal/store.hpp"

namespace shoal::store {

class ScopedTimeout {
 public:
  ScopedTimeout(Store& store, Milliseconds timeout) : store_(&store), old_(store.timeout()) {
    store.set_timeout(timeout);
  }
  ~ScopedTimeout() { restore(); }
  ScopedTimeout(const ScopedTimeout&) = delete;
  ScopedTimeout& operator=(const ScopedTimeout&) = delete;
  /// Puts the old timeout back now (idempotent).
  void restore() {
    if (store_) store_->set_timeout(old_);
    store_ = nullptr;
  }

 private:
  Store* store_;
  Milliseconds old_;
};

}  // namespace shoal::store
