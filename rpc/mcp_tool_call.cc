#include "rpc/mcp_tool_call.h"

#include <atomic>
#include <utility>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

// Progress notifications are rate-limited, as the spec asks.
constexpr absl::Duration kProgressInterval = absl::Milliseconds(100);
// A progress notification quotes at most this much of the latest output.
constexpr size_t kProgressMessageBytes = 512;

std::atomic<uint64_t> next_line_id{1};

// The daemon's reply line: its result, or its error.
Expected<json::value> ReadReply(const std::string& line) {
  boost::system::error_code ec;
  json::value v = json::parse(line, ec);
  const json::object* o = ec ? nullptr : v.if_object();
  if (o == nullptr) return Error{kInternalError, "the daemon's reply is not a JSON object", nullptr};
  if (const json::value* result = o->if_contains("result")) return *result;
  const json::value* error = o->if_contains("error");
  const json::object* e = error == nullptr ? nullptr : error->if_object();
  if (e == nullptr) return Error{kInternalError, "the daemon's reply has neither result nor error", nullptr};
  Error out;
  if (const json::value* code = e->if_contains("code"); code != nullptr && code->is_int64()) {
    out.code = static_cast<int>(code->as_int64());
  }
  if (const json::value* message = e->if_contains("message"); message != nullptr && message->is_string()) {
    out.message = std::string(message->as_string());
  }
  return out;
}

bool Ended(const json::value& status) {
  const json::object* o = status.if_object();
  const json::value* state = o == nullptr ? nullptr : o->if_contains("state");
  return state == nullptr || !state->is_string() || (state->as_string() != "queued" && state->as_string() != "running");
}

json::value ProgressToken(const Call& call) {
  const json::object* params = call.params.if_object();
  const json::value* meta = params == nullptr ? nullptr : params->if_contains("_meta");
  const json::value* token = meta == nullptr || !meta->is_object() ? nullptr : meta->as_object().if_contains("progressToken");
  if (token == nullptr || !(token->is_string() || token->is_int64() || token->is_uint64())) return nullptr;
  return *token;
}

}  // namespace

McpToolCall::McpToolCall(std::shared_ptr<McpSession> session, Call call, McpToolArgs args,
                         std::shared_ptr<McpOutput> out)
    : session_(std::move(session)),
      call_(std::move(call)),
      args_(std::move(args)),
      out_(std::move(out)),
      progress_token_(ProgressToken(call_)) {}

void McpToolCall::Start() {
  EnsureWorkspace([self = shared_from_this()] { self->Dispatch(); });
}

void McpToolCall::Cancel() {
  std::string exec_id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_ || finished_) return;
    cancelled_ = true;
    exec_id = exec_id_;
  }
  // Not started yet: StartRun cancels it once it has an id.
  if (!exec_id.empty()) Daemon("exec.cancel", json::object{{"exec_id", exec_id}}, [](Expected<json::value>) {});
}

void McpToolCall::Daemon(const std::string& method, json::object params, Then then,
                         std::function<void(const json::object&)> on_notification) {
  const json::value raw(std::move(params));
  if (session_->options_.authorize) {
    if (std::optional<std::string> refused = session_->options_.authorize(method, raw)) {
      return then(Error{kInvalidRequest, absl::StrCat("not allowed: ", *refused), nullptr});
    }
  }
  const std::string line = Request(json::value(next_line_id.fetch_add(1)), method, raw);
  std::function<void(std::string)> notify;  // null: the daemon sends none
  if (on_notification) {
    notify = [on_notification = std::move(on_notification)](std::string note) {
      boost::system::error_code ec;
      json::value v = json::parse(note, ec);
      const json::object* o = ec ? nullptr : v.if_object();
      const json::value* p = o == nullptr ? nullptr : o->if_contains("params");
      if (p != nullptr && p->is_object()) on_notification(p->as_object());
    };
  }
  session_->daemon_(line, [then = std::move(then)](std::string reply) { then(ReadReply(reply)); }, std::move(notify));
}

