// Between torch tensors and wire tensors: float32 goes through the chosen codec, other dtypes
// as raw bytes; uncompressed tensors are sent from, and received into, memory without a copy
// where alignment allows.
#pragma once

#include <torch/torch.h>

#include "swarm/net/wire.hpp"

namespace shoal::swarm {

/// `tensor` on the wire; float32 through `codec`, int64 and others raw. Keeps a reference to
/// the tensor's storage while the frame is written.
WireTensor to_wire(const torch::Tensor& tensor, Codec codec = Codec::None);
/// A torch tensor of the decoded dtype; raw, aligned data is viewed in place (the frame stays
/// alive with the tensor). InvalidArgumentError for a dtype torch cannot hold here.
torch::Tensor from_wire(const WireTensor& wire);
/// Bytes as a uint8 wire tensor (state transfer).
WireTensor bytes_to_wire(std::shared_ptr<const std::string> bytes);
std::string wire_to_bytes(const WireTensor& wire);

}  // namespace shoal::swarm
