#pragma once
// The replicas' batches back in the order the source made them (PipelinePlan::replica_gpus).
//
// The source numbers its batches (Batch::order) and hands each to one replica; replicas finish them in any order.
// The stage after the replicas must see them as if one chain had run them (a tracker needs each source's frames in
// order; so do readers of the records), so each replica's last stage puts its batch here, and the merge hands
// batches on strictly by number. A batch that ends inside a replica (failed, dropped by a leaky queue, its replica
// down) is skipped by number so that nothing waits for it. `forward` runs under the merge's lock, so two replicas
// never hand on out of order; it may block (a full queue downstream): the other replicas then wait to put theirs.
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>

#include "runtime/batch.hpp"

namespace sluice {

class ReplicaMerge {
 public:
  using Forward = std::function<void(BatchLease)>;
  ReplicaMerge(std::size_t replicas, Forward forward) : replicas_left_(replicas), forward_(std::move(forward)) {}

  // A replica's finished batch.
  void put(BatchLease batch);
  // Batch number `order` ends where it is: hand on what waited for it.
  void skip(std::uint64_t order);
  // A replica's last stage ended. Once every one has, what is still held goes on in order (numbers that never
  // came are given up) and true is returned: the caller then closes what `forward` feeds.
  bool replica_ended();
  std::size_t held() const;

 private:
  void hand_on_in_order();  // under mu_

  mutable std::mutex mu_;
  std::uint64_t next_ = 0;
  std::map<std::uint64_t, Batch*> held_;  // arrived ahead of their turn
  std::set<std::uint64_t> skipped_;       // ahead of their turn too
  std::size_t replicas_left_;
  Forward forward_;
};

}  // namespace sluice
