// The frames exchanged with one peer over a Stream (a TCP socket or shared-memory rings):
// an ordered sequence of frames in each direction.
//
// Matching rules: a collective's frames from a peer are matched to this rank's collective
// receives from that peer in the order both were issued. Point-to-point frames carry the
// user's tag and form one queue per tag: a p2p frame goes to the first posted p2p receive with
// its tag (MPI's non-overtaking rule within a tag), or to a receive from any source the
// listener holds (claim_any_source); tags and collectives never block each other.
// A frame whose receive is not posted yet is buffered if small (eager) and within
// SHOAL_UNEXPECTED_LIMIT; otherwise the connection stops reading (the kernel's flow control
// holds the sender) until the receive is posted, and the payload then lands in the user's
// buffer with no staging copy. A parked frame is buffered after all once some other receive
// waits on this connection (it may lie behind it in the stream).
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shoal/error.hpp"
#include "transport/frame.hpp"
#include "transport/stream.hpp"

namespace shoal::transport {

struct SendRequest {
  FrameHeader header;
  const uint8_t* data = nullptr;  // header.length bytes, valid until completion
  uint64_t cookie = 0;
  uint64_t reference = 0;  // by-reference frames: the address the peer pulls from
  std::vector<iovec>
      gather;  // instead of `data`: the payload's pieces, in order (never by reference)
};

struct RecvRequest {
  FrameKind kind = FrameKind::collective;
  uint64_t seq = 0;  // collective frames only (p2p frames match by tag, in order)
  uint32_t tag = 0;  // collective: the frame's index in its operation; p2p: the user's tag
  uint32_t signature = 0;
  uint64_t length = 0;
  uint8_t* dst = nullptr;
  uint64_t cookie = 0;
  uint64_t order =
      0;  // p2p: when it was posted, against receives from any source (smaller: earlier)
  std::vector<iovec> scatter;  // instead of `dst`: where the payload's bytes go, in order
};

/// Receives what a connection has to report. Called on the progress thread, never reentrantly
/// from post_send/post_recv.
class ConnectionListener {
 public:
  virtual ~ConnectionListener() = default;
  virtual void on_send_complete(uint64_t cookie) = 0;
  virtual void on_recv_complete(uint64_t cookie) = 0;
  /// The connection can carry nothing more: `code` and `message` say why (PeerFailure for
  /// death, Mismatch for a frame that does not match its receive, ...). `culprit` is the rank
  /// at the origin (the peer itself, or the rank a relayed abort names; -1 if none).
  virtual void on_connection_error(int culprit, ErrorCode code, const std::string& message) = 0;
  /// The peer broke and said why (an abort frame or note naming `culprit`); by default the
  /// error above.
  virtual void on_peer_abort(int /*peer*/, int culprit, ErrorCode code,
                             const std::string& message) {
    on_connection_error(culprit, code, message);
  }
  /// A heartbeat said the peer waits in collective #seq with `signature`.
  virtual void on_peer_in_collective(int /*peer*/, uint64_t /*seq*/, uint32_t /*signature*/) {}
  /// The peer closed its communicator cleanly (said goodbye) with nothing pending here.
  virtual void on_peer_closed(int /*peer*/) {}
  /// A p2p frame arrived from `peer` whose tag has no posted receive here earlier than
  /// `before` (RecvRequest::order; UINT64_MAX: none at all): a receive from any source posted
  /// earlier and waiting for `header.tag` takes it (returned, and forgotten by the listener).
  virtual std::optional<RecvRequest> claim_any_source(int /*peer*/, const FrameHeader& /*header*/,
                                                      uint64_t /*before*/) {
    return std::nullopt;
  }
  /// Whether a receive from any source waits (a frame parked here may hide its frame).
  virtual bool any_source_waiting() const { return false; }
};

class Connection {
 public:
  Connection(std::unique_ptr<Stream> stream, int peer, uint64_t comm_id,
             ConnectionListener* listener);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  int fd() const { return stream_->fd(); }
  Stream& stream() { return *stream_; }
  /// The peer closed or reset its end of the stream (see Stream::peer_gone).
  bool peer_gone() const { return stream_ && stream_->peer_gone(); }
  int peer() const { return peer_; }

  void post_send(const SendRequest& request);
  void post_recv(const RecvRequest& request);

  /// Moves bytes in both directions as far as the stream allows and reports completions.
  void progress();

  /// Bytes this connection still expects (posted or bound receives), for diagnostics.
  bool expecting() const {
    return !posted_.empty() || !posted_p2p_.empty() || rx_ == Rx::payload_direct ||
           !claimed_empty() || !awaiting_ack_.empty();
  }
  /// For a receive from any source with `tag`: the arrival number of the earliest p2p frame
  /// with that tag held here (buffered, or parked: its header read), or nullopt. Posting the
  /// receive here then takes that frame.
  std::optional<uint64_t> held_p2p(uint32_t tag) const;
  /// Another receive waits (from any source): buffer a parked frame and read on.
  void unpark();
  bool broken() const { return broken_; }
  /// Broken, yet able to carry an abort frame: it found a mismatch itself, its stream is in
  /// order, and the peer should learn why this rank stops rather than see it leave.
  bool can_send_abort() const { return !broken_ || failed_on_mismatch_; }
  std::string describe_state() const;

