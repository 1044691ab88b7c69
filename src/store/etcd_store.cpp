// EtcdStore: the Store interface on an etcd cluster, through the v3 API's JSON gateway
// (POST /v3/kv/range, /v3/kv/txn, /v3/lease/grant, ...: the gRPC messages as JSON, bytes in
// base64, 64-bit integers as strings). HTTP/1.1 over one kept-alive connection per store.
//
// Failover: a request that fails on a member (no connection, a timeout, "no leader", "leader
// changed") moves to the next member, until failover_timeout. Reads are linearizable (etcd's
// default), so whichever member answers, it answers with the cluster's latest state.
//
// Exactly-once add(): its transaction also writes "<seq>:<new value>" under a key of this store
// and thread; when an attempt's answer is lost, that key says whether it took effect.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/check.hpp"
#include "shoal/store.hpp"

namespace shoal {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

std::string base64(const std::string& bytes) {
  std::string out(sodium_base64_ENCODED_LEN(bytes.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()),
                    bytes.size(), sodium_base64_VARIANT_ORIGINAL);
  out.resize(std::strlen(out.c_str()));
  return out;
}

std::string unbase64(const std::string& text) {
  std::string out(text.size() * 3 / 4 + 3, '\0');
  size_t len = 0;
  SHOAL_CHECK(
      sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.data(),
                        text.size(), nullptr, &len, nullptr, sodium_base64_VARIANT_ORIGINAL) == 0,
      Internal, "etcd answered with malformed base64 '" << text.substr(0, 40) << "'");
  out.resize(len);
  return out;
}

std::string as_string(const Bytes& b) { return {b.begin(), b.end()}; }
Bytes as_bytes(const std::string& s) { return {s.begin(), s.end()}; }

// etcd's JSON writes int64 as strings and leaves out fields that hold their default (0, "").
int64_t number(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_number()) return it->get<int64_t>();
  return std::stoll(it->get<std::string>());
}

std::string field_bytes(const json& j, const char* field) {
  auto it = j.find(field);
  return it == j.end() ? std::string() : unbase64(it->get<std::string>());
}

