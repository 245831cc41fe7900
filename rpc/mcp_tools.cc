#include "rpc/mcp_tools.h"

#include <algorithm>
#include <utility>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

constexpr absl::string_view kWorkspace = "/workspace";
// What a run's text summary quotes of each stream at most: the whole
// stream is in structuredContent.
constexpr size_t kSummaryBytes = 16 << 10;

// The schemas are written as JSON, the form a reader checks them in.
constexpr char kRunOutputSchema[] = R"json({
  "type": "object",
  "properties": {
    "exit_code": {"type": ["integer", "null"], "description": "The exit status; null when it did not exit (a signal, a timeout)"},
    "signal": {"type": ["integer", "null"], "description": "The signal that ended it, if one did"},
    "reason": {"type": "string", "description": "Why it ended: exited, signaled, timeout, oom, killed, setup_failed, breaker_cpu, breaker_memory, breaker_io"},
    "timed_out": {"type": "boolean"},
    "stdout": {"type": "string", "description": "What it wrote to stdout (bytes that are not UTF-8 shown as U+FFFD)"},
    "stderr": {"type": "string"},
    "stdout_truncated": {"type": "boolean", "description": "stdout went past the capture budget; the rest was dropped"},
    "stderr_truncated": {"type": "boolean"},
    "wall_ms": {"type": "number"},
    "error": {"type": "string", "description": "Why it could not start (reason setup_failed)"},
    "files_changed": {
      "type": "array",
      "description": "Regular files under /workspace this call created, modified or deleted (paths relative to /workspace)",
      "items": {
        "type": "object",
        "properties": {
          "path": {"type": "string"},
          "change": {"type": "string", "enum": ["created", "modified", "deleted"]},
          "size": {"type": "integer"}
        },
        "required": ["path", "change"]
      }
    },
    "files_changed_error": {"type": "string", "description": "Why files_changed could not be told"}
  },
  "required": ["exit_code", "reason", "timed_out", "stdout", "stderr", "files_changed"]
})json";

constexpr char kTools[] = R"json([
  {
    "name": "run_python",
    "title": "Run Python",
    "description": "Runs Python 3 code in a fresh, isolated sandbox (no network) with cwd /workspace, a directory that persists across calls of this MCP session: files written there are seen by later calls. Returns the exit code, stdout, stderr and the files the code changed.",
    "inputSchema": {
      "type": "object",
      "properties": {
        "code": {"type": "string", "description": "The program, run as python3 -c CODE"},
        "timeout_ms": {"type": "integer", "minimum": 1, "description": "Wall-clock limit (default and ceiling: the server's profile)"}
      },
      "required": ["code"],
      "additionalProperties": false
    }
  },
  {
    "name": "run_shell",
    "title": "Run a shell command",
    "description": "Runs a command with /bin/sh -c in a fresh, isolated sandbox (no network) with cwd /workspace, a directory that persists across calls of this MCP session. Returns the exit code, stdout, stderr and the files the command changed.",
    "inputSchema": {
      "type": "object",
      "properties": {
        "command": {"type": "string", "description": "The command line, run as sh -c COMMAND"},
        "timeout_ms": {"type": "integer", "minimum": 1, "description": "Wall-clock limit (default and ceiling: the server's profile)"}
      },
      "required": ["command"],
      "additionalProperties": false
    }
  },
  {
    "name": "read_file",
    "title": "Read a file",
    "description": "Reads a file of the session's /workspace. Text comes back as content, anything that is not UTF-8 as content_base64.",
    "inputSchema": {
      "type": "object",
      "properties": {
        "path": {"type": "string", "description": "Relative to /workspace, or an absolute path under /workspace"}
      },
      "required": ["path"],
      "additionalProperties": false
    },
    "outputSchema": {
      "type": "object",
      "properties": {
        "path": {"type": "string"},
        "size": {"type": "integer"},
        "content": {"type": "string"},
        "content_base64": {"type": "string"}
      },
      "required": ["path", "size"]
    }
  },
  {
    "name": "write_file",
    "title": "Write a file",
    "description": "Writes a file of the session's /workspace (missing directories are made, an existing file replaced). Give content (text) or content_base64 (bytes).",
    "inputSchema": {
      "type": "object",
      "properties": {
        "path": {"type": "string", "description": "Relative to /workspace, or an absolute path under /workspace"},
        "content": {"type": "string", "description": "The file's text (UTF-8)"},
        "content_base64": {"type": "string", "description": "The file's bytes in base64 (instead of content)"}
      },
      "required": ["path"],
      "additionalProperties": false
    },
    "outputSchema": {
      "type": "object",
      "properties": {"path": {"type": "string"}, "size": {"type": "integer"}},
      "required": ["path", "size"]
    }
  },
  {
    "name": "list_files",
    "title": "List files",
    "description": "Lists a directory of the session's /workspace (its root by default).",
    "inputSchema": {
      "type": "object",
      "properties": {
        "path": {"type": "string", "description": "Relative to /workspace, or an absolute path under /workspace; default: /workspace"},
        "recursive": {"type": "boolean", "description": "Everything below it too (default false)"}
      },
      "additionalProperties": false
    },
    "outputSchema": {
      "type": "object",
      "properties": {
        "path": {"type": "string"},
        "entries": {
          "type": "array",
          "items": {
            "type": "object",
            "properties": {
              "path": {"type": "string"},
              "type": {"type": "string", "enum": ["file", "directory", "symlink", "other"]},
              "size": {"type": "integer"}
            },
            "required": ["path", "type", "size"]
          }
        }
      },
      "required": ["path", "entries"]
    }
  },
  {
    "name": "call_skill",
    "title": "Call a skill",
    "description": "Calls a skill installed on the server, by name (\"word-stats\", \"word-stats@1.2.0\" or \"word-stats@^1\"), in an isolated sandbox of its own, with a JSON-RPC method and params. Returns the skill's result, or the error it answered, with which version ran and its logs. Progress the skill reports is sent as progress notifications.",
    "inputSchema": {
      "type": "object",
      "properties": {
        "skill": {"type": "string", "description": "The skill: its name, optionally @version or @range"},
        "method": {"type": "string", "description": "The JSON-RPC method the skill is called with"},
        "params": {"type": ["object", "array"], "description": "The method's params"},
        "timeout_ms": {"type": "integer", "minimum": 1, "description": "Wall-clock limit (default: the skill's; ceiling: its profile's)"}
      },
      "required": ["skill", "method"],
      "additionalProperties": false
    },
    "outputSchema": {
      "type": "object",
      "properties": {
        "result": {"description": "The skill's result"},
        "error": {"type": "object", "description": "The JSON-RPC error the skill answered with"},
        "skill": {"type": "object", "properties": {"name": {"type": "string"}, "version": {"type": "string"}, "id": {"type": "string"}}},
        "logs": {"type": "string", "description": "What the skill wrote to stderr"}
      },
      "required": ["skill", "logs"]
    }
  }
])json";

