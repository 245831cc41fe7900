// The profiles the daemon serves now, each with its pool: a set that a
// configuration reload (SIGHUP) replaces whole while requests read it. A
// request takes the ServedProfile it names once, when its params are read,
// and keeps it — its settings and its pool — until it has been answered,
// whatever reloads happen meanwhile. A pool a reload removed or replaced
// is "draining": it takes no new request, and is handed back for
// destruction once no request holds it any more; no execution on it is
// cut short.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rpc/config.h"
#include "runtime/pool.h"

namespace cubicle::rpc {

struct ServedProfile {
  Profile profile;  // as the configuration that made (or last changed) it says
  std::shared_ptr<runtime::Pool> pool;
};
using ProfileSet = std::map<std::string, std::shared_ptr<const ServedProfile>>;

class ServedProfiles {
 public:
  ServedProfiles() : current_(std::make_shared<const ProfileSet>()) {}

  // The set now; it never changes under its holder. Keep the pointer in a
  // variable while using the set: `for (... : *Current())` lets it go
  // before the loop's first step, and a reload may then free the set.
  std::shared_ptr<const ProfileSet> Current() const;
  // The profile named `name` now; null when there is none.
  std::shared_ptr<const ServedProfile> Find(const std::string& name) const;

  // `next` serves new requests from now on; `retired` (pools no longer in
  // it) drain.
  void Replace(std::shared_ptr<const ProfileSet> next, std::vector<std::shared_ptr<runtime::Pool>> retired);

  // The draining pools no request holds any more, taken out: the caller
  // destroys them (~Pool kills their zygotes and removes their groups).
  std::vector<std::shared_ptr<runtime::Pool>> TakeDrained();
  // The names of the pools draining now (a name twice when two of its
  // pools drain).
  std::vector<std::string> Draining() const;
  // The configurations of the pools draining now, for the fd budget.
  std::vector<runtime::PoolConfig> DrainingConfigs() const;

  // Every pool let go, the draining ones included: what the teardown
  // destroys once nothing runs.
  void Clear();

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const ProfileSet> current_;
  std::vector<std::shared_ptr<runtime::Pool>> draining_;
};

}  // namespace cubicle::rpc
