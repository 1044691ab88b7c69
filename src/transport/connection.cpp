#include "transport/connection.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>

#include "core/check.hpp"
#include "core/config.hpp"

namespace shoal::transport {

namespace {
constexpr uint64_t kHeaderBytes = sizeof(FrameHeader);

// Numbers frames in order of arrival over every connection of the process: a receive from any
// source takes the earliest frame held for its tag.
std::atomic<uint64_t> next_arrival{1};

const char* kind_name(FrameKind k) {
  switch (k) {
    case FrameKind::collective:
      return "collective";
    case FrameKind::p2p:
      return "send/recv";
    case FrameKind::goodbye:
      return "goodbye";
    case FrameKind::abort:
      return "abort";
    case FrameKind::ack:
      return "ack";
    case FrameKind::heartbeat:
      return "heartbeat";
  }
  return "unknown";
}
}  // namespace

Connection::Connection(std::unique_ptr<Stream> stream, int peer, uint64_t comm_id,
                       ConnectionListener* listener)
    : stream_(std::move(stream)), peer_(peer), comm_id_(comm_id), listener_(listener) {
  max_frame_ = config::get_bytes("SHOAL_MAX_FRAME");
  unexpected_limit_ = config::get_bytes("SHOAL_UNEXPECTED_LIMIT");
  eager_limit_ = std::min<uint64_t>(64 * 1024, unexpected_limit_);
}

Connection::~Connection() = default;

void Connection::keep_alive(std::chrono::steady_clock::time_point now,
                            std::chrono::milliseconds interval,
                            std::optional<std::pair<uint64_t, uint32_t>> in_collective) {
  // Only between frames and only when nothing waits to be written: queued bytes that cannot
  // leave mean the peer is not reading, and a heartbeat behind them would not leave either.
  if (broken_ || !sends_.empty() || now - last_sent_ < interval) return;
  SendRequest beat;
  beat.header.kind = FrameKind::heartbeat;
  beat.header.comm_id = comm_id_;
  if (in_collective) {
    beat.header.tag = kHeartbeatInCollective;
    beat.header.seq = in_collective->first;
    beat.header.signature = in_collective->second;
  }
  sends_.push_back(beat);
  last_sent_ = now;  // one attempt per interval even if the stream takes nothing now
}

std::chrono::steady_clock::duration Connection::silence(
    std::chrono::steady_clock::time_point now) const {
  // Parked: this rank stopped reading (flow control), the peer's bytes wait in the stream.
  if (broken_ || rx_ == Rx::parked) return {};
  return now - last_heard_;
}

void Connection::post_send(const SendRequest& request) {
  if (peer_closed_)
    return fail(ErrorCode::PeerFailure,
                "rank " + std::to_string(peer_) + " closed its communicator before operation #" +
                    std::to_string(request.header.seq) +
                    " sent to it: the ranks issued different sequences of calls");
  if (broken_) return;
  sends_.push_back(request);
}

std::string Connection::mismatch(const FrameHeader& h, const RecvRequest& r) const {
  std::ostringstream os;
  if (h.kind == FrameKind::p2p && r.kind == FrameKind::p2p) {
    os << "rank " << peer_ << " sent " << h.length << " bytes under tag "
       << static_cast<int32_t>(h.tag) << " (signature " << std::hex << h.signature << std::dec
       << ") where this rank's receive with that tag expects " << r.length << " bytes (signature "
       << std::hex << r.signature << std::dec
       << "): a send and its receive must have the same count and type";
    return os.str();
  }
  os << "rank " << peer_ << " sent a " << kind_name(h.kind) << " frame (operation #" << h.seq
     << ", frame " << h.tag << ", " << h.length << " bytes, signature " << std::hex << h.signature
     << std::dec << ") where this rank expected a " << kind_name(r.kind) << " frame (operation #"
     << r.seq << ", frame " << r.tag << ", " << r.length << " bytes, signature " << std::hex
     << r.signature << std::dec << ")";
  return os.str();
}

// Where byte `offset` of a receive's payload goes, and how many bytes from there are contiguous.
static uint8_t* destination(const RecvRequest& r, uint64_t offset, uint64_t& room) {
  if (r.scatter.empty()) {
    room = r.length - offset;
    return r.dst + offset;
  }
  for (const auto& piece : r.scatter) {
    if (offset < piece.iov_len) {
      room = piece.iov_len - offset;
      return static_cast<uint8_t*>(piece.iov_base) + offset;
    }
    offset -= piece.iov_len;
  }
  room = 0;
  return nullptr;
}

static void copy_out(const RecvRequest& r, const uint8_t* src, uint64_t bytes) {
  for (uint64_t at = 0, room = 0; at < bytes; at += room) {
    uint8_t* d = destination(r, at, room);
    room = std::min(room, bytes - at);
    std::memcpy(d, src + at, room);
  }
}

static bool ordered(FrameKind kind, uint32_t tag) {
  return kind == FrameKind::p2p && tag == kOrderedP2pTag;
}

static bool matches(const FrameHeader& h, const RecvRequest& r) {
  return h.kind == r.kind && (h.kind == FrameKind::p2p || h.seq == r.seq) && h.tag == r.tag &&
         h.signature == r.signature && h.length == r.length;
}

bool Connection::claimed_empty() const {
  for (const auto& u : unexpected_)
    if (u.claimed) return false;
  return true;
}

void Connection::post_recv(const RecvRequest& request) {
  if (broken_ && !peer_closed_) return;
  const bool p2p = request.kind == FrameKind::p2p;
  if (out_of_order(request)) return;
  // An earlier frame may already be here, buffered or parked (after the peer's goodbye: buffered).
  for (auto& u : unexpected_) {
    if (u.claimed || (u.header.kind == FrameKind::p2p) != p2p) continue;
    if (p2p && u.header.tag != request.tag) continue;
    if (!matches(u.header, request)) return fail(ErrorCode::Mismatch, mismatch(u.header, request));
    u.claimed = true;
    u.request = request;
    unexpected_bytes_ -= u.data.size();
    deliver_claimed();
    return;
  }
  if (peer_closed_)
    return fail(ErrorCode::PeerFailure,
                "rank " + std::to_string(peer_) +
                    " closed its communicator without sending what operation #" +
                    std::to_string(request.seq) +
                    " expects from it: the ranks issued different sequences of calls");
  // The engine calls progress() on this connection next.
  if (rx_ == Rx::parked) {
    const bool parked_p2p = hdr_.kind == FrameKind::p2p;
    if (parked_p2p == p2p && (!p2p || hdr_.tag == request.tag)) {
      bind(request);
      return;
    }
    if (!p2p && !parked_p2p) return fail(ErrorCode::Mismatch, mismatch(hdr_, request));
    const bool crossed = (!p2p && ordered(hdr_.kind, hdr_.tag)) ||
                         (ordered(request.kind, request.tag) && !parked_p2p);
    if (crossed) return fail(ErrorCode::Mismatch, mismatch(hdr_, request));
    hold_unexpected();  // this receive's frame may lie behind the parked one
  }
  (p2p ? posted_p2p_ : posted_).push_back(request);
}

std::optional<uint64_t> Connection::held_p2p(uint32_t tag) const {
  if (broken_ && !peer_closed_) return std::nullopt;
  for (const auto& u : unexpected_)
    if (!u.claimed && u.header.kind == FrameKind::p2p && u.header.tag == tag) return u.arrival;
  if (rx_ == Rx::parked && hdr_.kind == FrameKind::p2p && hdr_.tag == tag) return parked_arrival_;
  return std::nullopt;
}

void Connection::unpark() {
  if (rx_ == Rx::parked && !broken_) hold_unexpected();
}

// A frame whose order against the other kind is fixed arrives while a receive of the other kind
// that it should have followed still waits: the peer is in another call.
bool Connection::out_of_order(const FrameHeader& h) {
  const RecvRequest* waiting = nullptr;
  if (ordered(h.kind, h.tag)) {
    if (!posted_.empty()) waiting = &posted_.front();
  } else if (h.kind == FrameKind::collective) {
    for (const auto& r : posted_p2p_)
      if (ordered(r.kind, r.tag)) {
        waiting = &r;
        break;
      }
  }
  if (!waiting) return false;
  fail(ErrorCode::Mismatch, mismatch(h, *waiting));
  return true;
}

// A receive posted while an unclaimed frame of the other kind, which came first, waits for a
// receive of its own (collective against ordered p2p, or the reverse).
bool Connection::out_of_order(const RecvRequest& r) {
  const bool ordered_p2p = ordered(r.kind, r.tag);
  if (r.kind != FrameKind::collective && !ordered_p2p) return false;
  for (const auto& u : unexpected_) {
    if (u.claimed) continue;
    const bool same =
        ordered_p2p ? ordered(u.header.kind, u.header.tag) : u.header.kind == FrameKind::collective;
    if (same) return false;  // its own frame came first
    const bool other =
        ordered_p2p ? u.header.kind == FrameKind::collective : ordered(u.header.kind, u.header.tag);
    if (other) {
      fail(ErrorCode::Mismatch, mismatch(u.header, r));
      return true;
    }
  }
  return false;
}

bool Connection::take_receive(const FrameHeader& h, RecvRequest& r) {
  if (h.kind != FrameKind::p2p) {
    if (posted_.empty()) return false;
    r = posted_.front();
    posted_.pop_front();
    return true;
  }
  auto it = posted_p2p_.begin();
  while (it != posted_p2p_.end() && it->tag != h.tag) ++it;
  // The earliest posted receive that fits takes the frame: this one, or one from any source.
  if (auto any =
          listener_->claim_any_source(peer_, h, it == posted_p2p_.end() ? UINT64_MAX : it->order)) {
    r = *any;
    return true;
  }
  if (it == posted_p2p_.end()) return false;
  r = *it;
  posted_p2p_.erase(it);
  return true;
}

bool Connection::bind(const RecvRequest& r) {
  if (!matches(hdr_, r)) {
    fail(ErrorCode::Mismatch, mismatch(hdr_, r));
    return false;
  }
  current_ = r;
  payload_got_ = 0;
  rx_ = Rx::payload_direct;
  if (r.length == 0) {
    rx_ = Rx::header;
    listener_->on_recv_complete(r.cookie);
  }
  return true;
}

void Connection::hold_unexpected() {
  Unexpected u;
  u.header = hdr_;
  u.data.resize(hdr_.length);
  u.arrival = rx_ == Rx::parked ? parked_arrival_ : next_arrival.fetch_add(1);
  unexpected_bytes_ += hdr_.length;
  unexpected_.push_back(std::move(u));
  rx_ = hdr_.length == 0 ? Rx::header : Rx::payload_unexpected;
}

bool Connection::others_waiting() const {
  // hdr_'s own receive is not posted (else it would have been taken).
  return !posted_.empty() || !posted_p2p_.empty() || listener_->any_source_waiting();
}

void Connection::deliver_claimed() {
  // Claimed and fully received entries go, in arrival order among themselves; an unclaimed
  // entry (another tag's) does not hold back those behind it.
  for (size_t i = 0; i < unexpected_.size();) {
    Unexpected& u = unexpected_[i];
    if (!u.claimed || u.received != u.data.size()) {
      ++i;
      continue;
    }
    if (u.header.flags & kFlagByReference) {
      const FrameHeader h = u.header;
      const uint64_t address = u.reference;
      const RecvRequest r = u.request;
      unexpected_.erase(unexpected_.begin() + static_cast<std::ptrdiff_t>(i));
      if (!deliver_reference(h, address, r)) return;
      continue;
    }
    if (!u.data.empty()) copy_out(u.request, u.data.data(), u.data.size());
    const uint64_t cookie = u.request.cookie;
    unexpected_.erase(unexpected_.begin() + static_cast<std::ptrdiff_t>(i));
    listener_->on_recv_complete(cookie);
  }
}

bool Connection::deliver_reference(const FrameHeader& h, uint64_t address, const RecvRequest& r) {
  std::string error;
  bool pulled = true;
  for (uint64_t at = 0, room = 0; pulled && at < r.length; at += room) {
    uint8_t* d = destination(r, at, room);
    pulled = stream_->pull(d, address + at, room, error);
  }
  // A peer that broke leaves its note before it fails its operations (and its user may free
  // the buffer): no note after the pull means the bytes were valid all along.
  if (auto note = stream_->peer_abort()) {
    broken_ = true;
    listener_->on_peer_abort(
        peer_, note->culprit, note->code,
        "rank " + std::to_string(peer_) + " failed and reported: " + note->message);
    return false;
  }
  if (!pulled) {
    fail(ErrorCode::PeerFailure, "cannot read operation #" + std::to_string(h.seq) +
                                     "'s data from rank " + std::to_string(peer_) + "'s memory (" +
                                     error + "): it probably died");
    return false;
  }
  queue_ack(h);
  listener_->on_recv_complete(r.cookie);
  return true;
}

void Connection::queue_ack(const FrameHeader& h) {
  SendRequest ack;
  ack.header.kind = FrameKind::ack;
  ack.header.comm_id = comm_id_;
  ack.header.seq = h.seq;
  ack.header.tag = h.tag;
  ack.header.signature = h.signature;
  // Ahead of queued data (the peer's buffer waits for it), behind a frame half written and
  // behind earlier acks (the peer matches them in order).
  auto pos = (!sends_.empty() && sent_ > 0) ? std::next(sends_.begin()) : sends_.begin();
  while (pos != sends_.end() && pos->header.kind == FrameKind::ack) ++pos;
  sends_.insert(pos, ack);
  ack_queued_ = true;
}

void Connection::progress() {
  if (broken_ || in_progress_) return;
  in_progress_ = true;
  do {
    ack_queued_ = false;
    pump_write();
    pump_read();
  } while (ack_queued_ && !broken_);
  in_progress_ = false;
}

void Connection::pump_write(bool front_only) {
  const size_t frames_before = sends_.size();
  while (!broken_ && !sends_.empty() && (!front_only || sends_.size() == frames_before)) {
    SendRequest& s = sends_.front();
    const bool data = s.header.kind == FrameKind::collective || s.header.kind == FrameKind::p2p;
    if (sent_ == 0 && data && s.gather.empty() && s.header.length >= stream_->direct_threshold()) {
      s.header.flags |= kFlagByReference;
      s.reference = reinterpret_cast<uint64_t>(s.data);
    }
    const bool by_reference = (s.header.flags & kFlagByReference) != 0;
    const uint64_t wire = by_reference ? sizeof s.reference : s.header.length;
    const uint64_t total = kHeaderBytes + wire;
    constexpr int kMaxIov = 64;  // a gathered payload goes in several writes beyond this
    iovec iov[kMaxIov];
    int n_iov = 0;
    if (by_reference) {
      iov[n_iov++] = {reinterpret_cast<uint8_t*>(&s.header) + std::min(sent_, kHeaderBytes),
                      kHeaderBytes - std::min(sent_, kHeaderBytes)};
      const uint64_t off = sent_ > kHeaderBytes ? sent_ - kHeaderBytes : 0;
      iov[n_iov++] = {reinterpret_cast<uint8_t*>(&s.reference) + off, sizeof s.reference - off};
    } else {
      if (sent_ < kHeaderBytes)
        iov[n_iov++] = {reinterpret_cast<uint8_t*>(&s.header) + sent_, kHeaderBytes - sent_};
      uint64_t off = sent_ > kHeaderBytes ? sent_ - kHeaderBytes : 0;
      if (s.gather.empty()) {
        if (off < s.header.length)
          iov[n_iov++] = {const_cast<uint8_t*>(s.data) + off, s.header.length - off};
      } else {
        for (const auto& piece : s.gather) {
          if (n_iov == kMaxIov) break;
          if (off >= piece.iov_len) {
            off -= piece.iov_len;
            continue;
          }
          iov[n_iov++] = {static_cast<uint8_t*>(piece.iov_base) + off, piece.iov_len - off};
          off = 0;
        }
      }
    }
    ssize_t n = stream_->writev(iov, n_iov);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      const int err = errno;
      pump_read();  // an abort frame already sent by the peer explains this better than errno
      if (broken_) return;
      errno = err;
      return fail(ErrorCode::PeerFailure, std::string("connection to rank ") +
                                              std::to_string(peer_) + " broke while sending (" +
                                              strerror(errno) + "): rank " + std::to_string(peer_) +
                                              " probably died; check its log");
    }
    sent_ += static_cast<uint64_t>(n);
    if (n > 0) last_sent_ = std::chrono::steady_clock::now();
    if (sent_ == total) {
      sent_ = 0;
      if (by_reference) {  // complete when the peer has pulled it (its ack)
        awaiting_ack_.push_back(s);
        sends_.pop_front();
        continue;
      }
      uint64_t cookie = s.cookie;
      sends_.pop_front();
      if (data) listener_->on_send_complete(cookie);
    }
  }
}