json::array BuildToolList() {
  json::array tools = json::parse(kTools).as_array();
  const json::value run_output = json::parse(kRunOutputSchema);
  for (json::value& tool : tools) {
    json::object& t = tool.as_object();
    if (!t.contains("outputSchema")) t["outputSchema"] = run_output;
  }
  return tools;
}

json::string_view Key(absl::string_view s) { return json::string_view(s.data(), s.size()); }

json::object TextResult(std::string text, json::object structured, bool is_error) {
  json::object out{{"content", json::array{json::object{{"type", "text"}, {"text", std::move(text)}}}},
                   {"structuredContent", std::move(structured)}};
  if (is_error) out["isError"] = true;
  return out;
}

std::string StringField(const json::object& o, absl::string_view key) {
  const json::value* v = o.if_contains(Key(key));
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

// A captured stream: its text, or its base64 decoded (the reply repairs
// what is not UTF-8).
std::string Stream(const json::object& run, absl::string_view name) {
  if (const json::value* text = run.if_contains(Key(name)); text != nullptr && text->is_string()) {
    return std::string(text->as_string());
  }
  std::string bytes;
  const std::string encoded = StringField(run, absl::StrCat(name, "_base64"));
  if (!absl::Base64Unescape(encoded, &bytes)) return "";
  return bytes;
}

bool BoolField(const json::object& o, absl::string_view key) {
  const json::value* v = o.if_contains(Key(key));
  return v != nullptr && v->is_bool() && v->as_bool();
}

std::string Ending(const json::object& s) {
  const std::string reason = StringField(s, "reason");
  if (reason == "exited") return absl::StrCat("exited with code ", json::serialize(s.at("exit_code")));
  if (reason == "signaled") return absl::StrCat("killed by signal ", json::serialize(s.at("signal")));
  if (reason == "timeout") return "timed out (killed)";
  if (reason == "setup_failed") return absl::StrCat("could not start: ", StringField(s, "error"));
  return absl::StrCat("ended: ", reason);
}

std::string Quote(const std::string& text) {
  if (text.size() <= kSummaryBytes) return text;
  return absl::StrCat(text.substr(0, kSummaryBytes), "\n[... ", text.size() - kSummaryBytes,
                      " more bytes in structuredContent]");
}

std::string RunSummary(const json::object& s) {
  std::string text = Ending(s);
  const std::string out = StringField(s, "stdout");
  const std::string err = StringField(s, "stderr");
  if (!out.empty()) absl::StrAppend(&text, "\n--- stdout", BoolField(s, "stdout_truncated") ? " (truncated)" : "",
                                    " ---\n", Quote(out));
  if (!err.empty()) absl::StrAppend(&text, "\n--- stderr", BoolField(s, "stderr_truncated") ? " (truncated)" : "",
                                    " ---\n", Quote(err));
  std::vector<std::string> changed;
  for (const json::value& f : s.at("files_changed").as_array()) {
    changed.push_back(absl::StrCat(StringField(f.as_object(), "path"), " (", StringField(f.as_object(), "change"), ")"));
  }
  if (!changed.empty()) absl::StrAppend(&text, "\n--- files changed in /workspace ---\n", absl::StrJoin(changed, "\n"));
  return text;
}

}  // namespace

