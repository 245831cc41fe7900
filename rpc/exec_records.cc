// exec.list and exec.logs, and exec.status of executions only the durable
// records still hold (docs/protocol.md, "Managed executions"): what a
// client can ask about its executions after they ended, or after the
// daemon restarted.
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "rpc/daemon.h"
#include "rpc/execution.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

constexpr size_t kDefaultListLimit = 50;
constexpr size_t kMaxListLimit = 1000;
constexpr int64_t kDefaultLogBytes = 64 << 10;
constexpr int64_t kMaxLogBytes = 4 << 20;

json::value ParsedOrText(const std::string& text) {
  if (text.empty()) return nullptr;
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  return ec ? json::value(text) : v;
}

// A stream's bytes as a sandbox.run result holds them: text, or base64
// when they were not UTF-8.
std::string StreamOfResult(const json::value& result, bool stdout_stream) {
  const json::object* r = result.if_object();
  if (r == nullptr) return "";
  const char* name = stdout_stream ? "stdout" : "stderr";
  if (const json::value* text = r->if_contains(name); text != nullptr && text->is_string()) {
    return std::string(text->as_string());
  }
  std::string bytes;
  const json::value* b64 = r->if_contains(absl::StrCat(name, "_base64"));
  if (b64 != nullptr && b64->is_string() && absl::Base64Unescape(std::string(b64->as_string()), &bytes)) return bytes;
  return "";
}

json::object RecordJson(const sessions::ExecRecord& r) {
  json::object out{{"exec_id", r.id}, {"state", r.state}, {"created_ms", r.created_ms}};
  if (!r.session.empty()) out["session"] = r.session;
  if (r.finished_ms != 0) out["finished_ms"] = r.finished_ms;
  if (r.state == "done" || r.state == "lost") out["result"] = ParsedOrText(r.result);
  return out;
}

}  // namespace

std::optional<json::value> Daemon::RecordedStatus(const json::value& raw) {
  if (records_ == nullptr || !raw.is_object()) return std::nullopt;
  const json::value* id = raw.as_object().if_contains("exec_id");
  if (id == nullptr || !id->is_string()) return std::nullopt;
  absl::StatusOr<std::optional<sessions::ExecRecord>> r = records_->GetExec(std::string(id->as_string()));
  if (!r.ok() || !r->has_value()) return std::nullopt;
  return json::value(RecordJson(**r));
}

Expected<json::value> Daemon::ExecList(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"session", "limit", "before"})) return *bad;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> session, GetString(*params, "session", false));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> limit, GetInt64(*params, "limit", false, 1, kMaxListLimit));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> before, GetString(*params, "before", false));
  const size_t n = static_cast<size_t>(limit.value_or(kDefaultListLimit));
  json::array out;
  if (records_ != nullptr) {
    absl::StatusOr<std::vector<sessions::ExecRecord>> list =
        records_->ListExecs(session.value_or(""), n, before.value_or(""));
    if (!list.ok()) return Error{kInternalError, std::string(list.status().message()), nullptr};
    for (const sessions::ExecRecord& r : *list) {
      json::object item = RecordJson(r);
      item.erase("result");  // exec.status has it; a list stays small
      out.push_back(std::move(item));
    }
  } else {
    // Without records, what memory holds (exec.start's executions).
    std::lock_guard<std::mutex> lock(exec_mu_);
    for (auto it = executions_.rbegin(); it != executions_.rend() && out.size() < n; ++it) {
      if (session.has_value() || (before.has_value() && it->first >= *before)) continue;
      out.push_back(json::object{{"exec_id", it->first}, {"state", it->second->state}});
    }
  }
  json::object reply{{"executions", out}};
  if (out.size() == n) reply["next_before"] = out.back().as_object().at("exec_id");
  return json::value(std::move(reply));
}

Expected<std::string> Daemon::ExecOutput(const std::string& id, bool stdout_stream, bool* ended) {
  {
    std::lock_guard<std::mutex> lock(exec_mu_);
    auto it = executions_.find(id);
    if (it != executions_.end()) {
      const Execution& e = *it->second;
      *ended = e.ended();
      if (!e.ended()) {
        std::lock_guard<std::mutex> live_lock(e.live->mu);
        return stdout_stream ? e.live->out : e.live->err;
      }
      return StreamOfResult(e.result, stdout_stream);
    }
  }
  if (records_ == nullptr) return Error{kNotFound, absl::StrCat("no execution '", id, "'"), nullptr};
  absl::StatusOr<std::optional<sessions::ExecRecord>> r = records_->GetExec(id);
  if (!r.ok()) return Error{kInternalError, std::string(r.status().message()), nullptr};
  if (!r->has_value()) return Error{kNotFound, absl::StrCat("no execution '", id, "'"), nullptr};
  const sessions::ExecRecord& rec = **r;
  *ended = rec.state != "queued" && rec.state != "running";
  return StreamOfResult(ParsedOrText(rec.result), stdout_stream);
}

Expected<json::value> Daemon::ExecLogs(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"exec_id", "stream", "offset", "max_bytes"})) return *bad;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> id, GetString(*params, "exec_id", true));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> stream, GetString(*params, "stream", false));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> offset, GetInt64(*params, "offset", false, 0));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> max_bytes,
                               GetInt64(*params, "max_bytes", false, 1, kMaxLogBytes));
  const std::string which = stream.value_or("stdout");
  if (which != "stdout" && which != "stderr") return InvalidParam("params", "stream", "must be stdout or stderr");
  bool ended = false;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::string text, ExecOutput(*id, which == "stdout", &ended));
  const size_t from = std::min<size_t>(static_cast<size_t>(offset.value_or(0)), text.size());
  const size_t n = std::min<size_t>(text.size() - from, static_cast<size_t>(max_bytes.value_or(kDefaultLogBytes)));
  const size_t next = from + n;
  return json::value(json::object{{"exec_id", *id},
                                  {"stream", which},
                                  {"offset", from},
                                  {"data", text.substr(from, n)},
                                  {"next_offset", next},
                                  {"eof", ended && next == text.size()}});
}

}  // namespace cubicle::rpc