void Connection::pump_read() {
  while (!broken_) {
    uint8_t* dst = nullptr;
    uint64_t want = 0;
    switch (rx_) {
      case Rx::parked:
        return;
      case Rx::header:
        dst = reinterpret_cast<uint8_t*>(&hdr_) + hdr_got_;
        want = kHeaderBytes - hdr_got_;
        break;
      case Rx::payload_direct:
        dst = destination(current_, payload_got_, want);
        break;
      case Rx::payload_unexpected: {
        Unexpected& u = unexpected_.back();
        dst = u.data.data() + u.received;
        want = u.data.size() - u.received;
        break;
      }
      case Rx::payload_abort:
        dst = reinterpret_cast<uint8_t*>(abort_payload_.data()) + payload_got_;
        want = abort_payload_.size() - payload_got_;
        break;
      case Rx::reference:
        dst = reinterpret_cast<uint8_t*>(&reference_) + payload_got_;
        want = sizeof reference_ - payload_got_;
        break;
    }
    ssize_t n = want == 0 ? 0 : stream_->read(dst, want);
    if (const uint64_t wire = stream_->wire_bytes_in(); n > 0 || wire != wire_bytes_seen_) {
      last_heard_ = std::chrono::steady_clock::now();
      wire_bytes_seen_ = wire;
    }
    if (want > 0) {
      if (n == 0) return on_eof();
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        return fail(ErrorCode::PeerFailure,
                    std::string("connection to rank ") + std::to_string(peer_) + " broke (" +
                        strerror(errno) + "): rank " + std::to_string(peer_) + " probably died");
      }
    }
    const uint64_t got = static_cast<uint64_t>(n);
    switch (rx_) {
      case Rx::parked:
        return;
      case Rx::header:
        hdr_got_ += got;
        if (hdr_got_ == kHeaderBytes) {
          hdr_got_ = 0;
          if (!start_frame()) return;
        }
        break;
      case Rx::payload_direct:
        payload_got_ += got;
        if (payload_got_ == current_.length) {
          rx_ = Rx::header;
          listener_->on_recv_complete(current_.cookie);
        }
        break;
      case Rx::payload_unexpected: {
        Unexpected& u = unexpected_.back();
        u.received += got;
        if (u.received == u.data.size()) {
          rx_ = Rx::header;
          deliver_claimed();
        }
        break;
      }
      case Rx::reference:
        payload_got_ += got;
        if (payload_got_ == sizeof reference_) {
          rx_ = Rx::header;
          if (out_of_order(hdr_)) return;
          RecvRequest r;
          if (take_receive(hdr_, r)) {
            if (!matches(hdr_, r)) return fail(ErrorCode::Mismatch, mismatch(hdr_, r));
            if (!deliver_reference(hdr_, reference_, r)) return;
          } else {
            Unexpected u;
            u.header = hdr_;
            u.reference = reference_;
            u.arrival = next_arrival.fetch_add(1);
            unexpected_.push_back(std::move(u));
          }
        }
        break;
      case Rx::payload_abort:
        payload_got_ += got;
        if (payload_got_ == abort_payload_.size()) {
          // payload: error code (1 byte), culprit rank (int32), message
          ErrorCode code = ErrorCode::Aborted;
          int32_t culprit = peer_;
          std::string text = abort_payload_;
          if (text.size() >= 5) {
            uint8_t c = static_cast<uint8_t>(text[0]);
            if (c <= static_cast<uint8_t>(ErrorCode::Internal)) code = static_cast<ErrorCode>(c);
            std::memcpy(&culprit, text.data() + 1, 4);
            text.erase(0, 5);
          }
          broken_ = true;
          listener_->on_peer_abort(
              peer_, culprit, code,
              "rank " + std::to_string(peer_) + " failed and reported: " + text);
          return;
        }
        break;
    }
  }
}

