#include "transport/tcp/socket_stream.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/tcp/socket.hpp"

namespace shoal::transport::tcp {

SocketStream::~SocketStream() {
  if (fd_ < 0) return;
  if (write_shut_)
    close_after_draining(fd_, std::chrono::steady_clock::now() + kDrainOnClose);
  else
    close(fd_);
}

ssize_t SocketStream::writev(const iovec* iov, int count) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(count);
  return sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

ssize_t SocketStream::read(void* dst, size_t len) { return recv(fd_, dst, len, MSG_DONTWAIT); }

void SocketStream::wait_writable(int timeout_ms) {
  pollfd p{fd_, POLLOUT, 0};
  poll(&p, 1, timeout_ms);
}

void SocketStream::shutdown_write() {
  shutdown(fd_, SHUT_WR);
  write_shut_ = true;
}

bool SocketStream::peer_gone() const { return fd_ >= 0 && peer_closed(fd_); }

}  // namespace shoal::transport::tcp
