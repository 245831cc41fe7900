#include "rpc/transports.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

#include "absl/strings/str_cat.h"
#include "base/hot_memory.h"
#include "rpc/jsonrpc.h"
#include "rpc/request_threads.h"

namespace cubicle::rpc {
namespace asio = boost::asio;

namespace {

thread_local const ReaderWatch* t_reader_watch = nullptr;

}  // namespace

void SetReaderWatch(const ReaderWatch* watch) { t_reader_watch = watch; }

void WatchForTheReader(runtime::ExecRequest* request) {
  if (t_reader_watch == nullptr) return;
  request->watch_fd = t_reader_watch->fd;
  request->on_watch = t_reader_watch->on_line;
}

// ---------------------------------------------------------------------------
// stdio

StdioTransport::StdioTransport(Daemon* daemon, size_t max_line, std::function<void()> on_eof)
    : daemon_(daemon), max_line_(max_line), on_eof_(std::move(on_eof)) {
  if (::pipe2(wake_, O_CLOEXEC) != 0) wake_[0] = wake_[1] = -1;
  for (std::thread& t : readers_) t = std::thread([this] { Take(); });
}

StdioTransport::~StdioTransport() {
  if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);  // never drained: ends the reading
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  turn_.notify_all();
  for (std::thread& t : readers_) t.join();
  for (int fd : wake_) if (fd >= 0) ::close(fd);
}

void StdioTransport::Write(const std::string& reply) {
  std::lock_guard<std::mutex> lock(write_mu_);
  std::string line = reply + "\n";
  for (size_t off = 0; off < line.size();) {
    ssize_t n = ::write(STDOUT_FILENO, line.data() + off, line.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // the orchestrator is gone
    }
    off += static_cast<size_t>(n);
  }
}

// One reader thread: waits for the turn, then reads and runs what comes
// back, until the turn was passed on during a run, or reading ends.
void StdioTransport::Take() {
  RegisterHotStack();  // requests run here: see base/hot_memory.h
  RegisterHotHeap();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      turn_.wait(lock, [&] { return done_ || !reading_; });
      if (done_) return;
      reading_ = true;
    }
    bool passed = false;
    while (!passed) {
      Daemon::Work work = Read();
      if (!work) {  // stdin ended or shutting down: done_ is set
        turn_.notify_all();
        return;
      }
      const ReaderWatch watch{STDIN_FILENO, [&] {
                                passed = true;
                                {
                                  std::lock_guard<std::mutex> lock(mu_);
                                  reading_ = false;
                                }
                                turn_.notify_one();
                              }};
      SetReaderWatch(&watch);
      std::move(work)();
      SetReaderWatch(nullptr);
    }
  }
}

// The turn's reading: the whole lines read so far, then blocking reads,
// until a line's work is to run on this thread (returned), or stdin ends
// or the transport is shut down (done_ set, nothing returned). Only the
// thread with the turn touches pending_ and discarding_.
Daemon::Work StdioTransport::Read() {
  auto reply = [this](std::string reply) { Write(reply); };
  char buf[65536];
  for (;;) {
    size_t nl;
    while ((nl = pending_.find('\n')) != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      if (discarding_) {
        discarding_ = false;
        continue;
      }
      Daemon::Work work = daemon_->HandleLine(line, reply, /*may_run_here=*/true);
      if (work) return work;
    }
    if (pending_.size() > max_line_) {
      if (!discarding_) Write(ErrorReply(nullptr, LineTooLongError(max_line_)));
      discarding_ = true;
      pending_.clear();
    }
    struct pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return Stop(/*eof=*/true);
    }
    if (fds[1].revents) return Stop(/*eof=*/false);  // shutting down
    ssize_t n = ::read(STDIN_FILENO, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Stop(/*eof=*/true);
    pending_.append(buf, static_cast<size_t>(n));
  }
}

// The end of reading. At EOF a last line without "\n" still counts (to
// the workers), and the daemon is told.
Daemon::Work StdioTransport::Stop(bool eof) {
  if (eof) {
    if (!pending_.empty() && !discarding_) {
      (void)daemon_->HandleLine(pending_, [this](std::string reply) { Write(reply); });
    }
    pending_.clear();
    on_eof_();
  }
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  return {};
}

// ---------------------------------------------------------------------------
// The Unix socket

absl::StatusOr<std::unique_ptr<UnixAcceptor>> ListenUnix(asio::io_context& io, const std::string& path, uint32_t mode) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());
  boost::system::error_code ec;
  auto acceptor = std::make_unique<UnixAcceptor>(io);
  acceptor->open(asio::local::stream_protocol(), ec);
  if (!ec) {
    const mode_t old = ::umask(0777 & ~mode);
    acceptor->bind(asio::local::stream_protocol::endpoint(path), ec);
    ::umask(old);
  }
  if (!ec && ::chmod(path.c_str(), mode) != 0) ec = boost::system::error_code(errno, boost::system::system_category());
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return absl::InternalError(absl::StrCat(path, ": ", ec.message()));
  return acceptor;
}

namespace {

// One client on the Unix socket: lines in, replies out, in any order.
class SocketSession : public std::enable_shared_from_this<SocketSession> {
 public:
  SocketSession(Daemon* daemon, asio::local::stream_protocol::socket socket, size_t max_line)
      : daemon_(daemon), socket_(std::move(socket)), buffer_(max_line) {}

  void Start() { ReadLine(); }

 private:
  void ReadLine() {
    asio::async_read_until(socket_, buffer_, '\n', [self = shared_from_this()](boost::system::error_code ec, size_t n) {
      if (ec == asio::error::not_found) {  // the line outgrew the buffer
        self->Send(ErrorReply(nullptr, LineTooLongError(self->buffer_.max_size())));
        self->closing_ = true;
        return;
      }
      if (ec) return;  // EOF or closed: replies still pending keep us alive
      std::string line(asio::buffers_begin(self->buffer_.data()), asio::buffers_begin(self->buffer_.data()) + n);
      self->buffer_.consume(n);
      self->daemon_->HandleLine(line, [self](std::string reply) {
        asio::post(self->socket_.get_executor(), [self, reply = std::move(reply)]() mutable { self->Send(std::move(reply)); });
      });
      self->ReadLine();
    });
  }

  void Send(std::string reply) {
    queue_.push_back(std::move(reply) + "\n");
    if (queue_.size() == 1) WriteNext();
  }

  void WriteNext() {
    asio::async_write(socket_, asio::buffer(queue_.front()), [self = shared_from_this()](boost::system::error_code ec, size_t) {
      if (ec) return;
      self->queue_.pop_front();
      if (!self->queue_.empty()) {
        self->WriteNext();
      } else if (self->closing_) {
        boost::system::error_code ignored;
        self->socket_.shutdown(asio::local::stream_protocol::socket::shutdown_both, ignored);
      }
    });
  }

  Daemon* daemon_;
  asio::local::stream_protocol::socket socket_;
  asio::streambuf buffer_;
  std::deque<std::string> queue_;
  bool closing_ = false;
};

}  // namespace

void AcceptClients(Daemon* daemon, UnixAcceptor& acceptor, size_t max_line) {
  acceptor.async_accept([daemon, &acceptor, max_line](boost::system::error_code ec,
                                                      asio::local::stream_protocol::socket socket) {
    if (ec) return;  // closed at shutdown
    std::make_shared<SocketSession>(daemon, std::move(socket), max_line)->Start();
    AcceptClients(daemon, acceptor, max_line);
  });
}

}  // namespace cubicle::rpc
