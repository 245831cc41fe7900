#include "rpc/skill_sessions.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace cubicle::rpc {

SkillSessionTable::SkillSessionTable(size_t max_sessions,
                                     std::function<void(const SkillSession&, const char* why)> closed)
    : max_sessions_(max_sessions), closed_(std::move(closed)) {
  reaper_ = std::thread([this] { Reap(); });
}

SkillSessionTable::~SkillSessionTable() { CloseAll(); }

absl::Status SkillSessionTable::Add(std::shared_ptr<SkillSession> session) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return absl::FailedPreconditionError("the daemon is shutting down");
  if (sessions_.size() >= max_sessions_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(max_sessions_, " skill sessions are open already (skills.sessions.max_sessions)"));
  }
  sessions_.emplace(session->key, std::move(session));
  changed_.notify_all();
  return absl::OkStatus();
}

std::shared_ptr<SkillSession> SkillSessionTable::Find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(key);
  return it == sessions_.end() ? nullptr : it->second;
}

bool SkillSessionTable::Begin(SkillSession& session) {
  std::lock_guard<std::mutex> lock(mu_);
  if (session.busy) return false;
  session.busy = true;
  ++session.calls;
  return true;
}

void SkillSessionTable::End(SkillSession& session) {
  std::lock_guard<std::mutex> lock(mu_);
  session.busy = false;
  session.last_used = absl::Now();
  changed_.notify_all();
}

std::shared_ptr<SkillSession> SkillSessionTable::Remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return nullptr;
  std::shared_ptr<SkillSession> s = std::move(it->second);
  sessions_.erase(it);
  changed_.notify_all();
  return s;
}

std::vector<std::shared_ptr<SkillSession>> SkillSessionTable::List() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<SkillSession>> out;
  for (const auto& [key, s] : sessions_) out.push_back(s);
  return out;
}

size_t SkillSessionTable::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

void SkillSessionTable::CloseAll() {
  std::map<std::string, std::shared_ptr<SkillSession>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    all = std::move(sessions_);
    sessions_.clear();
    changed_.notify_all();
  }
  {
    std::lock_guard<std::mutex> lock(join_mu_);
    if (reaper_.joinable()) reaper_.join();
  }
  for (auto& [key, s] : all) s->process->Close();
}

// Sleeps until the next session's deadline (or a change), closes the idle
// ones whose deadline passed, and again. A session in a call is not idle:
// its call's own timeout bounds it, and End() starts its idle clock.
void SkillSessionTable::Reap() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    const absl::Time now = absl::Now();
    absl::Time next = absl::InfiniteFuture();
    std::vector<std::pair<std::shared_ptr<SkillSession>, const char*>> due;
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      SkillSession& s = *it->second;
      const bool lifetime = now >= s.end_of_life;
      if ((!s.busy && now >= s.Expires()) || lifetime) {
        due.emplace_back(it->second, lifetime ? "lifetime" : "idle");
        it = sessions_.erase(it);
        continue;
      }
      next = std::min(next, s.busy ? s.end_of_life : s.Expires());
      ++it;
    }
    if (!due.empty()) {
      lock.unlock();
      for (auto& [s, why] : due) {
        s->process->Close();
        if (closed_) closed_(*s, why);
      }
      lock.lock();
      continue;
    }
    if (next == absl::InfiniteFuture()) {
      changed_.wait(lock);
    } else {
      changed_.wait_for(lock, absl::ToChronoNanoseconds(next - now));
    }
  }
}

}  // namespace cubicle::rpc