const std::vector<std::string>& McpSupportedVersions() {
  static const std::vector<std::string> versions = {"2025-06-18", "2025-03-26", "2024-11-05"};
  return versions;
}

bool IsSupportedMcpVersion(absl::string_view version) {
  const std::vector<std::string>& all = McpSupportedVersions();
  return std::find(all.begin(), all.end(), version) != all.end();
}

std::string NegotiateMcpVersion(absl::string_view requested) {
  return IsSupportedMcpVersion(requested) ? std::string(requested) : McpSupportedVersions().front();
}

std::optional<McpTool> FindMcpTool(absl::string_view name) {
  if (name == "run_python") return McpTool::kRunPython;
  if (name == "run_shell") return McpTool::kRunShell;
  if (name == "read_file") return McpTool::kReadFile;
  if (name == "write_file") return McpTool::kWriteFile;
  if (name == "list_files") return McpTool::kListFiles;
  if (name == "call_skill") return McpTool::kCallSkill;
  return std::nullopt;
}

json::array McpToolList() {
  static const json::array tools = BuildToolList();
  return tools;
}

Expected<std::string> McpWorkspacePath(absl::string_view path, bool allow_root) {
  if (absl::StartsWith(path, "/")) {
    if (path != kWorkspace && !absl::StartsWith(path, absl::StrCat(kWorkspace, "/"))) {
      return InvalidParam("arguments", "path", absl::StrCat("'", path, "' is outside /workspace"));
    }
    path.remove_prefix(kWorkspace.size());
    while (absl::StartsWith(path, "/")) path.remove_prefix(1);
  }
  while (absl::EndsWith(path, "/")) path.remove_suffix(1);
  if (path == ".") path = "";
  if (path.empty() && !allow_root) return InvalidParam("arguments", "path", "names /workspace itself, not a file");
  return std::string(path);
}

namespace {

// "path" of a tool's arguments, as the files.* methods take it; a path
// that is not required may be left out for the workspace's root.
Expected<std::string> PathArgument(const json::object& args, bool required) {
  Expected<std::optional<std::string>> path = GetString(args, "path", required, "arguments");
  if (!path.ok()) return path.error();
  if (!path.value().has_value()) return std::string();
  return McpWorkspacePath(*path.value(), !required);
}

}  // namespace