bool Connection::start_frame() {
  if (auto err = validate(hdr_, comm_id_, max_frame_)) {
    fail(ErrorCode::PeerFailure,
         "rejected a frame from rank " + std::to_string(peer_) + ": " + *err);
    return false;
  }
  switch (hdr_.kind) {
    case FrameKind::goodbye:
      goodbye_ = true;
      return true;
    case FrameKind::heartbeat:  // its bytes already count as hearing from the peer
      if (hdr_.length != 0) {
        fail(ErrorCode::PeerFailure,
             "rank " + std::to_string(peer_) + " sent a heartbeat frame with a payload");
        return false;
      }
      if (hdr_.tag == kHeartbeatInCollective)
        listener_->on_peer_in_collective(peer_, hdr_.seq, hdr_.signature);
      return true;
    case FrameKind::ack: {
      // Not always in order: p2p frames of different tags are taken as their receives come.
      auto it = awaiting_ack_.begin();
      while (it != awaiting_ack_.end() &&
             (it->header.seq != hdr_.seq || it->header.tag != hdr_.tag))
        ++it;
      if (it == awaiting_ack_.end()) {
        fail(ErrorCode::PeerFailure,
             "rank " + std::to_string(peer_) + " acknowledged a frame (operation #" +
                 std::to_string(hdr_.seq) + ") this rank did not send by reference");
        return false;
      }
      const uint64_t cookie = it->cookie;
      awaiting_ack_.erase(it);
      listener_->on_send_complete(cookie);
      return true;
    }
    case FrameKind::abort: {
      // A copy: std::min takes references, and the packed header's fields may be misaligned.
      const uint64_t length = hdr_.length;
      abort_payload_.assign(std::min<uint64_t>(length, 64 * 1024), '\0');
      if (hdr_.length > abort_payload_.size()) {
        fail(ErrorCode::PeerFailure,
             "rank " + std::to_string(peer_) + " sent an oversized abort frame");
        return false;
      }
      payload_got_ = 0;
      rx_ = Rx::payload_abort;
      return true;
    }
    default:
      break;
  }
  if (goodbye_) {
    fail(ErrorCode::PeerFailure,
         "rank " + std::to_string(peer_) + " sent data after closing its communicator");
    return false;
  }
  if (hdr_.flags & kFlagByReference) {  // 8 bytes of address follow; never parked
    payload_got_ = 0;
    rx_ = Rx::reference;
    return true;
  }
  if (out_of_order(hdr_)) return false;
  RecvRequest r;
  if (take_receive(hdr_, r)) return bind(r);
  // No receive posted: buffer small frames, park on big ones (flow control holds the sender)
  // unless another receive waits, whose frame may come after this one.
  if ((hdr_.length > eager_limit_ || unexpected_bytes_ + hdr_.length > unexpected_limit_) &&
      !others_waiting()) {
    rx_ = Rx::parked;
    parked_arrival_ = next_arrival.fetch_add(1);
    return false;
  }
  hold_unexpected();
  return true;
}

