// Machine-readable renderings of runtime results, shared by the CLI's
// --json-status and the daemon's replies (nothing below rpc/ knows JSON).
#pragma once

#include <boost/json/object.hpp>

#include "absl/strings/string_view.h"
#include "runtime/probe.h"
#include "runtime/result.h"

namespace cubicle::rpc {

// The --json-status document; docs/cli.md lists its keys.
boost::json::object ResultToJson(const runtime::ExecResult& result);

boost::json::object ProbeToJson(const runtime::ProbeReport& report);

// Whether `s` is well-formed UTF-8 (output goes out as text when it is,
// else as base64).
bool ValidUtf8(absl::string_view s);
// The length of `s` without a UTF-8 sequence that it ends in the middle of
// (at most 3 bytes held back), so that a stream cut into pieces never
// splits a character; `s.size()` when it ends on a boundary or is not
// UTF-8 there anyway.
size_t Utf8Boundary(absl::string_view s);

}  // namespace cubicle::rpc