// The smallest key greater than every key that starts with `prefix` (etcd's range_end).
std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    auto last = static_cast<unsigned char>(prefix.back());
    if (last < 0xff) {
      prefix.back() = static_cast<char>(last + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

// A failure of one attempt on one member: the next member may do better.
struct AttemptFailed {
  std::string why;
  bool sent;  // the request may have reached the member
};

struct Endpoint {
  std::string host;
  uint16_t port;
  std::string name() const { return host + ":" + std::to_string(port); }
};

Endpoint parse_endpoint(std::string text) {
  for (const char* scheme : {"http://", "etcd://"})
    if (text.rfind(scheme, 0) == 0) text = text.substr(std::strlen(scheme));
  while (!text.empty() && text.back() == '/') text.pop_back();
  auto colon = text.rfind(':');
  int port = 0;
  if (colon != std::string::npos) {
    auto digits = text.substr(colon + 1);
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
    if (ec != std::errc() || p != digits.data() + digits.size()) port = 0;
  }
  SHOAL_CHECK(colon != std::string::npos && colon > 0 && port > 0 && port < 65536, InvalidArgument,
              "etcd endpoint '" << text << "' is not host:port (e.g. 198.18.0.1:2379)");
  return {text.substr(0, colon), static_cast<uint16_t>(port)};
}

}  // namespace

namespace {

// One kept-alive HTTP connection to one member; a thread holds it for a whole exchange.
struct Connection {
  Endpoint endpoint;
  size_t index;  // of the member in the store's list
  int fd = -1;

  Connection(Endpoint e, size_t i) : endpoint(std::move(e)), index(i) {}
  ~Connection() { disconnect(); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void disconnect() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  void connect_to(const Endpoint& e, Clock::time_point deadline) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(e.host.c_str(), std::to_string(e.port).c_str(), &hints, &res) != 0 || !res)
      throw AttemptFailed{"cannot resolve " + e.host, false};
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) {
      freeaddrinfo(res);
      SHOAL_THROW(Internal, "socket(): " << std::strerror(errno));
    }
    int rc = ::connect(s, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (rc != 0 && errno == EINPROGRESS) {
      // Non-blocking, so that a member whose host is gone costs request_timeout, not the
      // kernel's two minutes of SYN retries.
      pollfd p{s, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof err;
      if (::poll(&p, 1, ms_left(deadline)) == 1 &&
          getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
        rc = 0;
      else
        errno = err ? err : ETIMEDOUT;
    }
    if (rc != 0) {
      std::string why = std::strerror(errno);
      ::close(s);
      throw AttemptFailed{"connect: " + why, false};
    }
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fd = s;
  }

  void send_all(const std::string& data, Clock::time_point deadline) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{fd, POLLOUT, 0};
        if (::poll(&p, 1, ms_left(deadline)) == 1) continue;
        throw AttemptFailed{"send timed out", off > 0};
      }
      throw AttemptFailed{std::string("send: ") + std::strerror(errno), off > 0};
    }
  }

  // Buffered reading of the response.
  std::string in;
  size_t in_pos = 0;

  void fill(Clock::time_point deadline) {
    if (in_pos > 0 && in_pos == in.size()) {
      in.clear();
      in_pos = 0;
    }
    char buf[16384];
    for (;;) {
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        in.append(buf, static_cast<size_t>(n));
        return;
      }
      if (n == 0) throw AttemptFailed{"the member closed the connection", true};
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        throw AttemptFailed{std::string("recv: ") + std::strerror(errno), true};
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, ms_left(deadline)) != 1) throw AttemptFailed{"no answer in time", true};
    }
  }

  std::string read_line(Clock::time_point deadline) {
    for (;;) {
      auto end = in.find("\r\n", in_pos);
      if (end != std::string::npos) {
        std::string line = in.substr(in_pos, end - in_pos);
        in_pos = end + 2;
        return line;
      }
      SHOAL_CHECK(in.size() - in_pos < (1u << 20), Internal, "etcd sent a header line over 1 MiB");
      fill(deadline);
    }
  }

  std::string read_exact(size_t n, Clock::time_point deadline) {
    while (in.size() - in_pos < n) fill(deadline);
    std::string out = in.substr(in_pos, n);
    in_pos += n;
    return out;
  }

  // One HTTP exchange; returns the status and the body. `streaming`: the answer is a stream
  // (lease keep-alive) of which only the first message is read, then the connection dropped.
  std::pair<int, std::string> exchange(const std::string& path, const std::string& body,
                                       bool streaming, Clock::time_point deadline) {
    const Endpoint& e = endpoint;
    if (fd < 0) connect_to(e, deadline);
    in.clear();
    in_pos = 0;
    std::string request =
        "POST " + path + " HTTP/1.1\r\nHost: " + e.name() +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body;
    send_all(request, deadline);
    std::string status_line = read_line(deadline);
    int status = 0;
    if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12 ||
        std::from_chars(status_line.data() + 9, status_line.data() + 12, status).ec != std::errc())
      throw AttemptFailed{"not an HTTP answer: '" + status_line.substr(0, 60) + "'", true};
    long content_length = -1;
    bool chunked = false, close_after = false;
    for (std::string line; !(line = read_line(deadline)).empty();) {
      std::string lower = line;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (lower.rfind("content-length:", 0) == 0) content_length = std::stol(line.substr(15));
      if (lower.rfind("transfer-encoding:", 0) == 0 && lower.find("chunked") != std::string::npos)
        chunked = true;
      if (lower.rfind("connection:", 0) == 0 && lower.find("close") != std::string::npos)
        close_after = true;
    }
    std::string out;
    if (chunked) {
      for (;;) {
        std::string size_line = read_line(deadline);
        size_t size = std::stoul(size_line, nullptr, 16);
        if (size == 0) {
          while (!read_line(deadline).empty()) {
          }  // trailers
          break;
        }
        out += read_exact(size, deadline);
        read_line(deadline);  // the chunk's CRLF
        if (streaming) {
          close_after = true;
          break;
        }
      }
    } else if (content_length >= 0) {
      out = read_exact(static_cast<size_t>(content_length), deadline);
    } else {
      throw AttemptFailed{"an HTTP answer without a length", true};
    }
    if (close_after) disconnect();
    return {status, out};
  }
};

}  // namespace

