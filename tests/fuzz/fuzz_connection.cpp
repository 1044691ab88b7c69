// libFuzzer target: one peer's byte stream, arbitrary, fed into a real transport::Connection
// over an in-memory Stream while a script posts receives and sends as the engine would. The
// connection must reject what is malformed (an error through its listener: every header the
// rules of wire_rules.hpp reject, once it has read it) and never crash, hang, leak, touch
// memory it was not given, or report a completion twice.
//
// Input: a script of commands (one byte each, arguments after it); when the script ends, the
// bytes left are what the peer sent (tests/fuzz/corpus/connection holds examples; mkseeds.py
// writes them).
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "transport/connection.hpp"
#include "wire_rules.hpp"

using namespace shoal;
using namespace shoal::transport;

namespace {

constexpr uint64_t kCommId = 0x1122334455667788ull;
constexpr uint64_t kMaxFrame = 1 << 20;  // SHOAL_MAX_FRAME, set below

// What a peer sent, released to the connection piece by piece.
class FuzzStream : public Stream {
 public:
  std::vector<uint8_t> in;
  size_t available = 0;  // bytes of `in` the peer has "sent" so far
  size_t pos = 0;
  bool eof = false;  // the peer closed after `available`
  size_t read_chunk = SIZE_MAX;
  long write_budget = -1;  // bytes writev takes per call; -1 all, 0 EAGAIN, -2 EPIPE
  bool pull_ok = true;
  uint64_t direct = UINT64_MAX;
  bool abort_note = false;
  uint8_t sink[256];

