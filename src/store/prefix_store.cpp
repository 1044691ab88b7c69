// PrefixStore: a namespace inside another store ("prefix/key").
#include "core/check.hpp"
#include "shoal/store.hpp"

namespace shoal {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  SHOAL_CHECK(base_ != nullptr, InvalidArgument,
              "PrefixStore '" << prefix_ << "' needs a base store, got null");
  timeout_ = base_->timeout();
}

void PrefixStore::set(const std::string& k, const Bytes& value) { base_->set(key(k), value); }

Bytes PrefixStore::get(const std::string& k) {
  // The base's get waits for its own timeout; honour ours when it was changed.
  if (timeout_ != base_->timeout()) base_->wait({key(k)}, timeout_);
  return base_->get(key(k));
}

int64_t PrefixStore::add(const std::string& k, int64_t delta) { return base_->add(key(k), delta); }

std::vector<std::string> PrefixStore::keys(const std::vector<std::string>& ks) const {
  std::vector<std::string> full;
  full.reserve(ks.size());
  for (const auto& k : ks) full.push_back(key(k));
  return full;
}

void PrefixStore::wait(const std::vector<std::string>& ks, Milliseconds timeout) {
  base_->wait(keys(ks), timeout);
}

bool PrefixStore::check(const std::vector<std::string>& ks) { return base_->check(keys(ks)); }

bool PrefixStore::remove(const std::string& k) { return base_->remove(key(k)); }

std::vector<int64_t> PrefixStore::add_all(
    const std::vector<std::pair<std::string, int64_t>>& adds) {
  std::vector<std::pair<std::string, int64_t>> full;
  full.reserve(adds.size());
  for (const auto& [k, delta] : adds) full.emplace_back(key(k), delta);
  return base_->add_all(full);
}

std::vector<Bytes> PrefixStore::multi_get(const std::vector<std::string>& ks) {
  const std::vector<std::string> full = keys(ks);
  if (timeout_ != base_->timeout()) base_->wait(full, timeout_);
  return base_->multi_get(full);
}

}  // namespace shoal