struct EtcdStore::Impl {
  std::vector<Endpoint> endpoints;
  Options options;
  std::mutex mu;       // guards `current` and `idle`
  size_t current = 0;  // the member requests go to, until it fails
  // Connections not in use. Each request holds one of its own, so that a process's threads
  // (a stage server's handlers, its announcer, its averaging) never queue behind each other.
  std::vector<std::unique_ptr<Connection>> idle;
  std::atomic<uint64_t> add_seq{0};
  std::string client_key;  // where add() leaves its receipts
  std::atomic<bool> added{false};

  std::unique_ptr<Connection> acquire() {
    std::lock_guard lock(mu);
    while (!idle.empty()) {
      auto c = std::move(idle.back());
      idle.pop_back();
      if (c->index == current) return c;  // others lead to a member we moved away from
    }
    return std::make_unique<Connection>(endpoints[current], current);
  }
  void release(std::unique_ptr<Connection> c) {
    if (c->fd < 0) return;
    std::lock_guard lock(mu);
    if (c->index == current && idle.size() < 16) idle.push_back(std::move(c));
  }
  // The member at `index` failed: move on, unless another thread already has.
  void move_on(size_t index) {
    std::lock_guard lock(mu);
    if (current == index) current = (current + 1) % endpoints.size();
  }

  static bool retryable(const json& error) {
    // gRPC codes: 14 Unavailable, 4 DeadlineExceeded, 10 Aborted; and etcd's words for an
    // election in progress.
    int64_t code = number(error, "code");
    std::string message = error.value("message", std::string());
    return code == 14 || code == 4 || code == 10 || message.find("leader") != std::string::npos ||
           message.find("timed out") != std::string::npos;
  }

  // `ambiguous` (optional) is set when an attempt may have taken effect without its answer
  // arriving.
  json call(const std::string& path, const json& request, bool* ambiguous = nullptr,
            bool streaming = false) {
    const std::string body = request.dump();
    auto give_up = Clock::now() + options.failover_timeout;
    std::string last;
    for (size_t attempt = 0;; ++attempt) {
      auto deadline = std::min(give_up, Clock::now() + options.request_timeout);
      auto connection = acquire();
      size_t connection_index = connection->index;
      try {
        auto [status, text] = connection->exchange(path, body, streaming, deadline);
        json answer = json::parse(text, nullptr, /*allow_exceptions=*/false);
        if (answer.is_discarded())
          throw AttemptFailed{"malformed JSON from etcd: '" + text.substr(0, 80) + "'", true};
        if (answer.contains("result")) answer = answer["result"];  // streamed answers
        if (status == 200 && !answer.contains("error")) {
          release(std::move(connection));
          return answer;
        }
        if (!retryable(answer)) {
          release(std::move(connection));
          std::string message = answer.value("message", text.substr(0, 200));
          if (number(answer, "code") == 5) SHOAL_THROW(InvalidArgument, "etcd: " << message);
          SHOAL_THROW(Internal, "etcd " << endpoints[connection_index].name() << " refused " << path
                                        << " (HTTP " << status << "): " << message);
        }
        throw AttemptFailed{answer.value("message", "HTTP " + std::to_string(status)), true};
      } catch (const AttemptFailed& f) {
        connection.reset();
        if (f.sent && ambiguous) *ambiguous = true;
        last = endpoints[connection_index].name() + ": " + f.why;
        move_on(connection_index);
        if (Clock::now() >= give_up)
          SHOAL_THROW(Timeout, "no etcd member answered " << path << " within "
                                                          << options.failover_timeout.count()
                                                          << " ms (last: " << last
                                                          << "); is a majority of the cluster up?");
        // Once every member has failed in a row, wait a little (an election is a second).
        if ((attempt + 1) % endpoints.size() == 0)
          std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int>(
              ms_left(give_up), std::min<int>(500, 50 * (1 << std::min<size_t>(attempt, 3))))));
      }
    }
  }

  // The value and modification revision of `key`; nullopt when it is absent.
  std::optional<std::pair<std::string, int64_t>> range(const std::string& key) {
    json answer = call("/v3/kv/range", {{"key", base64(key)}});
    auto kvs = answer.find("kvs");
    if (kvs == answer.end() || kvs->empty()) return std::nullopt;
    return std::pair{field_bytes((*kvs)[0], "value"), number((*kvs)[0], "mod_revision")};
  }
};

