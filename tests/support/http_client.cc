#include "tests/support/http_client.h"

#include "tests/support/daemon_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace cubicle::test_support {

HttpClient::HttpClient(uint16_t port) {
  fd_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connected_ = fd_ && ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
}

bool HttpClient::SendRaw(absl::string_view bytes) { return SendAll(fd_.get(), bytes); }

bool HttpClient::Fill(absl::Duration limit) {
  if (eof_) return false;
  return ReadSome(fd_.get(), limit, &buffered_, &eof_);
}

std::optional<HttpReply> HttpClient::ReadHead(absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  size_t head_end;
  while ((head_end = buffered_.find("\r\n\r\n")) == std::string::npos) {
    if (!Fill(deadline - absl::Now())) return std::nullopt;
  }
  HttpReply reply;
  std::vector<std::string> lines = absl::StrSplit(buffered_.substr(0, head_end), "\r\n");
  std::vector<std::string> status = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  if (status.size() < 2 || !absl::SimpleAtoi(status[1], &reply.status)) return std::nullopt;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    reply.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  buffered_.erase(0, head_end + 4);
  return reply;
}

std::optional<std::string> HttpClient::ReadChunk(absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  size_t line_end;
  while ((line_end = buffered_.find("\r\n")) == std::string::npos) {
    if (!Fill(deadline - absl::Now())) return std::nullopt;
  }
  size_t size = 0;
  const std::string hex = buffered_.substr(0, buffered_.find_first_of(";\r"));
  if (!absl::SimpleHexAtoi(hex, &size)) return std::nullopt;
  while (buffered_.size() < line_end + 2 + size + 2) {
    if (!Fill(deadline - absl::Now())) return std::nullopt;
  }
  std::string data = buffered_.substr(line_end + 2, size);
  buffered_.erase(0, line_end + 2 + size + 2);  // no trailers are sent
  return data;
}

std::optional<HttpReply> HttpClient::ReadReply(absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  std::optional<HttpReply> reply = ReadHead(limit);
  if (!reply.has_value()) return std::nullopt;
  if (auto it = reply->headers.find("transfer-encoding"); it != reply->headers.end() && it->second == "chunked") {
    for (int i = 0; i < 1000000; ++i) {
      std::optional<std::string> chunk = ReadChunk(deadline - absl::Now());
      if (!chunk.has_value()) return std::nullopt;
      if (chunk->empty()) return reply;
      reply->body += *chunk;
    }
    return std::nullopt;
  }
  size_t length = 0;
  if (auto it = reply->headers.find("content-length"); it != reply->headers.end()) {
    if (!absl::SimpleAtoi(it->second, &length)) return std::nullopt;
  }
  while (buffered_.size() < length) {
    if (!Fill(deadline - absl::Now())) return std::nullopt;
  }
  reply->body = buffered_.substr(0, length);
  buffered_.erase(0, length);
  return reply;
}

std::optional<HttpReply> HttpClient::Request(absl::string_view method, absl::string_view target,
                                             absl::string_view body,
                                             const std::vector<std::pair<std::string, std::string>>& headers,
                                             absl::Duration limit) {
  std::string request = absl::StrCat(method, " ", target, " HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  for (const auto& [name, value] : headers) absl::StrAppend(&request, name, ": ", value, "\r\n");
  if (!body.empty() || method == "POST") {
    absl::StrAppend(&request, "Content-Type: application/json\r\nContent-Length: ", body.size(), "\r\n");
  }
  absl::StrAppend(&request, "\r\n", body);
  if (!SendRaw(request)) return std::nullopt;
  return ReadReply(limit);
}

bool HttpClient::ClosedByPeer(absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  while (!eof_ && absl::Now() < deadline) Fill(deadline - absl::Now());
  return eof_;
}

HttpDaemon::HttpDaemon(std::vector<std::string> flags, std::vector<std::string> env) {
  const std::string port_file = dir_.Join("port");
  std::vector<std::string> args = {"serve", "--listen", "127.0.0.1:0", "--listen-port-file", port_file};
  args.insert(args.end(), flags.begin(), flags.end());
  process_ = std::make_unique<RunningProcess>(CubicleArgv(args), "", env);
  for (int i = 0; i < 2000 && process_->started(); ++i) {  // at most 20 s
    int port = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(port_file)), &port) && port > 0) {
      port_ = static_cast<uint16_t>(port);
      break;
    }
    siginfo_t info = {};
    if (::waitid(P_PID, process_->pid(), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

HttpDaemon::~HttpDaemon() {
  if (!stopped_ && process_->started()) Stop();
}

ProcessRun HttpDaemon::Stop() {
  stopped_ = true;
  process_->Signal(SIGTERM);
  return process_->Wait(absl::Seconds(60));
}

std::string RpcBody(int64_t id, absl::string_view method, absl::string_view params) {
  return absl::StrCat(R"({"jsonrpc":"2.0","id":)", id, R"(,"method":")", method, "\"",
                      params.empty() ? "" : absl::StrCat(R"(,"params":)", params), "}");
}

}  // namespace cubicle::test_support
