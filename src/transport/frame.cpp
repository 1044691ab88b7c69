#include "transport/frame.hpp"

#include <sstream>

namespace shoal::transport {

std::optional<std::string> validate(const FrameHeader& h, uint64_t comm_id, uint64_t max_length) {
  std::ostringstream os;
  if (h.magic != kFrameMagic) {
    os << "bad frame magic 0x" << std::hex << h.magic << " (expected 0x" << kFrameMagic
       << "): the stream is corrupt or the peer is not shoal";
  } else if (h.version != kProtocolVersion) {
    os << "protocol version " << h.version << " (this build speaks " << kProtocolVersion
       << "): run the same shoal build on every rank";
  } else if (h.comm_id != comm_id) {
    os << "frame for communicator " << std::hex << h.comm_id << " arrived on communicator "
       << comm_id;
  } else if (h.kind != FrameKind::collective && h.kind != FrameKind::p2p &&
             h.kind != FrameKind::goodbye && h.kind != FrameKind::abort &&
             h.kind != FrameKind::ack && h.kind != FrameKind::heartbeat) {
    os << "unknown frame kind " << static_cast<int>(h.kind);
  } else if ((h.flags & ~kFlagByReference) != 0) {
    os << "unknown frame flags 0x" << std::hex << static_cast<int>(h.flags);
  } else if (h.length > max_length) {
    os << "frame announces " << h.length << " bytes, more than the limit of " << max_length
       << " (SHOAL_MAX_FRAME)";
  } else {
    return std::nullopt;
  }
  return os.str();
}

std::optional<std::string> validate(const Hello& h, uint64_t comm_id, int size) {
  std::ostringstream os;
  if (h.magic != kFrameMagic)
    os << "connection did not start with shoal's handshake";
  else if (h.version != kProtocolVersion)
    os << "peer speaks protocol version " << h.version << ", this build " << kProtocolVersion;
  else if (h.endian_check != 0x0102)
    os << "peer has a different byte order";
  else if (h.comm_id != comm_id)
    os << "peer belongs to another communicator";
  else if (h.size != size)
    os << "peer thinks the world has " << h.size << " ranks, not " << size;
  else if (h.rails == 0 || h.rail >= h.rails)
    os << "peer announced rail " << h.rail << " of " << h.rails;
  else if (h.rank < 0 || h.rank >= size)
    os << "peer claims rank " << h.rank;
  else
    return std::nullopt;
  return os.str();
}

}  // namespace shoal::transport