EtcdStore::EtcdStore(std::vector<std::string> endpoints, Options options)
    : impl_(std::make_unique<Impl>()) {
  SHOAL_CHECK(!endpoints.empty(), InvalidArgument, "EtcdStore needs at least one endpoint");
  for (auto& e : endpoints) impl_->endpoints.push_back(parse_endpoint(e));
  impl_->options = options;
  timeout_ = options.timeout;
  std::random_device rd;
  std::mt19937_64 rng((static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid()));
  char id[17];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(rng()));
  impl_->client_key = std::string("\x01shoal/add-receipt/") + id;
  // Start on a member chosen by the process, so that clients spread over the cluster.
  impl_->current = rng() % impl_->endpoints.size();
}

EtcdStore::~EtcdStore() {
  if (impl_->added) try {
      impl_->options.failover_timeout = std::chrono::seconds(2);
      std::string receipts = impl_->client_key + "/";
      impl_->call("/v3/kv/deleterange",
                  {{"key", base64(receipts)}, {"range_end", base64(prefix_end(receipts))}});
    } catch (const std::exception&) {
      // The receipt stays behind: one small key.
    }
}

std::vector<std::string> EtcdStore::parse_endpoints(const std::string& spec) {
  std::string list = spec.rfind("etcd://", 0) == 0 ? spec.substr(7) : spec;
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    auto comma = list.find(',', start);
    auto item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(parse_endpoint(item).name());
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  SHOAL_CHECK(!out.empty(), InvalidArgument,
              "no etcd endpoint in '" << spec << "' (expected etcd://host:port[,host:port...])");
  return out;
}

std::string EtcdStore::host() const {
  std::lock_guard lock(impl_->mu);
  return impl_->endpoints[impl_->current].host;
}

void EtcdStore::set(const std::string& key, const Bytes& value) {
  impl_->call("/v3/kv/put", {{"key", base64(key)}, {"value", base64(as_string(value))}});
}

void EtcdStore::put(const std::string& key, const Bytes& value, int64_t lease) {
  impl_->call("/v3/kv/put", {{"key", base64(key)},
                             {"value", base64(as_string(value))},
                             {"lease", std::to_string(lease)}});
}

Bytes EtcdStore::get(const std::string& key) {
  auto deadline = Clock::now() + timeout_;
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    if (auto kv = impl_->range(key)) return as_bytes(kv->first);
    SHOAL_CHECK(Clock::now() < deadline, Timeout,
                "etcd store: key '" << key << "' was not set within " << timeout_.count() << " ms");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(8));
  }
}

int64_t EtcdStore::add(const std::string& key, int64_t delta) {
  uint64_t seq = ++impl_->add_seq;
  impl_->added = true;
  // One receipt per thread: two threads' adds must not overwrite each other's.
  static std::atomic<uint64_t> threads{0};
  thread_local uint64_t thread_slot = threads++;
  std::string receipt_key = impl_->client_key + "/" + std::to_string(thread_slot);
  std::string receipt_prefix = std::to_string(seq) + ":";
  for (;;) {
    auto kv = impl_->range(key);
    int64_t value = 0;
    if (kv) {
      const std::string& text = kv->first;
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      SHOAL_CHECK(ec == std::errc() && p == text.data() + text.size(), InvalidArgument,
                  "etcd store: add() on key '" << key << "', whose value is not an integer");
    }
    // add(key, 0) is how callers read a counter: a read, when there is something to read.
    if (delta == 0 && kv) return value;
    int64_t next = value + delta;
    json compare = kv ? json{{"key", base64(key)},
                             {"target", "MOD"},
                             {"result", "EQUAL"},
                             {"mod_revision", std::to_string(kv->second)}}
                      : json{{"key", base64(key)},
                             {"target", "CREATE"},
                             {"result", "EQUAL"},
                             {"create_revision", "0"}};
    json request = {
        {"compare", json::array({compare})},
        {"success",
         json::array({json{{"request_put",
                            {{"key", base64(key)}, {"value", base64(std::to_string(next))}}}},
                      json{{"request_put",
                            {{"key", base64(receipt_key)},
                             {"value", base64(receipt_prefix + std::to_string(next))}}}}})}};
    bool ambiguous = false;
    json answer = impl_->call("/v3/kv/txn", request, &ambiguous);
    if (answer.value("succeeded", false)) return next;
    if (ambiguous) {
      // An earlier attempt may have committed: its receipt says so.
      if (auto receipt = impl_->range(receipt_key);
          receipt && receipt->first.rfind(receipt_prefix, 0) == 0)
        return std::stoll(receipt->first.substr(receipt_prefix.size()));
    }
    // Somebody else changed the key between our read and our transaction: read again.
  }
}

