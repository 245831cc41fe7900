#include "rpc/in_flight.h"

#include <utility>

#include "rpc/jsonrpc.h"

namespace cubicle::rpc {

bool Cancellation::SetStop(absl::AnyInvocable<void()> stop) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_) return false;
  stop_ = std::move(stop);
  return true;
}

void Cancellation::Clear() {
  absl::AnyInvocable<void()> old;
  std::lock_guard<std::mutex> lock(mu_);
  old = std::move(stop_);
  stop_ = nullptr;
}

void Cancellation::Cancel() {
  absl::AnyInvocable<void()> stop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return;
    cancelled_ = true;
    stop = std::move(stop_);
    stop_ = nullptr;
  }
  // Outside the lock: a stop may finish the request (a withdrawn job
  // answers), and that may come back here.
  if (stop) stop();
}

bool Cancellation::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void Connection::Track(const std::shared_ptr<Cancellation>& request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!disconnected_ || policy_ != OnDisconnect::kCancel) {
      requests_.emplace(request.get(), request);
      return;
    }
  }
  request->Cancel();
}

void Connection::Forget(const Cancellation* request) {
  std::shared_ptr<Cancellation> gone;  // released outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  auto it = requests_.find(request);
  if (it == requests_.end()) return;
  gone = std::move(it->second);
  requests_.erase(it);
}

void Connection::Disconnect() {
  std::vector<std::shared_ptr<Cancellation>> stop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (disconnected_) return;
    disconnected_ = true;
    if (policy_ != OnDisconnect::kCancel) return;
    for (auto& [key, request] : requests_) stop.push_back(request);
  }
  for (const std::shared_ptr<Cancellation>& request : stop) request->Cancel();
}

size_t Connection::outstanding() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_.size();
}

LineReplies::LineReplies(bool batch, size_t entries, std::function<void(std::string)> send)
    : batch_(batch), send_(std::move(send)), left_(entries) {}

std::shared_ptr<LineReplies> LineReplies::PassThrough(std::function<void(std::string)> send) {
  auto replies = std::make_shared<LineReplies>(false, 1, std::move(send));
  replies->pass_through_ = true;
  return replies;
}

void LineReplies::Add(std::string reply) {
  if (pass_through_) return send_(std::move(reply));
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!reply.empty()) replies_.push_back(std::move(reply));
    if (--left_ > 0) return;
    out = batch_ ? Batch(replies_) : (replies_.empty() ? "" : std::move(replies_.front()));
    replies_.clear();
  }
  if (!out.empty()) send_(std::move(out));
}

}  // namespace cubicle::rpc