  int fd() const override { return -1; }
  ssize_t writev(const iovec* iov, int count) override {
    if (write_budget == 0) return errno = EAGAIN, -1;
    if (write_budget == -2) return errno = EPIPE, -1;
    size_t limit = write_budget < 0 ? SIZE_MAX : static_cast<size_t>(write_budget), taken = 0;
    for (int i = 0; i < count && taken < limit; ++i) {
      const size_t n = std::min(iov[i].iov_len, limit - taken);
      // Read every byte taken, so ASan checks that the sender's buffers are valid.
      for (size_t off = 0; off < n; off += sizeof sink)
        std::memcpy(sink, static_cast<const uint8_t*>(iov[i].iov_base) + off,
                    std::min(sizeof sink, n - off));
      taken += n;
    }
    return static_cast<ssize_t>(taken);
  }
  ssize_t read(void* dst, size_t len) override {
    if (pos < available) {
      const size_t n = std::min({len, available - pos, read_chunk});
      std::memcpy(dst, in.data() + pos, n);
      pos += n;
      return static_cast<ssize_t>(n);
    }
    if (eof) return 0;
    return errno = EAGAIN, -1;
  }
  void wait_writable(int) override {}
  void shutdown_write() override {}
  std::optional<AbortNote> peer_abort() const override {
    if (!abort_note) return std::nullopt;
    return AbortNote{ErrorCode::Aborted, 0, "fuzz"};
  }
  uint64_t direct_threshold() const override { return direct; }
  bool pull(void* dst, uint64_t, uint64_t len, std::string& error) override {
    if (!pull_ok) {
      error = "fuzz: pull refused";
      return false;
    }
    std::memset(dst, 0xab, len);  // never the address the peer named: it is hostile
    return true;
  }
  const char* kind() const override { return "fuzz"; }
};

// Checks that every completion names a request that is pending, once.
class Listener : public ConnectionListener {
 public:
  std::set<uint64_t> pending_sends, pending_recvs;
  bool error = false;
  void on_send_complete(uint64_t cookie) override {
    if (pending_sends.erase(cookie) != 1) std::abort();  // unknown or repeated send completion
  }
  void on_recv_complete(uint64_t cookie) override {
    if (pending_recvs.erase(cookie) != 1) std::abort();  // unknown or repeated recv completion
  }
  void on_connection_error(int, ErrorCode, const std::string& message) override {
    if (message.empty()) std::abort();  // every error explains itself
    error = true;
  }
};

struct Script {
  const uint8_t* p;
  size_t n, i = 0;
  bool done() const { return i >= n; }
  uint8_t u8() { return i < n ? p[i++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Small limits so that short inputs reach parking and eager buffering.
  setenv("SHOAL_UNEXPECTED_LIMIT", "4K", 1);
  setenv("SHOAL_MAX_FRAME", "1M", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto owned = std::make_unique<FuzzStream>();
  FuzzStream& s = *owned;
  Listener listener;
  // Buffers outlive the connection, as the engine's do until the communicator breaks.
  std::vector<std::unique_ptr<std::vector<uint8_t>>> buffers;
  uint64_t next_cookie = 0;
  bool abort_at_end = false;
  {
    Connection conn(std::move(owned), 1, kCommId, &listener);
    Script sc{data, size};
    bool script = true;
    while (script && !sc.done()) {
      const uint8_t op = sc.u8();
      switch (op % 10) {
        case 0:    // post_recv kind seq tag signature length16
        case 1: {  // post_send kind seq tag signature length16
          // kind's bit 1: the buffer in two pieces (a vectored call's gather or scatter)
          const uint8_t kind_byte = sc.u8();
          const FrameKind kind = (kind_byte & 1) ? FrameKind::p2p : FrameKind::collective;
          const bool pieces = (kind_byte & 2) != 0;
          const uint64_t seq = sc.u8();
          const uint32_t tag = sc.u8();
          const uint32_t signature = sc.u8();
          const uint64_t length = sc.u16();
          buffers.push_back(std::make_unique<std::vector<uint8_t>>(std::max<uint64_t>(length, 1)));
          const uint64_t cookie = next_cookie++;
          if (op % 10 == 0) {
            RecvRequest r{kind, seq, tag, signature, length, buffers.back()->data(), cookie};
            if (pieces) {
              uint8_t* base = buffers.back()->data();
              r.scatter = {{base, length / 3}, {base + length / 3, length - length / 3}};
            }
            listener.pending_recvs.insert(cookie);
            conn.post_recv(r);
          } else {
            SendRequest r;
            r.header.kind = kind;
            r.header.comm_id = kCommId;
            r.header.seq = seq;
            r.header.tag = tag;
            r.header.signature = signature;
            r.header.length = length;
            r.data = buffers.back()->data();
            if (pieces) {
              uint8_t* base = buffers.back()->data();
              r.gather = {{base, length / 3}, {base + length / 3, length - length / 3}};
            }
            r.cookie = cookie;
            listener.pending_sends.insert(cookie);
            conn.post_send(r);
          }
          break;
        }
        case 2: {  // release n16 more bytes of the stream (taken from the script's tail), progress
          const size_t n = sc.u16();
          const size_t take = std::min(n, sc.n - sc.i);
          s.in.insert(s.in.end(), sc.p + sc.i, sc.p + sc.i + take);
          sc.i += take;
          s.available = s.in.size();
          conn.progress();
          break;
        }
        case 3:
          conn.progress();
          break;
        case 4:
          s.read_chunk = sc.u8() + 1;
          break;
        case 5: {
          const uint8_t b = sc.u8();
          s.write_budget = b == 0 ? 0 : b == 1 ? -2 : b == 255 ? -1 : b;
          break;
        }
        case 6:
          s.pull_ok = !s.pull_ok;
          break;
        case 7:
          s.direct = s.direct == UINT64_MAX ? 1 : UINT64_MAX;
          break;
        case 8:
          abort_at_end = !abort_at_end;
          break;
        case 9:
          script = false;
          break;
      }
    }
    // The rest is the peer's stream, then (sometimes) its end.
    s.in.insert(s.in.end(), sc.p + sc.i, sc.p + sc.n);
    s.available = s.in.size();
    s.write_budget = -1;
    conn.progress();
    if (size % 3 == 0) {
      s.eof = true;
      s.abort_note = size % 2 == 0;
      conn.progress();
    }
    // A header the rules reject, read in full, must have broken the connection with an error
    // (the walk follows the frames the rules accept; where the connection stopped reading, a
    // parked frame or an error, it read no further).
    const size_t bad =
        shoal::fuzz_rules::first_rejected_header(s.in.data(), s.in.size(), kCommId, kMaxFrame);
    if (bad != SIZE_MAX && s.pos >= bad + shoal::fuzz_rules::kHeaderBytes && !listener.error)
      std::abort();
    (void)conn.expecting();
    (void)conn.describe_state();
    if (abort_at_end)
      conn.send_abort_and_close(ErrorCode::Internal, 0, "fuzz: closing");
    else
      conn.say_goodbye(0);
  }
  return 0;
}