void Connection::on_eof() {
  if (goodbye_) {
    if (expecting() || !sends_.empty() || rx_ != Rx::header || hdr_got_ != 0)
      return fail(ErrorCode::PeerFailure,
                  "rank " + std::to_string(peer_) +
                      " closed its communicator while this rank still expects data from it or "
                      "sends to it: the ranks issued different sequences of calls");
    // Quiet: a clean close with nothing pending. Frames that came before the goodbye stay
    // buffered for receives not posted yet (the peer finished its last operation before this
    // rank posted its side of it).
    broken_ = true;
    peer_closed_ = true;
    listener_->on_peer_closed(peer_);
    return;
  }
  if (auto note = stream_->peer_abort()) {
    broken_ = true;
    listener_->on_peer_abort(
        peer_, note->culprit, note->code,
        "rank " + std::to_string(peer_) + " failed and reported: " + note->message);
    return;
  }
  fail(ErrorCode::PeerFailure, "rank " + std::to_string(peer_) +
                                   " closed the connection without saying goodbye: it died or "
                                   "was killed (check its output; shoal-run names the first rank "
                                   "that failed)");
}

void Connection::fail(ErrorCode code, const std::string& message) {
  if (broken_ && !peer_closed_) return;
  broken_ = true;
  failed_on_mismatch_ = code == ErrorCode::Mismatch;
  peer_closed_ = false;
  listener_->on_connection_error(peer_, code, message);
}

