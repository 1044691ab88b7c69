#include "swarm/net/registry.hpp"

#include <algorithm>
#include <sstream>

#include "core/check.hpp"
#include "shoal/error.hpp"
#include "swarm/net/rpc.hpp"

namespace shoal::swarm {

int64_t wall_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

namespace {
constexpr const char* kSlotCounter = "swarm/peer_slots";
std::string slot_key(int64_t slot) { return "swarm/peer/" + std::to_string(slot); }
}  // namespace

StoreRegistry::StoreRegistry(std::shared_ptr<Store> store) : store_(std::move(store)) {}

// One line of tab-separated fields: ids and host names carry no tabs or newlines (checked).
std::string StoreRegistry::encode(const PeerRecord& r) {
  for (const std::string* s : {&r.id, &r.host})
    if (s->empty() || s->find_first_of("\t\n") != std::string::npos)
      throw InvalidArgumentError(
          "swarm registry: peer id and host must be non-empty without tabs or newlines");
  std::ostringstream out;
  out.precision(17);
  out << "v2\t" << r.id << '\t' << r.stage << '\t' << r.host << '\t' << r.port << '\t'
      << r.throughput << '\t' << r.load << '\t' << r.round << '\t' << r.expires_ms << '\t'
      << r.speed;
  return out.str();
}

PeerRecord StoreRegistry::decode(const std::string& text) {
  std::istringstream in(text);
  std::string version;
  PeerRecord r;
  int port = 0;
  std::getline(in, version, '\t');
  std::getline(in, r.id, '\t');
  in >> r.stage;
  in.ignore(1);
  std::getline(in, r.host, '\t');
  in >> port >> r.throughput >> r.load >> r.round >> r.expires_ms;
  if (version == "v2") in >> r.speed;  // v1: a peer that measures no speed
  if ((version != "v1" && version != "v2") || !in || r.id.empty() || r.host.empty() || port <= 0 ||
      port > 65535)
    throw InvalidArgumentError("swarm registry: malformed peer record '" + text.substr(0, 200) +
                               "'");
  r.port = static_cast<uint16_t>(port);
  return r;
}

int64_t StoreRegistry::slot_of(const std::string& id) {
  for (auto& [known, slot] : slots_)
    if (known == id) return slot;
  int64_t slot = store_->add(kSlotCounter, 1) - 1;
  slots_.emplace_back(id, slot);
  return slot;
}

void StoreRegistry::announce(PeerRecord record) {
  record.expires_ms = wall_ms() + lease_.count();
  store_->set(slot_key(slot_of(record.id)), encode(record));
}

void StoreRegistry::withdraw(const std::string& id) {
  for (auto& [known, slot] : slots_)
    if (known == id) {
      auto record = decode(store_->get_string(slot_key(slot)));
      record.expires_ms = 0;
      store_->set(slot_key(slot), encode(record));
    }
}

std::vector<PeerRecord> StoreRegistry::peers(int stage) {
  // Four round trips whatever the number of peers (ADD, CHECK, WAIT, MULTI_GET): trainers read
  // this several times a second, across links of up to hundreds of milliseconds.
  std::vector<std::string> keys;
  for (int64_t slot = 0, slots = store_->add(kSlotCounter, 0); slot < slots; ++slot)
    keys.push_back(slot_key(slot));
  // A slot is counted before its record is written: skip one that is not there yet.
  if (!store_->check(keys)) {
    std::vector<std::string> written;
    for (auto& key : keys)
      if (store_->check({key})) written.push_back(key);
    keys = std::move(written);
  }
  std::vector<PeerRecord> out;
  int64_t now = wall_ms();
  for (const Bytes& value : store_->multi_get(keys)) {
    PeerRecord r;
    try {
      r = decode(std::string(value.begin(), value.end()));
    } catch (const InvalidArgumentError&) {
      continue;  // a stranger's bytes in our key space: ignore rather than stop the swarm
    }
    if (r.expires_ms <= now) continue;
    if (stage >= 0 && r.stage != stage) continue;
    out.push_back(std::move(r));
  }
  return out;
}

std::shared_ptr<Store> StoreRegistry::connect_rendezvous() {
  auto* tcp = dynamic_cast<TcpStore*>(store_.get());
  return tcp ? tcp->another_client() : store_;
}

std::shared_ptr<Store> connect_registry_store(const std::string& host, uint16_t port, bool may_host,
                                              std::chrono::milliseconds timeout) {
  TcpStore::Options client;
  client.timeout = timeout;
  if (may_host) {
    // Someone may already host it: try briefly, then host it ourselves; if another peer won the
    // race for the port in between, join theirs.
    client.connect_timeout = std::chrono::milliseconds(300);
    try {
      return std::make_shared<TcpStore>(host, port, client);
    } catch (const Error&) {
    }
    try {
      TcpStore::Options server = client;
      server.is_server = true;
      return std::make_shared<TcpStore>(host, port, server);
    } catch (const Error&) {
    }
  }
  client.connect_timeout = timeout;
  return std::make_shared<TcpStore>(host, port, client);
}

EtcdRegistry::EtcdRegistry(std::shared_ptr<EtcdStore> store, const std::string& swarm)
    : store_(std::move(store)),
      rendezvous_(std::make_shared<PrefixStore>(swarm, store_)),
      peers_prefix_(swarm + "/swarm/peer/") {
  rendezvous_->set_timeout(store_->timeout());
}

EtcdRegistry::~EtcdRegistry() = default;

void EtcdRegistry::announce(PeerRecord record) {
  record.expires_ms = wall_ms() + lease_.count();
  auto it = std::find_if(leases_.begin(), leases_.end(),
                         [&](auto& entry) { return entry.first == record.id; });
  if (it == leases_.end()) it = leases_.insert(leases_.end(), {record.id, 0});
  // A lease that expired (the peer was cut off longer than a lease) is replaced.
  if (it->second == 0 || !store_->keep_alive(it->second)) it->second = store_->grant_lease(lease_);
  std::string text = StoreRegistry::encode(record);
  try {
    store_->put(peers_prefix_ + record.id, Bytes(text.begin(), text.end()), it->second);
  } catch (const InvalidArgumentError&) {
    // The lease ended between the renewal and the put.
    it->second = store_->grant_lease(lease_);
    store_->put(peers_prefix_ + record.id, Bytes(text.begin(), text.end()), it->second);
  }
}

void EtcdRegistry::withdraw(const std::string& id) {
  store_->remove(peers_prefix_ + id);
  for (auto it = leases_.begin(); it != leases_.end(); ++it)
    if (it->first == id) {
      store_->revoke_lease(it->second);
      leases_.erase(it);
      return;
    }
}

std::vector<PeerRecord> EtcdRegistry::peers(int stage) {
  std::vector<PeerRecord> out;
  for (auto& [key, value] : store_->list(peers_prefix_)) {
    PeerRecord r;
    try {
      r = StoreRegistry::decode(std::string(value.begin(), value.end()));
    } catch (const InvalidArgumentError&) {
      continue;  // a stranger's bytes in our key space
    }
    if (stage >= 0 && r.stage != stage) continue;
    out.push_back(std::move(r));
  }
  return out;
}

std::shared_ptr<Registry> open_registry(const std::string& spec, bool may_host,
                                        std::chrono::milliseconds timeout) {
  if (spec.rfind("etcd://", 0) == 0) {
    auto slash = spec.find('/', 7);
    std::string swarm = slash == std::string::npos ? "shoal-swarm" : spec.substr(slash + 1);
    SHOAL_CHECK(!swarm.empty() && swarm.find('/') == std::string::npos, InvalidArgument,
                "registry '" << spec << "': the swarm's name after the endpoints must be one word");
    EtcdStore::Options options;
    options.timeout = timeout;
    auto store =
        std::make_shared<EtcdStore>(EtcdStore::parse_endpoints(spec.substr(0, slash)), options);
    return std::make_shared<EtcdRegistry>(store, swarm);
  }
  SHOAL_CHECK(spec.find(':') != std::string::npos, InvalidArgument,
              "registry '" << spec << "' is neither host:port nor etcd://host:port[,...]");
  auto [host, port] = split_address(spec);  // and checks the port
  return std::make_shared<StoreRegistry>(connect_registry_store(host, port, may_host, timeout));
}

}  // namespace shoal::swarm
