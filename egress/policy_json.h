// The network policy as JSON: the `network` key of a daemon profile and of
// a `sandbox.run` request (docs/egress.md).
//
//   "network": "none"
//   "network": {"mode": "allowlist", "allow_domains": ["pypi.org", "*.pythonhosted.org"],
//               "allow_ports": [443], "allow_cidrs": ["10.20.0.0/16"],
//               "resolve": ["mirror.internal=10.20.0.5"], "max_connections": 16,
//               "max_bytes": "512M", "idle_timeout_ms": 30000, "bridge_port": 18118,
//               "log": "/var/log/cubicle/egress.jsonl"}
#pragma once

#include <string>

#include <boost/json/value.hpp>

#include "absl/status/statusor.h"
#include "egress/policy.h"

namespace cubicle::egress {

// Keys absent from `v` keep their value in `base` (a profile's policy, for
// a request; the default Policy, for a profile); "mode" defaults to
// allowlist when the object names any domain. Errors are InvalidArgument
// naming the JSON path: "profiles.py.network.allow_ports[1]: port '0': ...".
// Unknown keys are errors.
absl::StatusOr<Policy> PolicyFromJson(const boost::json::value& v, const std::string& path, const Policy& base);

// The same form back (what the launcher sends its gateway process):
// PolicyFromJson(PolicyToJson(p), ..., {}) == p for any valid allowlist
// (idle timeouts in whole milliseconds).
boost::json::value PolicyToJson(const Policy& policy);

}  // namespace cubicle::egress
