#include "rpc/transports.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/socket.h>
#include <sys/un.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/object.hpp>

#include "absl/strings/str_cat.h"
#include "base/hot_memory.h"
#include "base/status.h"
#include "base/unique_fd.h"
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
    while ((nl = pending_.find('\n', scanned_)) != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      scanned_ = 0;
      if (discarding_) {
        discarding_ = false;
        continue;
      }
      Daemon::Work work = daemon_->HandleLine(line, reply, Origin{nullptr, /*may_run_here=*/true, reply});
      if (work) return work;
    }
    if (pending_.size() > max_line_) {
      if (!discarding_) {
        daemon_->CountRejected("line_too_long");
        Write(ErrorReply(nullptr, LineTooLongError(max_line_)));
      }
      discarding_ = true;
      pending_.clear();
    }
    scanned_ = pending_.size();  // holds no newline: the next search starts past it
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
      auto reply = [this](std::string reply) { Write(reply); };
      (void)daemon_->HandleLine(pending_, reply, Origin{nullptr, false, reply});
    }
    pending_.clear();
    scanned_ = 0;
    on_eof_();
  }
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  return {};
}

// ---------------------------------------------------------------------------
// The Unix socket

namespace {

// A socket left at `path` is removed only when nothing answers on it: one
// that accepts belongs to a live daemon, whose clients must not be taken
// over silently. FailedPrecondition naming its pid (SO_PEERCRED) then.
absl::Status ClaimSocketPath(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return absl::OkStatus();
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (probe && path.size() < sizeof(addr.sun_path)) {
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (::connect(probe.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) == 0) {
      struct ucred cred = {};
      socklen_t len = sizeof(cred);
      std::string who = ::getsockopt(probe.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0
                            ? absl::StrCat("pid ", cred.pid)
                            : std::string("another process");
      return absl::FailedPreconditionError(
          absl::StrCat(path, " is served by ", who, " already; stop it or choose another socket"));
    }
  }
  ::unlink(path.c_str());  // stale: its daemon is gone
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<UnixAcceptor>> AdoptUnix(asio::io_context& io, int listening_fd) {
  boost::system::error_code ec;
  auto acceptor = std::make_unique<UnixAcceptor>(io);
  acceptor->assign(asio::local::stream_protocol(), listening_fd, ec);
  if (ec) return absl::InternalError(absl::StrCat("activated (fd ", listening_fd, "): ", ec.message()));
  return acceptor;
}

absl::StatusOr<std::unique_ptr<UnixAcceptor>> ListenUnix(asio::io_context& io, const std::string& path, uint32_t mode) {
  CUBICLE_RETURN_IF_ERROR(ClaimSocketPath(path));
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

// One client on the Unix socket: lines in, replies out, in any order. A
// line must be complete within line_timeout of its first byte, and a
// connection with nothing in flight may stay silent idle_timeout; past
// either it is closed. Its end — a close, a hang-up, a failed write —
// cancels its requests when the configuration says so (Connection).
class SocketSession : public std::enable_shared_from_this<SocketSession> {
 public:
  SocketSession(Daemon* daemon, asio::local::stream_protocol::socket socket, const SocketLimits& limits,
                std::shared_ptr<std::atomic<size_t>> count, std::shared_ptr<const ApiKey> scope)
      : daemon_(daemon),
        scope_(std::move(scope)),
        socket_(std::move(socket)),
        limits_(limits),
        count_(std::move(count)),
        connection_(std::make_shared<Connection>(limits.on_disconnect)),
        timer_(socket_.get_executor()) {}
  ~SocketSession() { count_->fetch_sub(1); }

  void Start() {
    last_activity_ = Clock::now();
    Read();
    ArmTimer();
  }

 private:
  using Clock = std::chrono::steady_clock;

  void Read() {
    socket_.async_read_some(asio::buffer(chunk_), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
      self->OnRead(ec, n);
    });
  }

  void OnRead(boost::system::error_code ec, size_t n) {
    if (ec) return ReadEnded(ec);
    const Clock::time_point now = Clock::now();
    if (pending_.empty()) line_started_ = now;
    // What was read before holds no newline (each is consumed below): only
    // the new bytes are searched, so a line of many reads (a files.put of
    // megabytes) costs its length, not its length squared.
    const size_t scanned = pending_.size();
    pending_.append(chunk_.data(), n);
    size_t start = 0;
    for (size_t nl; (nl = pending_.find('\n', std::max(start, scanned))) != std::string::npos; start = nl + 1) {
      std::string line = pending_.substr(start, nl - start);
      last_activity_ = line_started_ = now;  // the next line starts no earlier
      // Replies and notifications go out alike, in the order they come.
      auto send = [self = shared_from_this()](std::string reply) {
        asio::post(self->socket_.get_executor(),
                   [self, reply = std::move(reply)]() mutable { self->Send(std::move(reply)); });
      };
      daemon_->HandleLine(line, send, Origin{connection_, false, send, scope_});
    }
    pending_.erase(0, start);
    if (pending_.size() > limits_.max_line) {
      // Answered, then closed: the rest of the line cannot be told apart
      // from the next one.
      pending_.clear();
      daemon_->CountRejected("line_too_long");
      Send(ErrorReply(nullptr, LineTooLongError(limits_.max_line)));
      closing_ = true;
      timer_.cancel();
      connection_->Disconnect();
      return;
    }
    ArmTimer();
    Read();
  }

  // EOF or an error. A client that only shut down its sending side
  // (SHUT_WR) still reads: its replies go out. Any other end is a
  // disconnect.
  void ReadEnded(boost::system::error_code ec) {
    timer_.cancel();
    if (ec == asio::error::eof && !closed_ && !PeerHungUp()) return;
    connection_->Disconnect();
  }

  bool PeerHungUp() {
    struct pollfd p = {socket_.native_handle(), 0, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)) != 0;
  }

  void ArmTimer() {
    if (closed_) return;
    Clock::time_point when;
    if (!pending_.empty()) {
      when = line_started_ + absl::ToChronoNanoseconds(limits_.line_timeout);
    } else if (limits_.idle_timeout != absl::InfiniteDuration()) {
      when = last_activity_ + absl::ToChronoNanoseconds(limits_.idle_timeout);
    } else {
      timer_.cancel();
      return;
    }
    timer_.expires_at(when);
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->OnTimer();
    });
  }