  /// Liveness (the engine's heartbeats): queues a heartbeat frame when nothing was written for
  /// `interval` and nothing waits to be written (progress() writes it).
  /// `in_collective`: (seq, signature) of the collective this rank waits in, which the
  /// heartbeat carries.
  void keep_alive(std::chrono::steady_clock::time_point now, std::chrono::milliseconds interval,
                  std::optional<std::pair<uint64_t, uint32_t>> in_collective = std::nullopt);
  /// How long no byte came from the peer; zero while this rank is not reading (a parked
  /// frame: flow control holds the peer) or once the connection is broken.
  std::chrono::steady_clock::duration silence(std::chrono::steady_clock::time_point now) const;

  /// Drops every request without touching user buffers again; the connection is dead after.
  void abandon();
  /// Best effort: tells the peer why this rank stops (an abort frame naming the rank at the
  /// origin of the failure, or -1), then shuts down.
  void send_abort_and_close(ErrorCode code, int culprit, const std::string& message);
  /// Clean close: a goodbye frame, flushed until `deadline_ms` from now, then drain and close.
  void say_goodbye(int deadline_ms);

 private:
  enum class Rx { header, payload_direct, payload_unexpected, payload_abort, reference, parked };
  struct Unexpected {
    FrameHeader header;
    std::vector<uint8_t> data;
    uint64_t received = 0;
    bool claimed = false;
    uint64_t reference = 0;  // by-reference frame: the address to pull from on delivery
    RecvRequest request;     // valid when claimed
    uint64_t arrival = 0;    // order of arrival among all connections' frames (held_p2p)
  };

  void pump_read();
  /// Writes queued frames as far as the stream takes them; with front_only, at most the first.
  void pump_write(bool front_only = false);
  bool deliver_reference(const FrameHeader& h, uint64_t address, const RecvRequest& r);
  void queue_ack(const FrameHeader& h);
  bool start_frame();  // after a full header; false when parked
  void finish_unexpected(Unexpected& u);
  void deliver_claimed();
  bool claimed_empty() const;
  /// The receive a frame whose header was just read goes to: the first posted one of its kind
  /// (collective) or tag (p2p), else one the listener holds for any source; false if none.
  bool take_receive(const FrameHeader& h, RecvRequest& r);
  bool bind(const RecvRequest& r);  // hdr_'s payload goes to r (false: a mismatch, failed)
  void hold_unexpected();           // hdr_'s payload goes to a buffer
  bool others_waiting() const;      // a receive waits that hdr_'s frame does not serve
  /// kOrderedP2pTag's rule (frame.hpp): the receive an out-of-order frame `h` or receive `r`
  /// contradicts, failing the connection with a MismatchError; false if none.
  bool out_of_order(const FrameHeader& h);
  bool out_of_order(const RecvRequest& r);
  void fail(ErrorCode code, const std::string& message);
  void on_eof();
  std::string mismatch(const FrameHeader& h, const RecvRequest& r) const;

  std::unique_ptr<Stream> stream_;
  int peer_;
  uint64_t comm_id_;
  ConnectionListener* listener_;
  uint64_t max_frame_;
  uint64_t eager_limit_;
  uint64_t unexpected_limit_;

  // sending
  std::deque<SendRequest> sends_;
  std::deque<SendRequest> awaiting_ack_;  // by-reference frames the peer has not pulled yet
  bool ack_queued_ = false;
  uint64_t sent_ = 0;  // bytes of the front request (header + payload) already written

  // receiving
  Rx rx_ = Rx::header;
  FrameHeader hdr_{};
  uint64_t hdr_got_ = 0;
  RecvRequest current_{};  // bound receive while payload_direct
  uint64_t payload_got_ = 0;
  std::deque<RecvRequest> posted_;      // collective receives waiting for their frame, in order
  std::deque<RecvRequest> posted_p2p_;  // p2p receives waiting for a frame with their tag
  std::deque<Unexpected> unexpected_;   // in arrival order
  uint64_t parked_arrival_ = 0;
  uint64_t unexpected_bytes_ = 0;
  std::string abort_payload_;
  uint64_t reference_ = 0;  // address being read for a by-reference frame

  bool goodbye_ = false;
  bool broken_ = false;
  bool failed_on_mismatch_ = false;
  // The peer said goodbye and closed with nothing pending (broken_ is set too): frames it sent
  // before are still in unexpected_ for receives this rank has yet to post; any other receive
  // or send fails at once (it can never complete).
  bool peer_closed_ = false;
  bool in_progress_ = false;
  std::chrono::steady_clock::time_point last_heard_ = std::chrono::steady_clock::now();
  uint64_t wire_bytes_seen_ = 0;  // stream_->wire_bytes_in() when last_heard_ was set
  std::chrono::steady_clock::time_point last_sent_ = std::chrono::steady_clock::now();
};

}  // namespace shoal::transport