bool EtcdStore::check(const std::vector<std::string>& keys) {
  if (keys.empty()) return true;
  json compares = json::array();
  for (auto& k : keys)
    compares.push_back({{"key", base64(k)},
                        {"target", "CREATE"},
                        {"result", "GREATER"},
                        {"create_revision", "0"}});
  // etcd serves a read-only txn whose operations are all serializable reads from the member's
  // own state, and a txn of compares alone counts as one: a member behind the leader would miss
  // a key another client has just set. One linearizable range makes the txn a linearizable read.
  json read = {{"request_range", {{"key", base64(keys.front())}, {"count_only", true}}}};
  return impl_->call("/v3/kv/txn", {{"compare", compares}, {"success", json::array({read})}})
      .value("succeeded", false);
}

void EtcdStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(2);
  while (!check(keys)) {
    if (Clock::now() >= deadline) {
      std::string missing;
      for (auto& k : keys)
        if (!check({k})) missing += (missing.empty() ? "'" : ", '") + k + "'";
      SHOAL_THROW(Timeout, "etcd store: waited " << timeout.count() << " ms for " << missing);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(8));
  }
}

bool EtcdStore::remove(const std::string& key) {
  bool ambiguous = false;
  json answer = impl_->call("/v3/kv/deleterange", {{"key", base64(key)}}, &ambiguous);
  // A lost answer to an attempt that deleted the key makes the retry find nothing.
  return number(answer, "deleted") > 0 || ambiguous;
}

int64_t EtcdStore::grant_lease(Milliseconds ttl) {
  int64_t seconds = std::max<int64_t>(1, (ttl.count() + 999) / 1000);
  json answer = impl_->call("/v3/lease/grant", {{"TTL", std::to_string(seconds)}});
  int64_t id = number(answer, "ID");
  SHOAL_CHECK(id != 0, Internal, "etcd granted no lease: " << answer.dump());
  return id;
}

bool EtcdStore::keep_alive(int64_t lease) {
  json answer = impl_->call("/v3/lease/keepalive", {{"ID", std::to_string(lease)}}, nullptr,
                            /*streaming=*/true);
  return number(answer, "TTL") > 0;
}

void EtcdStore::revoke_lease(int64_t lease) {
  try {
    impl_->call("/v3/lease/revoke", {{"ID", std::to_string(lease)}});
  } catch (const InvalidArgumentError&) {
    // Already expired or revoked (by an earlier attempt whose answer was lost).
  }
}

std::vector<std::pair<std::string, Bytes>> EtcdStore::list(const std::string& prefix) {
  json answer =
      impl_->call("/v3/kv/range", {{"key", base64(prefix.empty() ? std::string(1, '\0') : prefix)},
                                   {"range_end", base64(prefix_end(prefix))}});
  std::vector<std::pair<std::string, Bytes>> out;
  if (auto kvs = answer.find("kvs"); kvs != answer.end())
    for (auto& kv : *kvs)
      out.emplace_back(field_bytes(kv, "key"), as_bytes(field_bytes(kv, "value")));
  return out;
}

}  // namespace shoal
