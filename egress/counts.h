// What gateways count for the daemon's metrics (docs/egress.md, "Metrics"):
// connections by decision and rule, and the bytes relayed each way. A
// gateway counts each connection when it ends, as it logs its decision.
//
// The labels are a bounded set fixed by the gateway's code, never a value
// a sandbox chose (a host name, a port): CountedRule maps each rule the
// gateway logs to one of them, and so does the launcher again when it
// reads a gateway's counts, since a gateway parses what sandboxes send
// and is trusted no further than that.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubicle::egress {

struct Counts {
  // (decision, rule) → connections ended.
  std::map<std::pair<std::string, std::string>, uint64_t> connections;
  uint64_t bytes_up = 0;    // sandbox → upstream
  uint64_t bytes_down = 0;  // upstream → sandbox

  // Counts one connection that ended.
  void Count(absl::string_view decision, absl::string_view rule, uint64_t up, uint64_t down);
  void Add(const Counts& other);
  // Each count the larger of the two: a gateway's counts only grow, so the
  // later of two readings wins even if one of them came back short.
  void Max(const Counts& other);
  bool operator==(const Counts& other) const = default;
};

// The decisions: "allow", "deny", "error", "none".
bool IsDecision(absl::string_view decision);

// The metric label of a logged rule: the rule itself where it is one of
// the gateway's fixed rules ("connect", "domain_allowlist",
// "address_class: loopback", ...); "pipe2" for that error (its log line
// names the errno); "none" for a connection that ended before a rule was
// reached; "other" for anything else.
absl::string_view CountedRule(absl::string_view rule);

// {"connections":[[DECISION,RULE,N],...],"bytes_up":N,"bytes_down":N}.
std::string CountsToJson(const Counts& counts);
// The inverse, for what a gateway process sends: at most kMaxCountEntries
// entries, every decision one of the four, every rule put through
// CountedRule (entries that then coincide are summed). InvalidArgument
// otherwise.
inline constexpr size_t kMaxCountEntries = 1024;
absl::StatusOr<Counts> CountsFromJson(absl::string_view text);

}  // namespace cubicle::egress