Expected<McpToolArgs> ReadMcpToolArgs(McpTool tool, const json::value& raw) {
  static const json::object kNone;
  if (!raw.is_null() && !raw.is_object()) return InvalidParam("", "arguments", "expected an object");
  const json::object& args = raw.is_object() ? raw.as_object() : kNone;
  McpToolArgs out;
  out.tool = tool;
  switch (tool) {
    case McpTool::kRunPython:
    case McpTool::kRunShell: {
      const char* field = tool == McpTool::kRunPython ? "code" : "command";
      if (auto bad = RejectUnknown(args, {field, "timeout_ms"}, "arguments")) return *bad;
      CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> source, GetString(args, field, true, "arguments"));
      CUBICLE_RPC_ASSIGN_OR_RETURN(out.timeout_ms, GetInt64(args, "timeout_ms", false, 1, INT64_MAX, "arguments"));
      out.source = *std::move(source);
      return out;
    }
    case McpTool::kReadFile: {
      if (auto bad = RejectUnknown(args, {"path"}, "arguments")) return *bad;
      CUBICLE_RPC_ASSIGN_OR_RETURN(out.path, PathArgument(args, /*required=*/true));
      return out;
    }
    case McpTool::kWriteFile: {
      if (auto bad = RejectUnknown(args, {"path", "content", "content_base64"}, "arguments")) return *bad;
      CUBICLE_RPC_ASSIGN_OR_RETURN(out.path, PathArgument(args, /*required=*/true));
      CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> text, GetString(args, "content", false, "arguments"));
      CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> b64, GetString(args, "content_base64", false, "arguments"));
      if (text.has_value() == b64.has_value()) {
        return InvalidParam("arguments", "content", "give exactly one of content and content_base64");
      }
      if (text.has_value()) {
        out.data = *std::move(text);
      } else if (!absl::Base64Unescape(*b64, &out.data)) {
        return InvalidParam("arguments", "content_base64", "is not base64");
      }
      return out;
    }
    case McpTool::kCallSkill: {
      if (auto bad = RejectUnknown(args, {"skill", "method", "params", "timeout_ms"}, "arguments")) return *bad;
      CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> skill, GetString(args, "skill", true, "arguments"));
      CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> method, GetString(args, "method", true, "arguments"));
      CUBICLE_RPC_ASSIGN_OR_RETURN(out.timeout_ms, GetInt64(args, "timeout_ms", false, 1, INT64_MAX, "arguments"));
      if (const json::value* p = args.if_contains("params")) {
        if (!p->is_object() && !p->is_array()) return InvalidParam("arguments", "params", "must be an object or an array");
        out.params = *p;
      }
      out.skill = *std::move(skill);
      out.method = *std::move(method);
      return out;
    }
    case McpTool::kListFiles: {
      if (auto bad = RejectUnknown(args, {"path", "recursive"}, "arguments")) return *bad;
      CUBICLE_RPC_ASSIGN_OR_RETURN(out.path, PathArgument(args, /*required=*/false));
      CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<bool> recursive, GetBool(args, "recursive", false, "arguments"));
      out.recursive = recursive.value_or(false);
      return out;
    }
  }
  return InvalidParam("", "name", "unknown tool");
}

json::object McpToolError(absl::string_view message) {
  return json::object{{"content", json::array{json::object{{"type", "text"}, {"text", Key(message)}}}},
                      {"isError", true}};
}

McpListing ReadMcpListing(const json::value& listed) {
  McpListing out;
  const json::object* o = listed.if_object();
  const json::value* entries = o == nullptr ? nullptr : o->if_contains("entries");
  if (entries == nullptr || !entries->is_array()) return out;
  for (const json::value& e : entries->as_array()) {
    const json::object* f = e.if_object();
    if (f == nullptr || StringField(*f, "type") != "file") continue;
    McpFileState state;
    if (const json::value* size = f->if_contains("size"); size != nullptr && size->is_number()) {
      state.size = size->to_number<uint64_t>();
    }
    if (const json::value* mtime = f->if_contains("mtime_ns"); mtime != nullptr && mtime->is_number()) {
      state.mtime_ns = mtime->to_number<int64_t>();
    }
    out[StringField(*f, "path")] = state;
  }
  return out;
}

json::array McpFilesChanged(const McpListing& before, const McpListing& after) {
  std::map<std::string, json::object> changed;  // by path, so the list comes out sorted
  for (const auto& [path, now] : after) {
    auto was = before.find(path);
    if (was != before.end() && was->second.size == now.size && was->second.mtime_ns == now.mtime_ns) continue;
    changed[path] = json::object{{"path", path}, {"change", was == before.end() ? "created" : "modified"},
                                 {"size", now.size}};
  }
  for (const auto& [path, was] : before) {
    if (!after.contains(path)) changed[path] = json::object{{"path", path}, {"change", "deleted"}};
  }
  json::array out;
  for (auto& [path, entry] : changed) {
    if (out.size() == kMaxFilesChanged) break;
    out.push_back(std::move(entry));
  }
  return out;
}

