// What skill.call's routes share (rpc/run_methods.cc, rpc/skill_calls.cc,
// rpc/skill_session_methods.cc): reading the skill's request from params,
// and the answer or the error a call returns.
#pragma once

#include <cstdint>
#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "rpc/jsonrpc.h"
#include "rpc/skill_process.h"
#include "runtime/result.h"
#include "skills/skill.h"

namespace cubicle::rpc {

// The longest stdout line a skill may write (its response among them).
inline constexpr size_t kMaxSkillLine = 4 << 20;

// One request to a skill: what it receives, where its notifications
// (progress) go, and how deep in a chain of skill calls it is.
struct SkillInvocation {
  std::string method;
  boost::json::value params;  // null, an object or an array
  // Each notification the skill sends before its response (the skill's
  // whole JSON-RPC notification); null: dropped.
  std::function<void(const boost::json::object&)> progress;
  uint32_t depth = 0;  // 0: a client's call; a skill's callee is its caller's + 1
  std::string client;  // who the chain of calls serves (the audit's)
};

// Who a skill process serves, for the calls it makes (rpc/skill_calls.cc).
struct SkillCaller {
  std::shared_ptr<const skills::Skill> skill;  // null: a skill by argv, which may call none
  std::string request_id;
  std::string client;
  uint32_t depth = 0;
  std::atomic<uint32_t> calls{0};  // made so far
};

// "method" (required) and "params" (an object or an array) of a call's
// params.
Expected<SkillInvocation> ReadSkillRequest(const boost::json::object& params);

// Text when it is UTF-8, else base64.
boost::json::value TextOrBase64(const std::string& data);

// How a failed run (not a failed payload: that is a result) is answered.
Error FromRunStatus(const absl::Status& st);

// The call's error when the skill gave no response: why, with the skill's
// status and the tails of its output.
Error SkillFailed(const runtime::ExecResult& r, const std::string& out, const std::string& err, bool overlong,
                  absl::Duration timeout);

struct SkillAnswer {
  boost::json::object response;  // the skill's JSON-RPC response
  boost::json::value logs;       // its stderr
  bool logs_truncated = false;
  boost::json::value stdout_logs;
  absl::Duration wall;
  uint64_t notifications = 0;
};
// skill.call's result: {"result"} or {"error"} as the skill answered, logs,
// logs_truncated, stdout_logs, notifications, wall_ms, profile, and for a
// skill by name "skill": {"name", "version", "id"}.
boost::json::object SkillAnswerJson(const SkillAnswer& answer, const std::string& profile,
                                    const skills::Skill* skill);

// A call on a skill process that got no answer: -32007 saying why (its
// timeout, the process's end, an over-long line), -32000 for a process
// answering another call.
Error SkillProcessFailed(const SkillProcess::CallOutcome& outcome, const SkillProcess::Ended& ended,
                         absl::Duration timeout);

// What a sandbox used, as accounted when it ended: user_ms, system_ms,
// and with a cgroup memory_peak_bytes and cpu_usage_ns.
boost::json::object UsageJson(const runtime::ExecResult& r);

}  // namespace cubicle::rpc