void Connection::abandon() {
  broken_ = true;
  peer_closed_ = false;
  sends_.clear();
  awaiting_ack_.clear();
  posted_.clear();
  posted_p2p_.clear();
  unexpected_.clear();
  rx_ = Rx::parked;
}

std::string Connection::describe_state() const {
  std::ostringstream os;
  os << "rank " << peer_ << ": " << sends_.size() << " sends queued";
  if (rx_ == Rx::payload_direct)
    os << ", receiving operation #" << current_.seq << " (" << payload_got_ << " of "
       << current_.length << " bytes)";
  if (!posted_.empty())
    os << ", waiting for operation #" << posted_.front().seq << " frame " << posted_.front().tag;
  for (const auto& r : posted_p2p_)
    os << ", waiting for a send with tag " << static_cast<int32_t>(r.tag);
  if (rx_ == Rx::parked) os << ", holding a frame of operation #" << hdr_.seq << " for later";
  return os.str();
}

// Writes a control frame (goodbye, abort), waiting at most `deadline_ms` for room.
static void write_control(Stream& stream, FrameHeader h, const std::string& payload,
                          int deadline_ms) {
  std::string buf(reinterpret_cast<const char*>(&h), sizeof h);
  buf += payload;
  size_t off = 0;
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(deadline_ms);
  while (off < buf.size()) {
    iovec iov{buf.data() + off, buf.size() - off};
    ssize_t n = stream.writev(&iov, 1);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      end - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) return;
      stream.wait_writable(static_cast<int>(std::min<int64_t>(left, 10)));
      continue;
    }
    return;
  }
}