json::object McpRunResult(const json::value& raw, const json::value& files_changed) {
  const json::object* run = raw.if_object();
  if (run == nullptr) return McpToolError("the daemon's result is not an object");
  if (const json::value* error = run->if_contains("error"); error != nullptr && error->is_object()) {
    return McpToolError(absl::StrCat("the run was refused: ", StringField(error->as_object(), "message")));
  }
  json::object s;
  s["exit_code"] = run->contains("exit_code") ? run->at("exit_code") : json::value(nullptr);
  s["signal"] = run->contains("signal") ? run->at("signal") : json::value(nullptr);
  s["reason"] = StringField(*run, "reason");
  s["timed_out"] = StringField(*run, "reason") == "timeout";
  s["stdout"] = Stream(*run, "stdout");
  s["stderr"] = Stream(*run, "stderr");
  s["stdout_truncated"] = BoolField(*run, "stdout_truncated");
  s["stderr_truncated"] = BoolField(*run, "stderr_truncated");
  if (const json::value* wall = run->if_contains("wall_ms"); wall != nullptr && wall->is_number()) s["wall_ms"] = *wall;
  if (run->contains("error")) s["error"] = StringField(*run, "error");
  if (files_changed.is_array()) {
    s["files_changed"] = files_changed;
  } else {
    s["files_changed"] = json::array();
    s["files_changed_error"] = files_changed.is_string() ? files_changed : json::value("unknown");
  }
  const bool ok = StringField(*run, "reason") == "exited" && s["exit_code"].is_int64() && s["exit_code"].as_int64() == 0;
  std::string text = RunSummary(s);
  return TextResult(std::move(text), std::move(s), !ok);
}

json::object McpReadFileResult(const json::value& raw) {
  const json::object* got = raw.if_object();
  if (got == nullptr) return McpToolError("the daemon's result is not an object");
  std::string bytes;
  if (!absl::Base64Unescape(StringField(*got, "data"), &bytes)) return McpToolError("the daemon sent bad base64");
  const std::string path = StringField(*got, "path");
  json::object s{{"path", path}, {"size", bytes.size()}};
  std::string text;
  if (IsValidUtf8(bytes)) {
    text = bytes;
    s["content"] = std::move(bytes);
  } else {
    s["content_base64"] = StringField(*got, "data");
    text = absl::StrCat("/workspace/", path, " holds ", bytes.size(),
                        " bytes that are not UTF-8 text; base64:\n", StringField(*got, "data"));
  }
  return TextResult(std::move(text), std::move(s), false);
}

json::object McpWriteFileResult(const json::value& raw) {
  const json::object* put = raw.if_object();
  if (put == nullptr) return McpToolError("the daemon's result is not an object");
  json::object s{{"path", StringField(*put, "path")}, {"size", put->contains("size") ? put->at("size") : json::value(0)}};
  std::string text = absl::StrCat("wrote ", json::serialize(s["size"]), " bytes to /workspace/", StringField(*put, "path"));
  return TextResult(std::move(text), std::move(s), false);
}

json::object McpListFilesResult(const json::value& raw) {
  const json::object* listed = raw.if_object();
  if (listed == nullptr) return McpToolError("the daemon's result is not an object");
  json::array entries;
  std::string text;
  if (const json::value* all = listed->if_contains("entries"); all != nullptr && all->is_array()) {
    for (const json::value& e : all->as_array()) {
      const json::object& f = e.as_object();
      const std::string type = StringField(f, "type");
      json::value size = f.contains("size") ? f.at("size") : json::value(0);
      absl::StrAppend(&text, text.empty() ? "" : "\n", StringField(f, "path"), type == "directory" ? "/" : "",
                      type == "file" ? absl::StrCat(" (", json::serialize(size), " bytes)") : "");
      entries.push_back(json::object{{"path", StringField(f, "path")}, {"type", type}, {"size", std::move(size)}});
    }
  }
  const std::string path = StringField(*listed, "path");
  if (text.empty()) text = absl::StrCat("/workspace/", path, " is empty");
  return TextResult(std::move(text), json::object{{"path", path}, {"entries", std::move(entries)}}, false);
}

json::object McpCallSkillResult(const json::value& answer) {
  const json::object* a = answer.if_object();
  if (a == nullptr) return McpToolError("skill.call answered without a result object");
  json::object structured;
  const json::value* error = a->if_contains("error");
  if (error != nullptr) {
    structured["error"] = *error;
  } else if (const json::value* result = a->if_contains("result")) {
    structured["result"] = *result;
  }
  structured["skill"] = a->contains("skill") ? a->at("skill") : json::value(json::object());
  structured["logs"] = StringField(*a, "logs");
  std::string text = json::serialize(error != nullptr ? *error : structured.contains("result") ? structured["result"]
                                                                                             : json::value(nullptr));
  return TextResult(std::move(text), std::move(structured), error != nullptr);
}

}  // namespace cubicle::rpc
