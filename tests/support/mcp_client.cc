#include "tests/support/mcp_client.h"

#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "tests/support/daemon_client.h"

extern char** environ;

namespace cubicle::test_support {
namespace json = boost::json;

McpStdioServer::McpStdioServer(const std::vector<std::string>& args, const std::vector<std::string>& env,
                               const std::string& stderr_path) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return;
  fd_.reset(sv[0]);
  UniqueFd theirs(sv[1]);
  UniqueFd err(::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));

  std::vector<std::string> argv = {CUBICLE_BINARY, "mcp"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> argp;
  for (std::string& a : argv) argp.push_back(a.data());
  argp.push_back(nullptr);
  // The environment, each NAME of `env` replaced (getenv takes the first).
  std::vector<std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    bool replaced = false;
    for (const std::string& mine : env) {
      replaced = replaced || kv.substr(0, kv.find('=') + 1) == mine.substr(0, mine.find('=') + 1);
    }
    if (!replaced) vars.push_back(kv);
  }
  vars.insert(vars.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (std::string& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, theirs.get(), 0);
  posix_spawn_file_actions_adddup2(&actions, theirs.get(), 1);
  if (err) posix_spawn_file_actions_adddup2(&actions, err.get(), 2);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argp[0], &actions, nullptr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc == 0) pid_ = pid;
}

McpStdioServer::~McpStdioServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    (void)Wait(absl::Seconds(30));
  }
}

bool McpStdioServer::Send(const std::string& line) { return SendAll(fd_.get(), line + "\n"); }

std::optional<std::string> McpStdioServer::ReadLine(absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  for (;;) {
    const size_t nl = buffered_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    if (eof_ || absl::Now() >= deadline) return std::nullopt;
    (void)ReadSome(fd_.get(), deadline - absl::Now(), &buffered_, &eof_);
  }
}

json::value McpStdioServer::ReadReply(const json::value& id, std::vector<json::value>* skipped, absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  while (absl::Now() < deadline) {
    std::optional<std::string> line = ReadLine(deadline - absl::Now());
    if (!line.has_value()) return nullptr;
    json::value v = ParseJson(*line);
    const json::object* o = v.if_object();
    if (o != nullptr && o->contains("id") && o->at("id") == id) return v;
    if (skipped != nullptr) skipped->push_back(std::move(v));
  }
  return nullptr;
}

json::value McpStdioServer::Call(const json::value& id, const std::string& line) {
  if (!Send(line)) return nullptr;
  return ReadReply(id);
}

void McpStdioServer::CloseInput() { ::shutdown(fd_.get(), SHUT_WR); }

std::optional<int> McpStdioServer::Wait(absl::Duration limit) {
  if (pid_ <= 0) return std::nullopt;
  const absl::Time deadline = absl::Now() + limit;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (absl::Now() >= deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
      return std::nullopt;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

void McpStdioServer::Signal(int sig) const {
  if (pid_ > 0) ::kill(pid_, sig);
}

std::string McpRequest(int64_t id, const std::string& method, const std::string& params) {
  std::string line = absl::StrCat(R"({"jsonrpc":"2.0","id":)", id, R"(,"method":")", method, "\"");
  if (!params.empty()) absl::StrAppend(&line, R"(,"params":)", params);
  return line + "}";
}

std::string McpToolCallLine(int64_t id, const std::string& tool, const std::string& arguments,
                            const std::string& meta) {
  std::string params = absl::StrCat(R"({"name":")", tool, R"(","arguments":)", arguments);
  if (!meta.empty()) absl::StrAppend(&params, R"(,"_meta":)", meta);
  return McpRequest(id, "tools/call", params + "}");
}

std::string McpInitialize(int64_t id, const std::string& version) {
  return McpRequest(id, "initialize",
                    absl::StrCat(R"({"protocolVersion":")", version,
                                 R"(","capabilities":{},"clientInfo":{"name":"cubicle-test","version":"1"}})"));
}

}  // namespace cubicle::test_support
