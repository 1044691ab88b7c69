// shoal::Store over the c10d::Store torch hands a backend (a PrefixStore over the job's
// TCPStore or FileStore), so shoal's rendezvous runs through torch's own store.
#pragma once

#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "shoal/error.hpp"
#include "shoal/store.hpp"

namespace shoal::torch_glue {

class C10dStore : public shoal::Store {
 public:
  C10dStore(c10::intrusive_ptr<c10d::Store> store, Milliseconds timeout)
      : store_(std::move(store)) {
    set_timeout(timeout);
  }

  void set(const std::string& key, const Bytes& value) override {
    guard("set", key, [&] { store_->set(key, value); });
  }
  Bytes get(const std::string& key) override {
    Bytes out;
    guard("get", key, [&] {
      store_->wait({key}, timeout_);
      out = store_->get(key);
    });
    return out;
  }
  int64_t add(const std::string& key, int64_t delta) override {
    int64_t out = 0;
    guard("add", key, [&] { out = store_->add(key, delta); });
    return out;
  }
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override {
    guard("wait", keys.empty() ? std::string() : keys.front(),
          [&] { store_->wait(keys, timeout); });
  }
  bool check(const std::vector<std::string>& keys) override {
    bool out = false;
    guard("check", keys.empty() ? std::string() : keys.front(), [&] { out = store_->check(keys); });
    return out;
  }
  bool remove(const std::string& key) override {
    bool out = false;
    guard("remove", key, [&] { out = store_->deleteKey(key); });
    return out;
  }
  /// The TCPStore's host under any number of PrefixStores (picks the interface that reaches it).
  std::string host() const override {
    c10::intrusive_ptr<c10d::Store> s = store_;
    for (int depth = 0; depth < 16 && s; ++depth) {
      if (auto* tcp = dynamic_cast<c10d::TCPStore*>(s.get())) return tcp->getHost();
      auto* prefix = dynamic_cast<c10d::PrefixStore*>(s.get());
      if (!prefix) break;
      s = prefix->getUnderlyingStore();
    }
    return {};
  }

 private:
  // torch's stores throw c10::Error or std::runtime_error; shoal's rendezvous expects shoal::Error.
  template <class F>
  void guard(const char* what, const std::string& key, F&& f) {
    try {
      f();
    } catch (const shoal::Error&) {
      throw;
    } catch (const std::exception& e) {
      // c10::Error's what() carries a C++ backtrace: keep the message only.
      const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
      const std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
      std::string msg = std::string("torch store ") + what + "('" + key + "') failed: " + text;
      std::string lower = text;
      for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (lower.find("timeout") != std::string::npos ||
          lower.find("timed out") != std::string::npos)
        throw shoal::TimeoutError(msg);
      throw shoal::InternalError(msg);
    }
  }
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace shoal::torch_glue
