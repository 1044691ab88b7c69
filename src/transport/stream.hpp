// A byte stream to one peer, in each direction: what a Connection frames its messages over.
// Two kinds: a TCP socket (tcp/socket_stream.hpp) and a pair of shared-memory rings beside a
// socket that carries wake-ups and tells when the peer is gone (shm/ring_stream.hpp).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "shoal/error.hpp"

namespace shoal::transport {

class Stream {
 public:
  virtual ~Stream() = default;
  /// File descriptor the progress engine polls: readable when data (or a wake-up) may be
  /// waiting, hung up when the peer is gone.
  virtual int fd() const = 0;
  /// Writes as much of `iov` as fits now: the number of bytes taken, or -1 with errno
  /// (EAGAIN: full, try later; anything else: the stream is broken).
  virtual ssize_t writev(const iovec* iov, int count) = 0;
  /// Reads up to `len` bytes: the number read, 0 at the end of the stream, or -1 with errno
  /// (EAGAIN: nothing now).
  virtual ssize_t read(void* dst, size_t len) = 0;
  /// Waits (at most `timeout_ms`) until writev may take more bytes; used only when closing.
  virtual void wait_writable(int timeout_ms) = 0;
  /// No more bytes will be written; the peer reads the end of the stream after what was sent.
  virtual void shutdown_write() = 0;
  /// True when the peer has closed or reset its end (the kernel knows, whatever data is still
  /// queued): used to name every rank that vanished when one connection breaks.
  virtual bool peer_gone() const { return false; }
  /// Tells the stream that fd() was reported readable (a shared-memory stream then looks at
  /// its socket; a socket stream needs nothing).
  virtual void notify_readable() {}
  /// True when the stream has to be polled: its data arrives without making fd() readable
  /// unless the receiving engine announced that it sleeps.
  virtual bool polled() const { return false; }
  /// For polled streams: true when progress is possible now (input waiting, or room for a
  /// write that found the stream full). Checked after announcing sleep, before sleeping.
  virtual bool ready() const { return false; }
  /// Why this rank stops, told out of band where the stream has a side channel (shared
  /// memory: a note in the segment, readable even while the rings are full or mid-frame).
  /// Returns false where the abort must travel in band, as a frame.
  virtual bool post_abort(ErrorCode /*code*/, int /*culprit*/, const std::string& /*message*/) {
    return false;
  }
  struct AbortNote {
    ErrorCode code;
    int culprit;
    std::string message;
  };
  /// The peer's out-of-band abort note, if it left one.
  virtual std::optional<AbortNote> peer_abort() const { return std::nullopt; }
  /// Payloads of at least this many bytes are sent by reference: the frame carries the
  /// address and the peer pulls the bytes straight from this process (one copy). UINT64_MAX:
  /// never (sockets, or where the kernel forbids it).
  virtual uint64_t direct_threshold() const { return UINT64_MAX; }
  /// Copies `len` bytes at `remote_addr` in the peer's memory into `dst`. False, with a
  /// reason in `error`, if that is impossible (the peer is gone).
  virtual bool pull(void* /*dst*/, uint64_t /*remote_addr*/, uint64_t /*len*/, std::string& error) {
    error = "this stream cannot pull from the peer's memory";
    return false;
  }
  /// Bytes taken off the wire so far, delivered by read() or not yet: a striped stream holds
  /// segments that overtook one still in flight on another connection. Liveness counts them
  /// (the peer is heard while one connection recovers from a loss). 0 where read() delivers
  /// everything that arrives.
  virtual uint64_t wire_bytes_in() const { return 0; }
  /// "tcp" or "shm", for diagnostics.
  virtual const char* kind() const = 0;
};

}  // namespace shoal::transport
