#include "runtime/replica_merge.hpp"

namespace sluice {

void ReplicaMerge::put(BatchLease batch) {
  std::lock_guard lock(mu_);
  const std::uint64_t order = batch->order;
  if (order < next_) {  // after the replicas ended and gave up on it: late, but still in no worse order
    forward_(std::move(batch));
    return;
  }
  held_.emplace(order, batch.detach());
  hand_on_in_order();
}

void ReplicaMerge::skip(std::uint64_t order) {
  std::lock_guard lock(mu_);
  if (order < next_) return;
  skipped_.insert(order);
  hand_on_in_order();
}

void ReplicaMerge::hand_on_in_order() {
  for (;;) {
    if (auto s = skipped_.find(next_); s != skipped_.end()) {
      skipped_.erase(s);
      ++next_;
    } else if (auto h = held_.find(next_); h != held_.end()) {
      BatchLease batch = BatchLease::adopt(h->second);
      held_.erase(h);
      ++next_;
      forward_(std::move(batch));
    } else {
      return;
    }
  }
}

bool ReplicaMerge::replica_ended() {
  std::lock_guard lock(mu_);
  if (replicas_left_ > 0 && --replicas_left_ > 0) return false;
  while (!held_.empty()) {  // every replica ended: nothing else will come
    auto h = held_.begin();
    BatchLease batch = BatchLease::adopt(h->second);
    next_ = h->first + 1;
    held_.erase(h);
    forward_(std::move(batch));
  }
  skipped_.clear();
  return true;
}

std::size_t ReplicaMerge::held() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

}  // namespace sluice
