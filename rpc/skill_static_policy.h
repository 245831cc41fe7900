// The static policy of Python skills as the daemon applies it
// (docs/skills.md, "Static policy"; the policy and the checker are
// skills/static_policy.h's). Each Python skill whose profile has a
// policy is checked once, when the skills directory is loaded — so a call
// pays nothing for it — by the checker run in a sandbox of that profile:
// never in the daemon's own process and never unsandboxed, since scripts
// may be model-written. The scripts of one profile go to one sandbox a
// batch at a time; verdicts are kept by (skill id, policy, interpreter),
// so a reload checks only what changed. A check that cannot be made
// (timeout, crash, no python) leaves its skills out, saying why: the
// policy fails closed.
//
// A skill whose verdict is not ok stays listed, with its violations, and
// skill.call refuses it before anything runs (StaticPolicyRefusal).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpc/config.h"
#include "rpc/jsonrpc.h"
#include "runtime/capture.h"
#include "skills/skill.h"

namespace cubicle::rpc {

// Runs the checker's command `argv` with `stdin_data` in a sandbox of
// `profile`, its output captured.
using StaticCheckRunner = std::function<absl::StatusOr<runtime::CapturedRun>(
    const Profile& profile, const std::vector<std::string>& argv, const std::string& stdin_data)>;

// A sandbox of the profile made for the check — not one of its pool's: a
// load takes no zygote a call waits for, and the pool's counts stay the
// calls' — narrowed to no network, with `timeout` and small output
// budgets.
StaticCheckRunner SandboxedStaticCheck(absl::Duration timeout);

// The checker's command in `profile`: its warm interpreter's argv (the
// Python its skills run with, whose grammar decides what parses) or
// `python3 -I`, then `-c PROGRAM`.
std::vector<std::string> StaticCheckerArgv(const Profile& profile);

class StaticPolicyChecks {
 public:
  // Scripts per sandbox, and their bytes together, at most.
  static constexpr size_t kBatchScripts = 16;
  static constexpr size_t kBatchBytes = 1 << 20;
  // A load's checks in all, at most: past it, what is left fails closed
  // without running (a bound on how long a start or reload can stall).
  static constexpr absl::Duration kLoadDeadline = absl::Seconds(60);

  explicit StaticPolicyChecks(StaticCheckRunner run) : run_(std::move(run)) {}

  // skills::LoadOptions::check_all: sets the verdict of each Python skill
  // whose profile (found by `profiles`; every skill passed CheckSkillFits)
  // has a policy, from the cache or a sandbox's check; an error for each
  // one whose check could not be made. The cache then holds this load's
  // verdicts only. One load at a time (the daemon's reloads are serial).
  std::vector<absl::Status> CheckAll(const std::vector<skills::Skill*>& skills,
                                     const std::function<const Profile*(const std::string&)>& profiles);

  // What the last load did: {"checked", "cached", "denied", "failed",
  // "sandboxes", "ms"}.
  boost::json::object LastLoad() const;
  // "static policy: 3 skill(s) checked in 1 sandbox(es) (41 ms), 2 from
  // the cache, 1 denied"; "" when no skill has a policy.
  std::string LastLoadSummary() const;

 private:
  struct Pending {
    size_t index;  // in CheckAll's skills
    const Profile* profile;
    std::string key;  // of the cache; "" when the skill has no id
  };
  // One batch's verdicts, or why it could not be checked. A batch whose
  // checker failed (rather than its sandbox) is split in two and each
  // half tried again, so that one script that breaks the checker fails
  // only itself.
  void CheckBatch(const std::vector<skills::Skill*>& skills, const std::vector<Pending>& batch,
                  std::vector<absl::Status>* out, std::map<std::string, skills::StaticVerdict>* cache);
  absl::StatusOr<std::vector<skills::StaticVerdict>> RunChecker(const Profile& profile,
                                                                const std::vector<absl::string_view>& scripts);

  StaticCheckRunner run_;
  absl::Time deadline_;  // of the load CheckAll is making
  mutable std::mutex mu_;
  std::map<std::string, skills::StaticVerdict> cache_;
  struct Counts {
    size_t checked = 0, cached = 0, denied = 0, failed = 0, sandboxes = 0;
    absl::Duration took;
  } last_;
};

// skill.call's refusal of `skill` in `profile` (the one serving the
// call), or none. A skill denied by the policy is kStaticPolicyDenied
// naming the first violation, the rest in data; one not yet checked
// against the profile's current policy (a reload between its profiles
// and its skills) is kBusy, to be tried again.
std::optional<Error> StaticPolicyRefusal(const skills::Skill& skill, const Profile& profile);

}  // namespace cubicle::rpc
