// Machine-readable renderings of runtime results, shared by the CLI's
// --json-status and the daemon's replies (nothing below rpc/ knows JSON).
#pragma once

#include <boost/json/object.hpp>

#include "runtime/probe.h"
#include "runtime/result.h"

namespace cubicle::rpc {

// The --json-status document; docs/cli.md lists its keys.
boost::json::object ResultToJson(const runtime::ExecResult& result);

boost::json::object ProbeToJson(const runtime::ProbeReport& report);

}  // namespace cubicle::rpc
