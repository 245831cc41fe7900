// files.put, files.get, files.list, files.stat, files.delete on a session's
// workspace (docs/protocol.md, "Files"). Every path is resolved by the
// kernel beneath the workspace (sessions/paths.h), whatever its payloads
// planted there. Writes hold the session's workspace lease like an
// execution (they wait their turn behind it, or fail at once with
// "wait": false); reads do not. All run on the slow pool: moving 20 MB in
// base64 must not hold a transport's thread.
#include <boost/asio/post.hpp>
#include <boost/json/object.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "rpc/daemon.h"
#include "sessions/workspace_files.h"

namespace cubicle::rpc {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr size_t kMaxListEntries = 10'000;

const char* TypeName(sessions::FileInfo::Type type) {
  switch (type) {
    case sessions::FileInfo::Type::kFile: return "file";
    case sessions::FileInfo::Type::kDirectory: return "directory";
    case sessions::FileInfo::Type::kSymlink: return "symlink";
    case sessions::FileInfo::Type::kOther: return "other";
  }
  return "other";
}

json::object FileJson(const sessions::FileInfo& f) {
  json::object out{{"path", f.path}, {"type", TypeName(f.type)}, {"size", f.size},
                   {"mode", f.mode},  {"mtime_ns", f.mtime_ns}};
  if (!f.sha256.empty()) out["sha256"] = f.sha256;
  return out;
}

Error FilesError(const absl::Status& s) {
  std::string m(s.message());
  if (absl::IsNotFound(s)) return Error{kNotFound, m, nullptr};
  if (absl::IsResourceExhausted(s)) return Error{kLimitExceeded, m, nullptr};
  if (absl::IsInvalidArgument(s) || absl::IsFailedPrecondition(s) || absl::IsAlreadyExists(s) ||
      absl::IsPermissionDenied(s) || absl::IsOutOfRange(s)) {
    return Error{kInvalidParams, m, nullptr};
  }
  return Error{kInternalError, m, nullptr};
}

bool Writes(const std::string& method) { return method == "files.put" || method == "files.delete"; }

}  // namespace

Expected<json::value> Daemon::FilesAnswer(const Call& call, int root) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(call.params));
  const SessionsConfig& c = config_.sessions;
  sessions::WorkspaceFiles files(root, {});
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> path, GetString(*params, "path", call.method != "files.list"));
  const std::string where = path.value_or("");
  if (call.method == "files.put") {
    if (auto bad = RejectUnknown(*params, {"session", "path", "data", "mode", "overwrite", "wait"})) return *bad;
    // Read in place: a copy of megabytes of base64 costs page faults.
    const json::value* data64 = FindParam(*params, "data");
    if (data64 == nullptr || !data64->is_string()) return InvalidParam("params", "data", "must be a base64 string");
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> mode, GetInt64(*params, "mode", false, 0, 0777));
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<bool> overwrite, GetBool(*params, "overwrite", false));
    std::string data;
    const json::string& text = data64->get_string();
    if (!absl::Base64Unescape(absl::string_view(text.data(), text.size()), &data)) {
      return InvalidParam("params", "data", "is not base64");
    }
    sessions::PutOptions options;
    options.mode = static_cast<uint32_t>(mode.value_or(0644));
    options.overwrite = overwrite.value_or(true);
    options.max_bytes = c.max_file_bytes;
    if (absl::Status s = files.Put(where, data, options); !s.ok()) return FilesError(s);
    return json::value(json::object{{"path", where}, {"size", data.size()}});
  }
  if (call.method == "files.get") {
    if (auto bad = RejectUnknown(*params, {"session", "path"})) return *bad;
    absl::StatusOr<std::string> data = files.Get(where, c.max_file_bytes);
    if (!data.ok()) return FilesError(data.status());
    return json::value(json::object{{"path", where}, {"size", data->size()}, {"data", absl::Base64Escape(*data)}});
  }
  if (call.method == "files.stat") {
    if (auto bad = RejectUnknown(*params, {"session", "path", "sha256"})) return *bad;
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<bool> sha, GetBool(*params, "sha256", false));
    absl::StatusOr<sessions::FileInfo> info = files.Stat(where, sha.value_or(false));
    if (!info.ok()) return FilesError(info.status());
    return json::value(FileJson(*info));
  }
  if (call.method == "files.list") {
    if (auto bad = RejectUnknown(*params, {"session", "path", "recursive"})) return *bad;
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<bool> recursive, GetBool(*params, "recursive", false));
    absl::StatusOr<std::vector<sessions::FileInfo>> list = files.List(where, recursive.value_or(false), kMaxListEntries);
    if (!list.ok()) return FilesError(list.status());
    json::array out;
    for (const sessions::FileInfo& f : *list) out.push_back(FileJson(f));
    return json::value(json::object{{"path", where}, {"entries", std::move(out)}});
  }
  if (auto bad = RejectUnknown(*params, {"session", "path", "recursive", "wait"})) return *bad;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<bool> recursive, GetBool(*params, "recursive", false));
  if (absl::Status s = files.Delete(where, recursive.value_or(false)); !s.ok()) return FilesError(s);
  return json::value(json::object{{"path", where}, {"deleted", true}});
}

void Daemon::FilesMethod(Request request) {
  struct Target {
    std::string key;
    bool wait = true;
  };
  Expected<Target> target = Guarded([&]() -> Expected<Target> {
    CUBICLE_RPC_ASSIGN_OR_RETURN(SessionTable * table, Sessions());
    CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(request.call.params));
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> key, GetString(*params, "session", true));
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<bool> wait, GetBool(*params, "wait", false));
    if (absl::StatusOr<SessionInfo> info = table->Get(*key); !info.ok()) {
      return Error{kNotFound, std::string(info.status().message()), nullptr};
    }
    return Target{*key, wait.value_or(true)};
  });
  if (!target.ok()) return request.replies->Add(ReplyTo(request.call, std::move(target).error()));
  const std::string key = target.value().key;
  auto answer = [this, key](Request request, std::shared_ptr<WorkspaceLeases::Lease> lease) mutable {
    request.cancel->Clear();
    asio::post(slow_, [this, key, request = std::move(request), lease = std::move(lease)]() mutable {
      Expected<json::value> result = Guarded([&]() -> Expected<json::value> {
        absl::StatusOr<int> root = sessions_->Root(key);
        if (!root.ok()) return Error{kNotFound, std::string(root.status().message()), nullptr};
        sessions_->Touch(key);
        return FilesAnswer(request.call, *root);
      });
      lease.reset();  // free before the reply: the client may go on at once
      Finish(request, std::move(result));
    });
  };
  if (Writes(request.call.method)) return AdmitToSession(std::move(request), key, target.value().wait, answer);
  Defer(request);
  answer(std::move(request), nullptr);
}

}  // namespace cubicle::rpc
