// Key-value stores used for rendezvous. TcpStore speaks the wire protocol of
// torch.distributed.TCPStore (torch 2.x), so shoal can join a store torchrun's agent hosts.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace shoal {

using Bytes = std::vector<uint8_t>;
using Milliseconds = std::chrono::milliseconds;

/// A key-value store shared by the ranks of a job. All calls are thread-safe.
class Store {
 public:
  virtual ~Store() = default;
  /// Sets `key` to `value`, waking every waiter on it.
  virtual void set(const std::string& key, const Bytes& value) = 0;
  /// Returns the value of `key`, waiting up to timeout() for it to be set (TimeoutError).
  virtual Bytes get(const std::string& key) = 0;
  /// Adds `delta` to the integer stored at `key` (0 if absent) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  /// Waits until every key exists (TimeoutError after `timeout`).
  virtual void wait(const std::vector<std::string>& keys, Milliseconds timeout) = 0;
  /// True if every key exists, without waiting.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  /// Deletes `key`; returns whether it existed.
  virtual bool remove(const std::string& key) = 0;
  /// The values of `keys`, in their order, each waited for as get() does. Here one get() per
  /// key; TcpStore needs two round trips for them all (WAIT, then MULTI_GET) where get() needs
  /// two per key, which decides over a link of 100 ms.
  virtual std::vector<Bytes> multi_get(const std::vector<std::string>& keys) {
    std::vector<Bytes> values;
    values.reserve(keys.size());
    for (const auto& k : keys) values.push_back(get(k));
    return values;
  }
  /// add() of each (key, delta) in order, returning each new value. TcpStore sends them all
  /// before reading a reply: one round trip for the lot.
  virtual std::vector<int64_t> add_all(const std::vector<std::pair<std::string, int64_t>>& adds) {
    std::vector<int64_t> values;
    values.reserve(adds.size());
    for (const auto& [k, delta] : adds) values.push_back(add(k, delta));
    return values;
  }

  /// Host name of the store's server, if it has one (used to pick the interface that reaches it).
  virtual std::string host() const { return {}; }

  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  void set(const std::string& key, const std::string& value) {
    set(key, Bytes(value.begin(), value.end()));
  }
  std::string get_string(const std::string& key) {
    auto v = get(key);
    return {v.begin(), v.end()};
  }
  Milliseconds timeout() const { return timeout_; }
  void set_timeout(Milliseconds timeout) { timeout_ = timeout; }

  /// Number of communicators created over this store object so far (then incremented).
  /// Every rank creates its communicators in the same order, so the number scopes their keys.
  int next_communicator_index() { return communicators_created_++; }

 protected:
  Milliseconds timeout_{std::chrono::minutes(5)};

 private:
  std::atomic<int> communicators_created_{0};
};

/// TCP store. With is_server the object also hosts the store on host:port (port 0 picks one).
class TcpStore : public Store {
 public:
  struct Options {
    bool is_server = false;
    Milliseconds timeout{std::chrono::minutes(5)};
    /// How long a client retries connecting while the server comes up.
    Milliseconds connect_timeout{std::chrono::minutes(5)};
    /// The secret every connection proves it knows (HMAC-SHA256 challenge-response, both ways)
    /// before the server takes a request. Unset: the job's (SHOAL_AUTH_KEY or
    /// SHOAL_AUTH_KEY_FILE), unless SHOAL_STORE_AUTH=0. Empty: none, the store is open (torch's
    /// TCPStore cannot authenticate, neither as client nor as server).
    std::optional<std::string> auth_key = std::nullopt;
  };
  TcpStore(const std::string& host, uint16_t port, Options options);
  ~TcpStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override;
  std::vector<int64_t> add_all(const std::vector<std::pair<std::string, int64_t>>& adds) override;
  using Store::set;
  using Store::wait;
  /// The port the server listens on (useful with port 0).
  uint16_t port() const;
  /// A client of the same server on a connection of its own (the same key and timeout), for a
  /// thread whose calls must not queue behind this object's: its calls share one connection.
  std::shared_ptr<TcpStore> another_client() const;
  std::string host() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A store in one file on a shared file system (or /tmp for one host), guarded by flock.
class FileStore : public Store {
 public:
  explicit FileStore(std::string path, Milliseconds timeout = std::chrono::minutes(5));
  ~FileStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  using Store::set;
  using Store::wait;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// A store on an etcd cluster (its v3 API, through the JSON gateway every etcd serves on its
/// client port): rendezvous with no single point of failure. Requests go to one member and move
/// to the next when it fails or times out, so a store survives the loss of any minority of the
/// cluster. add() is exactly-once across such retries. Leases let a key vanish with its writer.
class EtcdStore : public Store {
 public:
  struct Options {
    Milliseconds timeout{std::chrono::minutes(5)};
    /// How long one request may take on one member before the next is tried.
    Milliseconds request_timeout{std::chrono::seconds(2)};
    /// How long a request keeps trying the members (leader elections take about a second).
    Milliseconds failover_timeout{std::chrono::seconds(30)};
  };
  /// `endpoints`: "host:port" (or "http://host:port") of the cluster's client URLs, at least one.
  EtcdStore(std::vector<std::string> endpoints, Options options);
  /// Parses "etcd://h1:p1,h2:p2,..." (or the list alone).
  static std::vector<std::string> parse_endpoints(const std::string& spec);
  ~EtcdStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  using Store::set;
  using Store::wait;
  std::string host() const override;

  /// A lease of `ttl` (rounded up to whole seconds; etcd raises very short ones) and its id.
  int64_t grant_lease(Milliseconds ttl);
  /// Renews `lease`; false when it has expired or was revoked.
  bool keep_alive(int64_t lease);
  void revoke_lease(int64_t lease);
  /// Sets `key` under `lease`: the key is deleted when the lease ends.
  void put(const std::string& key, const Bytes& value, int64_t lease);
  /// Every key that starts with `prefix`, and its value, in key order.
  std::vector<std::pair<std::string, Bytes>> list(const std::string& prefix);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Prepends `prefix + "/"` to every key of an underlying store.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  std::string host() const override { return base_->host(); }
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override;
  std::vector<int64_t> add_all(const std::vector<std::pair<std::string, int64_t>>& adds) override;
  using Store::set;
  using Store::wait;

 private:
  std::string key(const std::string& k) const { return prefix_ + "/" + k; }
  std::vector<std::string> keys(const std::vector<std::string>& ks) const;
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace shoal
