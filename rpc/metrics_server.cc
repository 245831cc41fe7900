#include "rpc/metrics_server.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <utility>

#include <boost/asio/write.hpp>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace cubicle::rpc {
namespace asio = boost::asio;

namespace {

// Each connection gets one HTTP/1.0 response with the metrics at once. The
// sending side is then shut down and whatever the client sends (a
// scraper's GET) is read and dropped until it closes — at most 64 KiB and
// 5 s — so a client that writes after the response never meets a closed
// socket (EPIPE).
template <typename Socket>
class MetricsConnection : public std::enable_shared_from_this<MetricsConnection<Socket>> {
 public:
  MetricsConnection(Socket socket, std::string body)
      : socket_(std::move(socket)), timer_(socket_.get_executor()) {
    reply_ = absl::StrCat("HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: ",
                          body.size(), "\r\nConnection: close\r\n\r\n", body);
  }
  void Start() {
    timer_.expires_after(std::chrono::seconds(5));
    timer_.async_wait([self = this->shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->Close();
    });
    asio::async_write(socket_, asio::buffer(reply_), [self = this->shared_from_this()](boost::system::error_code ec,
                                                                                       size_t) {
      if (ec) return self->Close();
      boost::system::error_code ignored;
      self->socket_.shutdown(asio::socket_base::shutdown_send, ignored);
      self->Drain();
    });
  }

 private:
  void Drain() {
    socket_.async_read_some(asio::buffer(scratch_), [self = this->shared_from_this()](boost::system::error_code ec,
                                                                                      size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > (64u << 10)) return self->Close();
      self->Drain();
    });
  }
  void Close() {
    boost::system::error_code ignored;
    timer_.cancel();
    socket_.close(ignored);
  }

  Socket socket_;
  asio::steady_timer timer_;
  std::string reply_;
  std::array<char, 4096> scratch_;
  size_t drained_ = 0;
};

// One connection at a time is accepted; a failed accept (out of
// descriptors) is retried after 100 ms rather than at once.
template <typename Acceptor>
void ServeMetrics(const std::function<std::string()>* text, Acceptor& acceptor, asio::steady_timer& retry) {
  acceptor.async_accept([text, &acceptor, &retry](boost::system::error_code ec, typename Acceptor::protocol_type::socket s) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) {
      std::make_shared<MetricsConnection<typename Acceptor::protocol_type::socket>>(std::move(s), (*text)())->Start();
      return ServeMetrics(text, acceptor, retry);
    }
    retry.expires_after(std::chrono::milliseconds(100));
    retry.async_wait([text, &acceptor, &retry](boost::system::error_code wait) {
      if (!wait) ServeMetrics(text, acceptor, retry);
    });
  });
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open(", tmp, ")"));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return ErrnoStatus(err, absl::StrCat("write(", tmp, ")"));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus(err, absl::StrCat("rename(", tmp, ", ", path, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(asio::io_context& io, const MetricsTarget& target,
                                                                    uint32_t socket_mode,
                                                                    std::function<std::string()> text,
                                                                    std::function<void(const std::string&)> warn) {
  std::unique_ptr<MetricsServer> server(new MetricsServer(io, target, std::move(text), std::move(warn)));
  switch (target.kind) {
    case MetricsTarget::Kind::kFile:
      server->RewriteFile();
      break;
    case MetricsTarget::Kind::kUnixSocket: {
      absl::StatusOr<std::unique_ptr<UnixAcceptor>> acceptor = ListenUnix(io, target.path, socket_mode);
      if (!acceptor.ok()) {
        return absl::Status(acceptor.status().code(), absl::StrCat("metrics socket ", acceptor.status().message()));
      }
      server->acceptor_ = *std::move(acceptor);
      ServeMetrics(&server->text_, *server->acceptor_, server->timer_);
      break;
    }
    case MetricsTarget::Kind::kTcp: {
      boost::system::error_code ec;
      auto acceptor = std::make_unique<asio::ip::tcp::acceptor>(io);
      if (!acceptor->open(target.endpoint.protocol(), ec) &&
          !acceptor->set_option(asio::socket_base::reuse_address(true), ec) && !acceptor->bind(target.endpoint, ec)) {
        acceptor->listen(asio::socket_base::max_listen_connections, ec);
      }
      if (ec) {
        return absl::UnavailableError(absl::StrCat("metrics on ", target.endpoint.address().to_string(), ":",
                                                   target.endpoint.port(), ": ", ec.message()));
      }
      server->tcp_ = std::move(acceptor);
      ServeMetrics(&server->text_, *server->tcp_, server->timer_);
      break;
    }
  }
  return server;
}

MetricsServer::MetricsServer(asio::io_context& io, MetricsTarget target, std::function<std::string()> text,
                             std::function<void(const std::string&)> warn)
    : target_(std::move(target)), text_(std::move(text)), warn_(std::move(warn)), timer_(io) {}

void MetricsServer::RewriteFile() {
  absl::Status written = WriteFileAtomically(target_.path, text_());
  if (!written.ok()) warn_(absl::StrCat("metrics file: ", written.message()));
  if (stopped_) return;
  timer_.expires_after(std::chrono::seconds(5));
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && !stopped_) RewriteFile();
  });
}

void MetricsServer::Stop() {
  stopped_ = true;
  boost::system::error_code ignored;
  if (acceptor_) acceptor_->close(ignored);
  if (tcp_) tcp_->close(ignored);
  timer_.cancel();
}

void MetricsServer::Finish() {
  if (target_.kind == MetricsTarget::Kind::kUnixSocket) {
    ::unlink(target_.path.c_str());
  } else if (target_.kind == MetricsTarget::Kind::kFile) {
    WriteFileAtomically(target_.path, text_()).IgnoreError();  // the final counts
  }
}

uint16_t MetricsServer::port() const {
  boost::system::error_code ignored;
  return tcp_ ? tcp_->local_endpoint(ignored).port() : 0;
}

}  // namespace cubicle::rpc
