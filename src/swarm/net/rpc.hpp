// Request/reply over TCP for SWARM: a server with one thread per connection that hands each
// request to a handler and writes its reply; a client that sends one request at a time and
// waits for the reply with a deadline. With SHOAL_AUTH_KEY set, both ends authenticate as the
// transport does (HMAC challenge-response) before any frame is read.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "swarm/net/wire.hpp"

namespace shoal::swarm {

using Milliseconds = std::chrono::milliseconds;

/// "host:port" split at the last colon; InvalidArgumentError when there is no valid port.
std::pair<std::string, uint16_t> split_address(const std::string& address);

/// Largest frame body a server or client accepts (SHOAL_SWARM_MAX_MESSAGE, default 1 GiB).
uint64_t max_message_bytes();

class RpcServer {
 public:
  /// Handles one request and returns the reply; a shoal::Error becomes an Error reply with its
  /// code in flags and its message in text (any other exception: ErrorCode::Internal). Called
  /// concurrently from the connections' threads.
  using Handler = std::function<Message(Message&& request)>;
  /// Listens on host:port (port 0 picks one) and serves until stop() or destruction.
  RpcServer(const std::string& host, uint16_t port, Handler handler);
  ~RpcServer();
  uint16_t port() const;
  /// Stops accepting, closes every connection (peers' calls fail with PeerFailureError) and
  /// joins the threads. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// From inside a RpcServer handler: runs `work` on the connection's thread once the reply is
/// written, before the connection's next request is read, so that bookkeeping which costs round
/// trips elsewhere (a shared store across a WAN) stays out of the reply's latency. An exception
/// from `work` is logged. Outside a handler, `work` runs at once.
void after_reply(std::function<void()> work);

class RpcClient {
 public:
  /// Connects to host:port, retrying until `connect_timeout` (TimeoutError, PeerFailureError).
  RpcClient(const std::string& host, uint16_t port, Milliseconds connect_timeout);
  ~RpcClient();
  /// Sends `request`, waits for the reply. TimeoutError after `timeout` (the connection is
  /// then closed: a late reply cannot be mistaken for the next one), PeerFailureError when the
  /// server goes away; an Error reply (flags = the ErrorCode) is rethrown with that code and
  /// the server's message, prefixed by the server's address. Not thread-safe: one call at a time.
  Message call(const Message& request, Milliseconds timeout);
  /// False once the connection broke or timed out; the caller makes a new client.
  bool usable() const;
  const std::string& address() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal::swarm