void McpToolCall::EnsureWorkspace(std::function<void()> then) {
  json::object params;
  if (!session_->options_.profile.empty()) params["profile"] = session_->options_.profile;
  if (std::string key = session_->workspace_key(); !key.empty()) params["session"] = key;
  Daemon("session.create", std::move(params),
         [self = shared_from_this(), then = std::move(then)](Expected<json::value> made) {
           if (!made.ok()) return self->Fail(made.error());
           const json::object* o = made->if_object();
           const json::value* key = o == nullptr ? nullptr : o->if_contains("session");
           if (key == nullptr || !key->is_string()) {
             return self->Fail(Error{kInternalError, "session.create answered without a session", nullptr});
           }
           self->key_ = std::string(key->as_string());
           {
             std::lock_guard<std::mutex> lock(self->session_->mu_);
             self->session_->key_ = self->key_;
           }
           then();
         });
}

void McpToolCall::Dispatch() {
  bool cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled = cancelled_;
  }
  if (cancelled) return Finish(McpToolError("cancelled"));  // never sent: the call was cancelled
  switch (args_.tool) {
    case McpTool::kRunPython:
    case McpTool::kRunShell:
      return ListBefore();
    case McpTool::kReadFile:
      return FilesCall("files.get", json::object{{"path", args_.path}}, McpReadFileResult);
    case McpTool::kWriteFile:
      return FilesCall("files.put", json::object{{"path", args_.path}, {"data", absl::Base64Escape(args_.data)}},
                       McpWriteFileResult);
    case McpTool::kCallSkill:
      return CallSkill();
    case McpTool::kListFiles: {
      json::object params{{"recursive", args_.recursive}};
      if (!args_.path.empty()) params["path"] = args_.path;
      return FilesCall("files.list", std::move(params), McpListFilesResult);
    }
  }
}

void McpToolCall::FilesCall(const std::string& method, json::object params, json::object (*shape)(const json::value&)) {
  params["session"] = key_;
  Daemon(method, std::move(params), [self = shared_from_this(), shape](Expected<json::value> answer) {
    if (!answer.ok()) return self->Fail(answer.error());
    self->Finish(shape(*answer));
  });
}

std::vector<std::string> McpToolCall::RunArgv() const {
  if (args_.tool == McpTool::kRunShell) return {"/bin/sh", "-c", args_.source};
  std::vector<std::string> argv = session_->options_.python;
  argv.push_back("-c");
  argv.push_back(args_.source);
  return argv;
}

// What the workspace holds before the run, to tell what it changed. A
// listing that fails leaves files_changed unknown, never the run undone.
void McpToolCall::ListBefore() {
  Daemon("files.list", json::object{{"session", key_}, {"recursive", true}},
         [self = shared_from_this()](Expected<json::value> listed) {
           self->StartRun(listed.ok() ? ReadMcpListing(*listed) : McpListing{});
         });
}

void McpToolCall::StartRun(McpListing before) {
  json::array argv;
  for (const std::string& arg : RunArgv()) argv.push_back(json::string(arg));
  json::object params{{"session", key_}, {"argv", std::move(argv)}};
  if (args_.timeout_ms.has_value()) params["timeout_ms"] = *args_.timeout_ms;
  Daemon("exec.start", std::move(params),
         [self = shared_from_this(), before = std::move(before)](Expected<json::value> started) mutable {
           if (!started.ok()) return self->Fail(started.error());
           const json::value* id = started->is_object() ? started->as_object().if_contains("exec_id") : nullptr;
           if (id == nullptr || !id->is_string()) {
             return self->Fail(Error{kInternalError, "exec.start answered without an exec_id", nullptr});
           }
           bool cancelled;
           {
             std::lock_guard<std::mutex> lock(self->mu_);
             self->exec_id_ = std::string(id->as_string());
             cancelled = self->cancelled_;
           }
           // Cancelled while it was being started: cancelled now.
           if (cancelled) {
             self->Daemon("exec.cancel", json::object{{"exec_id", self->exec_id_}}, [](Expected<json::value>) {});
           }
           self->FollowRun(std::move(before));
         });
}

