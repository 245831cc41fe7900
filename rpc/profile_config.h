// The profiles of the daemon's configuration (docs/config.md, "profiles"):
// each a named SandboxSpec template with its pool, read and validated key
// by key. Used by rpc/config.cc, which reads the rest of the document; the
// limits and environment readers are shared with a request's "limits" and
// the NPU broker's jobs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/value.hpp>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cgroups/limits.h"
#include "rpc/config.h"

namespace cubicle::rpc {

// "profiles": {NAME: profile, ...}, checked against config->ceiling and
// added to config->profiles.
absl::Status ParseProfiles(const boost::json::value& v, DaemonConfig* config);

// How a limit says "no limit" in a ceiling, a profile or a request, as
// `cubicle run --memory unlimited` does: an unset limit is not one (it
// takes the ceiling's, and an unset ceiling the built-in default).
inline constexpr char kUnlimited[] = "unlimited";

// A "limits" object (memory, memory_high, pids, cpus, cpu_weight) at
// `path`, each value at most `ceiling`'s. memory, memory_high and pids may
// be "unlimited" (left unset in `limits`, and their keys added to
// `unlimited` when given) where `ceiling` sets none of that kind.
absl::Status ParseLimits(const boost::json::value& v, absl::string_view path, const cgroups::Limits& ceiling,
                         cgroups::Limits* limits, std::vector<std::string>* unlimited = nullptr);

// A size (memory), or a whole number of pids, or "unlimited" (nullopt).
absl::StatusOr<std::optional<uint64_t>> SizeOrUnlimited(const boost::json::value& v, absl::string_view path);
absl::StatusOr<std::optional<uint64_t>> PidsOrUnlimited(const boost::json::value& v, absl::string_view path);

// {"NAME": "value"}: replaces NAME in `env`, or is added, in order.
// A "breakers" object (a profile's, or a request's) into `b`, over what it
// holds; errors name `path`.
absl::Status ParseBreakers(const boost::json::value& v, absl::string_view path, runtime::BreakerSpec* b);

absl::Status ParseEnv(const boost::json::value& v, absl::string_view path, std::vector<std::string>* env);

}  // namespace cubicle::rpc
