#include "cli/run_via.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "cli/commands.h"
#include "cli/flag_values.h"

namespace cubicle::cli {
namespace {

namespace json = boost::json;

// The daemon refuses request lines over 4 MiB (docs/protocol.md); stdin
// travels base64-encoded inside one, so it is bounded below that.
constexpr size_t kMaxStdin = 3 << 20;
// A reply carries at most the profile's two output budgets (base64 at
// worst) and the result: a bound against a peer that never ends its line.
constexpr size_t kMaxReply = 256 << 20;

absl::Status Usage(absl::string_view flag, absl::string_view value, absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " '", value, "': ", want));
}

// The limits object sandbox.run takes: sizes and "unlimited" as given,
// counts and CPUs as numbers.
absl::StatusOr<json::object> LimitsOf(const ViaFlags& f) {
  json::object limits;
  if (!f.memory.empty()) limits["memory"] = f.memory;
  if (!f.memory_high.empty()) limits["memory_high"] = f.memory_high;
  if (!f.pids.empty()) {
    uint64_t pids = 0;
    if (f.pids == "unlimited") {
      limits["pids"] = "unlimited";
    } else if (absl::SimpleAtoi(f.pids, &pids)) {
      limits["pids"] = pids;
    } else {
      return Usage("--pids", f.pids, "expected a whole number or unlimited");
    }
  }
  if (!f.cpus.empty()) {
    double cpus = 0;
    if (!absl::SimpleAtod(f.cpus, &cpus)) return Usage("--cpus", f.cpus, "expected a number");
    limits["cpus"] = cpus;
  }
  if (!f.cpu_weight.empty()) {
    uint64_t weight = 0;
    if (!absl::SimpleAtoi(f.cpu_weight, &weight)) return Usage("--cpu-weight", f.cpu_weight, "expected a whole number");
    limits["cpu_weight"] = weight;
  }
  return limits;
}

// This process's stdin, unless it is a terminal (a daemon cannot read one
// interactively): read to its end, as the payload's stdin.
absl::StatusOr<std::string> ReadStdin() {
  std::string data;
  if (::isatty(0)) return data;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(0, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EBADF) return data;  // closed: nothing to send
    if (n < 0) return ErrnoStatus(errno, "read(stdin)");
    if (n == 0) return data;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > kMaxStdin) {
      return absl::InvalidArgumentError(
          absl::StrCat("stdin is over ", kMaxStdin >> 20, " MiB, more than a request to the daemon may carry"));
    }
  }
}

absl::StatusOr<std::string> RequestLine(const ViaFlags& f, const std::string& stdin_data) {
  json::object params;
  params["profile"] = f.profile;
  json::array argv;
  for (const std::string& a : f.command) argv.emplace_back(a);
  params["argv"] = std::move(argv);
  if (!f.env.empty()) {
    json::object env;
    for (const auto& [name, value] : f.env) env[name] = value;
    params["env"] = std::move(env);
  }
  if (!f.chdir.empty()) params["cwd"] = f.chdir;
  if (!f.workspace.empty()) params["workspace"] = f.workspace;
  if (!f.timeout.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(absl::Duration timeout, ParseSeconds("--timeout", f.timeout));
    params["timeout_ms"] = std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout));
  }
  CUBICLE_ASSIGN_OR_RETURN(json::object limits, LimitsOf(f));
  if (!limits.empty()) params["limits"] = std::move(limits);
  if (!stdin_data.empty()) params["stdin_base64"] = absl::Base64Escape(stdin_data);
  json::object request{{"jsonrpc", "2.0"}, {"id", 1}, {"method", "sandbox.run"}, {"params", std::move(params)}};
  return json::serialize(request) + "\n";
}

// One line out, one line back, on a fresh connection to the daemon.
absl::StatusOr<std::string> Exchange(const std::string& socket_path, const std::string& line) {
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("--via '", socket_path, "': not a usable socket path"));
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock) return ErrnoStatus(errno, "socket(AF_UNIX)");
  if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoStatus(errno, absl::StrCat("connect(", socket_path, "): is `cubicle serve --socket` running there?"));
  }
  for (size_t at = 0; at < line.size();) {
    const ssize_t n = ::send(sock.get(), line.data() + at, line.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("send(", socket_path, ")"));
    at += static_cast<size_t>(n);
  }
  std::string reply;
  char buf[65536];
  while (reply.empty() || reply.back() != '\n') {
    const ssize_t n = ::recv(sock.get(), buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("recv(", socket_path, ")"));
    if (n == 0) return absl::UnavailableError(absl::StrCat("the daemon at ", socket_path, " closed without a reply"));
    reply.append(buf, static_cast<size_t>(n));
    if (reply.size() > kMaxReply) return absl::ResourceExhaustedError("the daemon's reply is too long");
  }
  return reply;
}