void Connection::send_abort_and_close(ErrorCode code, int culprit, const std::string& message) {
  if (stream_->post_abort(code, culprit, message)) {
    abandon();
    stream_->shutdown_write();
    return;
  }
  // In band, the abort frame can only follow a whole frame. The user's buffer of a frame half
  // written is still valid (its operation has not failed yet): finish it, briefly, so the peer
  // learns the cause instead of blaming this rank for closing.
  bool mid_frame = !sends_.empty() && sent_ > 0;
  if (mid_frame) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    const size_t before = sends_.size();
    while (mid_frame && !broken_ && std::chrono::steady_clock::now() < end) {
      pump_write(/*front_only=*/true);
      mid_frame = sends_.size() == before && sent_ > 0;
      if (mid_frame) stream_->wait_writable(10);
    }
  }
  abandon();
  if (!mid_frame) {
    FrameHeader h;
    h.kind = FrameKind::abort;
    h.comm_id = comm_id_;
    std::string payload(1, static_cast<char>(code));
    int32_t who = culprit;
    payload.append(reinterpret_cast<const char*>(&who), 4);
    payload += message.substr(0, 60000);
    h.length = payload.size();
    write_control(*stream_, h, payload, 100);
  }
  // Only the write side: the peer can still send (into the void) without a reset, so it reads
  // the abort frame instead of failing on a broken pipe first.
  stream_->shutdown_write();
}

void Connection::say_goodbye(int deadline_ms) {
  bool mid_frame = !sends_.empty() && sent_ > 0;
  bool was_broken = broken_;
  abandon();
  if (!was_broken && !mid_frame) {
    FrameHeader h;
    h.kind = FrameKind::goodbye;
    h.comm_id = comm_id_;
    write_control(*stream_, h, {}, deadline_ms);
  }
  stream_->shutdown_write();
  // Drain what the peer still sends so that closing does not reset the connection.
  char sink[4096];
  while (stream_->read(sink, sizeof sink) > 0) {
  }
}

}  // namespace shoal::transport