void McpToolCall::FollowRun(McpListing before) {
  std::function<void(const json::object&)> on_output;
  if (!progress_token_.is_null()) on_output = [self = shared_from_this()](const json::object& o) { self->Progress(o); };
  Daemon(
      "exec.follow", json::object{{"exec_id", exec_id_}},
      [self = shared_from_this(), before = std::move(before)](Expected<json::value> status) mutable {
        if (!status.ok()) return self->Fail(status.error());
        // A follow answered before the run ended: the daemon was cut off
        // (a drain's deadline) and ends every follow at once.
        if (!Ended(*status)) {
          return self->Fail(Error{kShuttingDown, "the daemon stopped following the run: it is shutting down", nullptr});
        }
        const json::value* result = status->as_object().if_contains("result");
        if (result == nullptr) return self->Fail(Error{kShuttingDown, "the run was cancelled before it started", nullptr});
        self->ListAfter(std::move(before), *result);
      },
      std::move(on_output));
}

void McpToolCall::ListAfter(McpListing before, json::value run) {
  Daemon("files.list", json::object{{"session", key_}, {"recursive", true}},
         [self = shared_from_this(), before = std::move(before), run = std::move(run)](Expected<json::value> listed) {
           json::value changed = listed.ok() ? json::value(McpFilesChanged(before, ReadMcpListing(*listed)))
                                             : json::value(listed.error().message);
           self->Finish(McpRunResult(run, changed));
         });
}

void McpToolCall::Progress(const json::object& output) {
  const json::value* data = output.if_contains("data");
  std::string text = data != nullptr && data->is_string() ? std::string(data->as_string()) : std::string();
  if (const json::value* b64 = output.if_contains("data_base64"); b64 != nullptr && b64->is_string()) {
    absl::Base64Unescape(std::string(b64->as_string()), &text);
  }
  const uint64_t bytes = text.size();
  if (text.size() > kProgressMessageBytes) text = text.substr(text.size() - kProgressMessageBytes);
  // Under the lock that Finish takes: no progress after the reply (the
  // token is no longer active then).
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_ || cancelled_ || bytes == 0) return;
  progress_ += bytes;
  // At most one notification per kProgressInterval: the bytes of those
  // skipped count in the next, and all of the output is in the result.
  const absl::Time now = absl::Now();
  if (now - last_progress_ < kProgressInterval) return;
  last_progress_ = now;
  out_->Notify(Notification("notifications/progress", json::object{{"progressToken", progress_token_},
                                                                    {"progress", progress_},
                                                                    {"message", std::move(text)}}));
}

// A skill's progress notification (skill.progress's params) as MCP
// progress: a count that only grows, and the skill's own params as the
// message. Not rate-limited: the skill chose when to report.
void McpToolCall::SkillProgress(const json::object& note) {
  const json::value* p = note.if_contains("params");
  std::string message = json::serialize(p != nullptr ? *p : json::value(nullptr));
  if (message.size() > kProgressMessageBytes) message.resize(kProgressMessageBytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_ || cancelled_) return;
  ++progress_;
  out_->Notify(Notification("notifications/progress", json::object{{"progressToken", progress_token_},
                                                                    {"progress", progress_},
                                                                    {"message", std::move(message)}}));
}

// call_skill: skill.call by name, in the skill's own profile and sandbox
// (the session's workspace is not attached). A cancelled call gets no
// reply; the skill runs on to its answer or its timeout.
void McpToolCall::CallSkill() {
  json::object params{{"skill", args_.skill}, {"method", args_.method}};
  if (!args_.params.is_null()) params["params"] = args_.params;
  if (args_.timeout_ms.has_value()) params["timeout_ms"] = *args_.timeout_ms;
  std::function<void(const json::object&)> on_note;
  if (!progress_token_.is_null()) {
    params["progress_token"] = "mcp";
    on_note = [self = shared_from_this()](const json::object& note) { self->SkillProgress(note); };
  }
  Daemon(
      "skill.call", std::move(params),
      [self = shared_from_this()](Expected<json::value> answer) {
        if (!answer.ok()) return self->Fail(answer.error());
        self->Finish(McpCallSkillResult(*answer));
      },
      std::move(on_note));
}

void McpToolCall::Fail(const Error& error) { Finish(McpToolError(error.message)); }

void McpToolCall::Finish(json::object result) {
  bool cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    cancelled = cancelled_;
  }
  session_->Finished(shared_from_this(), cancelled ? std::nullopt : std::optional<json::object>(std::move(result)));
}

}  // namespace cubicle::rpc
