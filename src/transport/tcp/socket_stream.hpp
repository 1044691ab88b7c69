// A Stream over a connected, non-blocking TCP socket (owned).
#pragma once

#include "transport/stream.hpp"

namespace shoal::transport::tcp {

class SocketStream : public Stream {
 public:
  explicit SocketStream(int fd) : fd_(fd) {}
  ~SocketStream() override;
  int fd() const override { return fd_; }
  ssize_t writev(const iovec* iov, int count) override;
  ssize_t read(void* dst, size_t len) override;
  void wait_writable(int timeout_ms) override;
  void shutdown_write() override;
  bool peer_gone() const override;
  const char* kind() const override { return "tcp"; }

 private:
  int fd_;
  bool write_shut_ = false;  // shutdown_write(): the destructor drains before it closes
};

}  // namespace shoal::transport::tcp