// Writes a captured stream, text or base64, to `fd`.
void Emit(const json::object& result, const char* name, int fd) {
  std::string data;
  if (const json::value* text = result.if_contains(name); text != nullptr && text->is_string()) {
    data = std::string(text->get_string());
  } else if (const json::value* b64 = result.if_contains(absl::StrCat(name, "_base64"));
             b64 != nullptr && b64->is_string()) {
    if (!absl::Base64Unescape(std::string(b64->get_string()), &data)) data.clear();
  }
  for (size_t at = 0; at < data.size();) {
    const ssize_t n = ::write(fd, data.data() + at, data.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a closed stdout (`| head`) ends the copy, as for a local run
    at += static_cast<size_t>(n);
  }
}

int Fail(int status, const std::string& message) {
  std::fprintf(stderr, "cubicle run: %s\n", message.c_str());
  return status;
}

// The reply's result as `cubicle run` reports a local run's: the output,
// the same messages, the same exit status, the --json-status document.
int Report(const ViaFlags& f, const json::object& result) {
  Emit(result, "stdout", 1);
  Emit(result, "stderr", 2);
  const json::value* reason = result.if_contains("reason");
  const std::string why = reason != nullptr && reason->is_string() ? std::string(reason->get_string()) : "";
  if (why == "setup_failed") {
    const json::value* error = result.if_contains("error");
    std::fprintf(stderr, "cubicle run: setup failed: %s\n",
                 error != nullptr && error->is_string() ? std::string(error->get_string()).c_str() : "(no detail)");
  } else if (why == "timeout") {
    std::fprintf(stderr, "cubicle run: timed out; every process of the sandbox was killed\n");
  }
  if (!f.json_status.empty()) {
    std::FILE* out = std::fopen(f.json_status.c_str(), "we");
    if (out == nullptr) return Fail(kExitSetupFailed, absl::StrCat("open(", f.json_status, "): ", std::strerror(errno)));
    const std::string text = json::serialize(result) + "\n";
    const bool written = std::fwrite(text.data(), 1, text.size(), out) == text.size();
    if (std::fclose(out) != 0 || !written) return Fail(kExitSetupFailed, absl::StrCat("write(", f.json_status, ")"));
  }
  const json::value* status = result.if_contains("status");
  return status != nullptr && status->is_int64() ? static_cast<int>(status->get_int64()) : kExitSetupFailed;
}

}  // namespace

int RunVia(const ViaFlags& f) {
  absl::StatusOr<std::string> stdin_data = ReadStdin();
  if (!stdin_data.ok()) return Fail(kExitUsage, std::string(stdin_data.status().message()));
  absl::StatusOr<std::string> line = RequestLine(f, *stdin_data);
  if (!line.ok()) return Fail(kExitUsage, std::string(line.status().message()));
  absl::StatusOr<std::string> reply = Exchange(f.socket, *line);
  if (!reply.ok()) return Fail(kExitSetupFailed, std::string(reply.status().message()));
  boost::system::error_code ec;
  json::value parsed = json::parse(*reply, ec);
  if (ec || !parsed.is_object()) return Fail(kExitSetupFailed, "the daemon's reply is not a JSON-RPC response");
  const json::object& response = parsed.get_object();
  if (const json::value* error = response.if_contains("error"); error != nullptr && error->is_object()) {
    const json::object& e = error->get_object();
    const json::value* code = e.if_contains("code");
    const json::value* message = e.if_contains("message");
    const int64_t c = code != nullptr && code->is_int64() ? code->get_int64() : 0;
    // Params the daemon or its profile will not take are the caller's to
    // fix, as a bad flag is; anything else is the daemon's.
    return Fail(c == -32602 || c == -32002 || c == -32004 ? kExitUsage : kExitSetupFailed,
                absl::StrCat("the daemon refused the run (", c, "): ",
                             message != nullptr && message->is_string() ? std::string(message->get_string()) : ""));
  }
  const json::value* result = response.if_contains("result");
  if (result == nullptr || !result->is_object()) return Fail(kExitSetupFailed, "the daemon's reply has no result");
  return Report(f, result->get_object());
}

}  // namespace cubicle::cli
