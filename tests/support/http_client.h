// `cubicle serve --listen` from a test: a plain-socket HTTP/1.1 client on
// loopback (so that a test can send half a request, or a huge head, as no
// library would), and a daemon started on an ephemeral port.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
};

// One keep-alive connection to 127.0.0.1:port.
class HttpClient {
 public:
  explicit HttpClient(uint16_t port);
  bool connected() const { return connected_; }
  bool SendRaw(absl::string_view bytes);
  // The next reply, waiting at most `limit` (a bound for failures only);
  // nullopt when none came whole. A chunked body is read to its end.
  std::optional<HttpReply> ReadReply(absl::Duration limit = absl::Seconds(60));
  // The head of the next reply only (status and headers), for a streamed
  // body read with ReadChunk.
  std::optional<HttpReply> ReadHead(absl::Duration limit = absl::Seconds(60));
  // The next chunk of a chunked body; "" for the last one; nullopt when
  // none came whole in time.
  std::optional<std::string> ReadChunk(absl::Duration limit = absl::Seconds(60));
  // A request (Content-Length set for a body), then its reply.
  std::optional<HttpReply> Request(absl::string_view method, absl::string_view target, absl::string_view body = "",
                                   const std::vector<std::pair<std::string, std::string>>& headers = {},
                                   absl::Duration limit = absl::Seconds(60));
  // Whether the server closed the connection (EOF or a reset within
  // `limit`), after whatever it sent first.
  bool ClosedByPeer(absl::Duration limit = absl::Seconds(60));

 private:
  bool Fill(absl::Duration limit);
  UniqueFd fd_;
  bool connected_ = false;
  bool eof_ = false;
  std::string buffered_;
};

// `cubicle serve --listen 127.0.0.1:0 --listen-port-file DIR/port FLAGS...`,
// up once the port file is there.
class HttpDaemon {
 public:
  explicit HttpDaemon(std::vector<std::string> flags, std::vector<std::string> env = {});
  ~HttpDaemon();  // stopped as by Stop() (its pools torn down) unless it was
  bool up() const { return port_ != 0; }
  uint16_t port() const { return port_; }
  RunningProcess& process() { return *process_; }
  const TempDir& dir() const { return dir_; }
  ProcessRun Stop();  // SIGTERM, then the exit

 private:
  TempDir dir_;
  std::unique_ptr<RunningProcess> process_;
  uint16_t port_ = 0;
  bool stopped_ = false;
};

// A JSON-RPC request body.
std::string RpcBody(int64_t id, absl::string_view method, absl::string_view params = "");

}  // namespace cubicle::test_support
