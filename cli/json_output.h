// Machine-readable renderings of runtime results (the CLI's edge: nothing
// below cli/ and rpc/ knows about JSON).
#pragma once

#include <boost/json/object.hpp>

#include "runtime/probe.h"
#include "runtime/result.h"

namespace cubicle::cli {

// The --json-status document; docs/cli.md lists its keys.
boost::json::object ResultToJson(const runtime::ExecResult& result);

boost::json::object ProbeToJson(const runtime::ProbeReport& report);

}  // namespace cubicle::cli
