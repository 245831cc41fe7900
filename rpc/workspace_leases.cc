#include "rpc/workspace_leases.h"

#include <utility>
#include <vector>

namespace cubicle::rpc {

std::shared_ptr<WorkspaceLeases> WorkspaceLeases::Create(Post post) {
  return std::shared_ptr<WorkspaceLeases>(new WorkspaceLeases(std::move(post)));
}

WorkspaceLeases::Lease::~Lease() {
  if (std::shared_ptr<WorkspaceLeases> owner = owner_.lock()) owner->Release(key_);
}

std::optional<uint64_t> WorkspaceLeases::Acquire(const std::string& key, bool wait, Start& start) {
  std::unique_lock<std::mutex> lock(mu_);
  Entry& entry = entries_[key];
  if (!entry.held) {
    entry.held = true;
    lock.unlock();
    std::move(start)(std::shared_ptr<Lease>(new Lease(weak_from_this(), key)));
    return 0;
  }
  if (!wait) return std::nullopt;
  const uint64_t ticket = ++next_ticket_;
  entry.waiting.emplace_back(ticket, std::move(start));
  return ticket;
}

bool WorkspaceLeases::Withdraw(const std::string& key, uint64_t ticket) {
  Start dropped;  // destroyed outside the lock: it may own a request
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  auto& waiting = it->second.waiting;
  for (auto w = waiting.begin(); w != waiting.end(); ++w) {
    if (w->first == ticket) {
      dropped = std::move(w->second);
      waiting.erase(w);
      return true;
    }
  }
  return false;
}

void WorkspaceLeases::Release(const std::string& key) {
  Start next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    if (it->second.waiting.empty()) {
      entries_.erase(it);
      return;
    }
    next = std::move(it->second.waiting.front().second);
    it->second.waiting.pop_front();  // the lease stays held: it passes to `next`
  }
  auto lease = std::shared_ptr<Lease>(new Lease(weak_from_this(), key));
  post_([next = std::move(next), lease = std::move(lease)]() mutable { std::move(next)(std::move(lease)); });
}

void WorkspaceLeases::WithdrawAll() {
  std::vector<Start> dropped;  // destroyed outside the lock: they may own requests
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, entry] : entries_) {
    for (auto& [ticket, start] : entry.waiting) dropped.push_back(std::move(start));
    entry.waiting.clear();
  }
}

bool WorkspaceLeases::Held(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  return it != entries_.end() && it->second.held;
}

size_t WorkspaceLeases::Waiting(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  return it == entries_.end() ? 0 : it->second.waiting.size();
}

}  // namespace cubicle::rpc
