#include "rpc/served_profiles.h"

#include <utility>

namespace cubicle::rpc {

std::shared_ptr<const ProfileSet> ServedProfiles::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

std::shared_ptr<const ServedProfile> ServedProfiles::Find(const std::string& name) const {
  std::shared_ptr<const ProfileSet> set = Current();
  auto it = set->find(name);
  return it == set->end() ? nullptr : it->second;
}

void ServedProfiles::Replace(std::shared_ptr<const ProfileSet> next, std::vector<std::shared_ptr<runtime::Pool>> retired) {
  std::shared_ptr<const ProfileSet> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = std::exchange(current_, std::move(next));
    for (std::shared_ptr<runtime::Pool>& pool : retired) draining_.push_back(std::move(pool));
  }
  // The old set is let go outside the lock: when it was the last holder of
  // something, that is destroyed here, not under mu_.
  old.reset();
}

std::vector<std::shared_ptr<runtime::Pool>> ServedProfiles::TakeDrained() {
  std::vector<std::shared_ptr<runtime::Pool>> drained;
  std::lock_guard<std::mutex> lock(mu_);
  // Held only here: no set (which only ever shrinks its holders) and no
  // request refers to it, and none can again.
  auto unheld = [](const std::shared_ptr<runtime::Pool>& pool) { return pool.use_count() == 1; };
  for (std::shared_ptr<runtime::Pool>& pool : draining_) {
    if (unheld(pool)) drained.push_back(std::move(pool));
  }
  std::erase_if(draining_, [](const std::shared_ptr<runtime::Pool>& pool) { return pool == nullptr; });
  return drained;
}

std::vector<std::string> ServedProfiles::Draining() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const std::shared_ptr<runtime::Pool>& pool : draining_) names.push_back(pool->name());
  return names;
}

std::vector<runtime::PoolConfig> ServedProfiles::DrainingConfigs() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<runtime::PoolConfig> configs;
  for (const std::shared_ptr<runtime::Pool>& pool : draining_) configs.push_back(pool->config());
  return configs;
}

void ServedProfiles::Clear() {
  std::shared_ptr<const ProfileSet> old;
  std::vector<std::shared_ptr<runtime::Pool>> draining;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = std::exchange(current_, std::make_shared<const ProfileSet>());
    draining = std::move(draining_);
    draining_.clear();
  }
}

}  // namespace cubicle::rpc
