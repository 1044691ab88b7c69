// Where stage servers announce themselves: (stage, address, measured throughput, load, round)
// under a lease that expires when the peer stops renewing it, so a vanished peer drops out
// without saying goodbye. Registry is the interface (a DHT could replace it); StoreRegistry is
// the embedded one, on shoal's key-value store (hosted by `shoal-swarm registry`, by the
// `local` launcher, or by the first peer); EtcdRegistry lives on an etcd cluster, with no single
// point of failure.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shoal/store.hpp"

namespace shoal::swarm {

/// Wall-clock milliseconds since the epoch: leases must mean the same on every host.
int64_t wall_ms();

struct PeerRecord {
  std::string id;    // unique per peer process, e.g. "s1-host-4242"
  int stage = -1;    // stage served; -1: between stages (migrating)
  std::string host;  // RPC address
  uint16_t port = 0;
  double throughput = 0;  // samples per busy second (forward + backward), EMA
  // The peer's speed on a fixed probe (probes per second: a reference computation and one
  // unit of its device), the same whatever stage it serves: throughput / speed is what its
  // stage costs per sample, in probes. 0: not measured.
  double speed = 0;
  double load = 0;     // requests queued or running
  uint32_t round = 0;  // optimizer steps taken by this replica
  int64_t expires_ms = 0;
  std::string address() const { return host + ":" + std::to_string(port); }
};

class Registry {
 public:
  virtual ~Registry() = default;
  /// Creates or refreshes `record`'s lease (expires_ms is set here: now + lease()).
  virtual void announce(PeerRecord record) = 0;
  /// Ends `id`'s lease at once (a clean exit or a move between stages).
  virtual void withdraw(const std::string& id) = 0;
  /// Every peer whose lease has not expired (stage >= 0 only when `stage` >= 0).
  virtual std::vector<PeerRecord> peers(int stage = -1) = 0;
  /// The store where averaging groups, round counters and moves meet.
  virtual std::shared_ptr<Store> rendezvous() = 0;
  /// A connection of its own to rendezvous()'s store, for a thread whose round trips must not
  /// queue behind other threads' (a TcpStore serialises its calls on one connection, and over
  /// a WAN each call is a round trip). Here: rendezvous() itself.
  virtual std::shared_ptr<Store> connect_rendezvous() { return rendezvous(); }
  std::chrono::milliseconds lease() const { return lease_; }
  void set_lease(std::chrono::milliseconds lease) { lease_ = lease; }

 protected:
  std::chrono::milliseconds lease_{3000};
};

/// Connections of their own to a registry's rendezvous store (Registry::connect_rendezvous),
/// each lent to one thread at a time and made when none is free: request threads that each make
/// round trips to the store then make them side by side instead of in one queue.
class RendezvousPool {
 public:
  explicit RendezvousPool(std::shared_ptr<Registry> registry) : registry_(std::move(registry)) {}

  /// A connection, back in the pool when the lease ends.
  class Lease {
   public:
    Lease(RendezvousPool& pool, std::shared_ptr<Store> store)
        : pool_(&pool), store_(std::move(store)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { pool_->give_back(std::move(store_)); }
    Store* operator->() const { return store_.get(); }

   private:
    RendezvousPool* pool_;
    std::shared_ptr<Store> store_;
  };

  Lease borrow() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        auto store = std::move(idle_.back());
        idle_.pop_back();
        return Lease(*this, std::move(store));
      }
    }
    return Lease(*this, registry_->connect_rendezvous());
  }

 private:
  void give_back(std::shared_ptr<Store> store) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(store));
  }
  std::shared_ptr<Registry> registry_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Store>> idle_;
};

/// Records live at "swarm/peer/<slot>", slots handed out by a counter the first time an id
/// announces; listing reads every slot (a few dozen at most in the regimes we target).
class StoreRegistry : public Registry {
 public:
  explicit StoreRegistry(std::shared_ptr<Store> store);
  void announce(PeerRecord record) override;
  void withdraw(const std::string& id) override;
  std::vector<PeerRecord> peers(int stage = -1) override;
  std::shared_ptr<Store> rendezvous() override { return store_; }
  /// A new client of the store when it is a TcpStore (TcpStore::another_client).
  std::shared_ptr<Store> connect_rendezvous() override;

  static std::string encode(const PeerRecord& record);
  static PeerRecord decode(const std::string& text);  // InvalidArgumentError when malformed

 private:
  int64_t slot_of(const std::string& id);
  std::shared_ptr<Store> store_;
  std::vector<std::pair<std::string, int64_t>> slots_;  // this process's ids and their slots
};

/// Records live at "<swarm>/swarm/peer/<id>" under an etcd lease that each announcement renews,
/// so etcd itself removes a peer that stopped announcing. Rendezvous (averaging groups, round
/// counters, moves) happens on the same cluster, under the same "<swarm>/" prefix, so that one
/// cluster serves many swarms.
class EtcdRegistry : public Registry {
 public:
  EtcdRegistry(std::shared_ptr<EtcdStore> store, const std::string& swarm);
  ~EtcdRegistry() override;
  void announce(PeerRecord record) override;
  void withdraw(const std::string& id) override;
  std::vector<PeerRecord> peers(int stage = -1) override;
  std::shared_ptr<Store> rendezvous() override { return rendezvous_; }

 private:
  std::shared_ptr<EtcdStore> store_;
  std::shared_ptr<Store> rendezvous_;
  std::string peers_prefix_;
  std::vector<std::pair<std::string, int64_t>> leases_;  // this process's ids and their leases
};

/// The registry named by `spec`: "etcd://h1:p1,h2:p2,...[/SWARM]" for swarm SWARM (default
/// "shoal-swarm") on an etcd cluster, else "host:port" of the embedded one (hosted here when
/// nobody does yet and `may_host`).
std::shared_ptr<Registry> open_registry(const std::string& spec, bool may_host,
                                        std::chrono::milliseconds timeout);

/// Connects to the registry at host:port, hosting it here when nobody does yet and `may_host`.
std::shared_ptr<Store> connect_registry_store(const std::string& host, uint16_t port, bool may_host,
                                              std::chrono::milliseconds timeout);

}  // namespace shoal::swarm
