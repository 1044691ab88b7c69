// shoal's errors: one exception type with a code, and a subclass per code for targeted catch.
#pragma once

#include <stdexcept>
#include <string>

namespace shoal {

enum class ErrorCode {
  InvalidArgument,  // the caller passed something unusable; nothing was sent
  Timeout,          // an operation did not finish within SHOAL_TIMEOUT (or the wait's own limit)
  PeerFailure,      // a peer died, closed its communicator or its connection broke
  Mismatch,      // ranks issued different calls (collective, count, dtype, root) at the same step
  Aborted,       // the communicator was aborted or broken by an earlier failure
  Unauthorized,  // a peer failed authentication
  Internal,      // a bug or a system call failure shoal did not expect
};

std::string_view to_string(ErrorCode code);

/// Every error shoal raises. what() names the rank, the peer, the operation and what to do.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message, int peer = -1)
      : std::runtime_error(message), code_(code), peer_(peer) {}
  ErrorCode code() const noexcept { return code_; }
  /// The peer rank the error concerns, or -1.
  int peer() const noexcept { return peer_; }

 private:
  ErrorCode code_;
  int peer_;
};

#define SHOAL_DEFINE_ERROR(Name)                                    \
  class Name##Error : public Error {                                \
   public:                                                          \
    explicit Name##Error(const std::string& message, int peer = -1) \
        : Error(ErrorCode::Name, message, peer) {}                  \
  };
SHOAL_DEFINE_ERROR(InvalidArgument)
SHOAL_DEFINE_ERROR(Timeout)
SHOAL_DEFINE_ERROR(PeerFailure)
SHOAL_DEFINE_ERROR(Mismatch)
SHOAL_DEFINE_ERROR(Aborted)
SHOAL_DEFINE_ERROR(Unauthorized)
SHOAL_DEFINE_ERROR(Internal)
#undef SHOAL_DEFINE_ERROR

/// Throws the subclass of Error that matches `code`.
[[noreturn]] void throw_error(ErrorCode code, const std::string& message, int peer = -1);

}  // namespace shoal
