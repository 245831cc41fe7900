// The MCP server's tools (docs/protocol.md, "MCP"): what tools/list says of
// each, a call's arguments read against its input schema, and the daemon's
// answers shaped into the tool's result. Pure functions over JSON, no I/O:
// the calls themselves are rpc/mcp_tool_call.cc's.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "absl/strings/string_view.h"
#include "rpc/jsonrpc.h"

namespace cubicle::rpc {

// The protocol revisions this server speaks, newest first. The first is
// what a client asking for any other gets (it then decides whether to go
// on).
const std::vector<std::string>& McpSupportedVersions();
// The version to answer an initialize that asked for `requested`.
std::string NegotiateMcpVersion(absl::string_view requested);
bool IsSupportedMcpVersion(absl::string_view version);

enum class McpTool { kRunPython, kRunShell, kReadFile, kWriteFile, kListFiles, kCallSkill };

std::optional<McpTool> FindMcpTool(absl::string_view name);
// tools/list's "tools": each with its inputSchema and outputSchema.
boost::json::array McpToolList();

// A tools/call's arguments, read and checked.
struct McpToolArgs {
  McpTool tool = McpTool::kRunShell;
  std::string source;                   // run_python's code, run_shell's command
  std::optional<int64_t> timeout_ms;    // run_*: the daemon checks it against the profile
  std::string path;                     // workspace-relative; "" is the workspace's root
  std::string data;                     // write_file: the bytes
  bool recursive = false;               // list_files
  std::string skill, method;            // call_skill: the reference and the skill's method
  boost::json::value params;            // call_skill: the skill's params (null, an object or an array)
};

// The arguments of a call of `tool`, or why they do not fit its input
// schema (a message for the caller: a tool error, not a protocol one).
Expected<McpToolArgs> ReadMcpToolArgs(McpTool tool, const boost::json::value& arguments);

// A path as a tool takes it — relative to /workspace, or absolute under
// /workspace — as the files.* methods take it (relative, never empty
// unless `allow_root`). InvalidParams saying why otherwise.
Expected<std::string> McpWorkspacePath(absl::string_view path, bool allow_root);

// A tool error: {"content": [text], "isError": true}, no structured content.
boost::json::object McpToolError(absl::string_view message);

// What the workspace held, from files.list {recursive: true}: regular
// files by path.
struct McpFileState {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};
using McpListing = std::map<std::string, McpFileState>;
McpListing ReadMcpListing(const boost::json::value& files_list_result);
// The regular files a run created, modified or deleted, in path order, at
// most kMaxFilesChanged: [{"path", "change", "size"}].
inline constexpr size_t kMaxFilesChanged = 1000;
boost::json::array McpFilesChanged(const McpListing& before, const McpListing& after);

// run_python / run_shell: the tool's result from exec.status's `result`
// (a sandbox.run result, or {"error": {...}} for a run refused as a
// request), and the files it changed (null when they could not be told).
boost::json::object McpRunResult(const boost::json::value& run, const boost::json::value& files_changed);
// read_file from files.get's result; write_file from files.put's;
// list_files from files.list's.
boost::json::object McpReadFileResult(const boost::json::value& got);
boost::json::object McpWriteFileResult(const boost::json::value& put);
boost::json::object McpListFilesResult(const boost::json::value& listed);
// call_skill from skill.call's result: the skill's result (or its error,
// then isError), which skill ran, and its logs.
boost::json::object McpCallSkillResult(const boost::json::value& answer);

}  // namespace cubicle::rpc