  void OnTimer() {
    if (closed_ || closing_) return;
    const Clock::time_point now = Clock::now();
    if (!pending_.empty() && now - line_started_ >= absl::ToChronoNanoseconds(limits_.line_timeout)) {
      return Close(absl::StrCat("no complete line within ", absl::ToInt64Milliseconds(limits_.line_timeout),
                                " ms (connections.line_timeout_ms): closing the connection"));
    }
    if (pending_.empty() && limits_.idle_timeout != absl::InfiniteDuration()) {
      // Requests in flight or replies being written are not silence.
      if (connection_->outstanding() > 0 || !queue_.empty()) last_activity_ = now;
      if (now - last_activity_ >= absl::ToChronoNanoseconds(limits_.idle_timeout)) {
        return Close(absl::StrCat("idle for ", absl::ToInt64Milliseconds(limits_.idle_timeout),
                                  " ms (connections.idle_timeout_ms): closing the connection"));
      }
    }
    ArmTimer();
  }

  // Says why (best effort: a client that does not read gets no say), then
  // closes; what it has in flight goes as on any disconnect.
  void Close(const std::string& why) {
    if (queue_.empty()) {
      const std::string line = ErrorReply(nullptr, Error{kInvalidRequest, why, nullptr}) + "\n";
      (void)!::send(socket_.native_handle(), line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    closed_ = true;
    timer_.cancel();
    boost::system::error_code ignored;
    socket_.shutdown(asio::local::stream_protocol::socket::shutdown_both, ignored);
    socket_.close(ignored);
    connection_->Disconnect();
  }

  void Send(std::string reply) {
    if (closed_) return;
    queue_.push_back(std::move(reply) + "\n");
    if (queue_.size() == 1) WriteNext();
  }

  void WriteNext() {
    auto written = [self = shared_from_this()](boost::system::error_code ec, size_t) {
      if (ec) {  // the client is gone
        self->queue_.clear();
        self->connection_->Disconnect();
        return;
      }
      self->queue_.pop_front();
      self->last_activity_ = Clock::now();
      if (!self->queue_.empty()) {
        self->WriteNext();
      } else if (self->closing_) {
        boost::system::error_code ignored;
        self->socket_.shutdown(asio::local::stream_protocol::socket::shutdown_both, ignored);
      }
    };
    asio::async_write(socket_, asio::buffer(queue_.front()), std::move(written));
  }

  Daemon* daemon_;
  std::shared_ptr<const ApiKey> scope_;  // null: every right
  asio::local::stream_protocol::socket socket_;
  const SocketLimits limits_;
  std::shared_ptr<std::atomic<size_t>> count_;  // the listener's count of open connections
  std::shared_ptr<Connection> connection_;
  asio::steady_timer timer_;
  std::array<char, 16384> chunk_;
  std::string pending_;  // read, not yet a whole line
  Clock::time_point line_started_;
  Clock::time_point last_activity_;
  std::deque<std::string> queue_;
  bool closing_ = false;  // answered a line too long: shut down once written
  bool closed_ = false;
};

// What a client of user `uid` may do: null for every right; an error when
// it may not connect at all.
absl::StatusOr<std::shared_ptr<const ApiKey>> PeerScope(const std::shared_ptr<const ApiKeys>& peers, int fd) {
  if (peers == nullptr) return nullptr;
  struct ucred cred {};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("SO_PEERCRED: ", std::strerror(errno)));
  }
  if (cred.uid == 0 || cred.uid == ::geteuid()) return nullptr;
  const ApiKey* entry = peers->FindByUid(cred.uid);
  if (entry == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat("uid ", cred.uid, " has no entry in the keys file"));
  }
  // The entry outlives the connection even if the keys are reloaded.
  return std::shared_ptr<const ApiKey>(peers, entry);
}

}  // namespace

SocketListener::SocketListener(Daemon* daemon, std::unique_ptr<UnixAcceptor> acceptor, const SocketLimits& limits,
                               std::function<void(const std::string&)> warn)
    : daemon_(daemon),
      acceptor_(std::move(acceptor)),
      limits_(limits),
      warn_(std::move(warn)),
      retry_(acceptor_->get_executor()) {}

SocketListener::~SocketListener() { Close(); }

void SocketListener::Close() {
  boost::system::error_code ignored;
  acceptor_->close(ignored);
  retry_.cancel();
}

void SocketListener::Start() {
  acceptor_->async_accept([this](boost::system::error_code ec, asio::local::stream_protocol::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_->is_open()) return;  // closed at shutdown
    if (ec) {
      // Out of descriptors (EMFILE, ENFILE) or memory: the client waits in
      // the backlog, and accepting resumes shortly, never stops.
      if (!retrying_) warn_(absl::StrCat("accept on the socket: ", ec.message(), ": retrying every 100 ms"));
      retrying_ = true;
      retry_.expires_after(std::chrono::milliseconds(100));
      retry_.async_wait([this](boost::system::error_code wait) {
        if (!wait) Start();
      });
      return;
    }
    retrying_ = false;
    if (open_->load() >= limits_.max_connections) {
      // The file limit leaves room for no more (rpc/fd_budget.h): said,
      // then closed, so that the client is not left waiting.
      daemon_->CountRejected("too_many_connections");
      const std::string line =
          ErrorReply(nullptr, Error{kInternalError,
                                    absl::StrCat("out of file descriptors: ", limits_.max_connections,
                                                 " connections are open, as many as RLIMIT_NOFILE leaves room for"),
                                    boost::json::object{{"resource", "connections"}}}) +
          "\n";
      (void)!::send(socket.native_handle(), line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    } else if (absl::StatusOr<std::shared_ptr<const ApiKey>> scope = PeerScope(limits_.peers, socket.native_handle());
               !scope.ok()) {
      daemon_->CountRejected("forbidden");
      const std::string line =
          ErrorReply(nullptr, Error{kForbidden, std::string(scope.status().message()), nullptr}) + "\n";
      (void)!::send(socket.native_handle(), line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    } else {
      open_->fetch_add(1);
      std::make_shared<SocketSession>(daemon_, std::move(socket), limits_, open_, *std::move(scope))->Start();
    }
    Start();
  });
}

}  // namespace cubicle::rpc
