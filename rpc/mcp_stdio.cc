#include "rpc/mcp_stdio.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace cubicle::rpc {

namespace {

// How long EOF waits for the session to close (its calls ended, its
// workspace archived and removed) before the drain goes on without it:
// past the longest run a profile may allow.
constexpr auto kCloseWait = std::chrono::minutes(15);

}  // namespace

class McpStdio::Writer {
 public:
  void Write(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || line.empty()) return;
    const std::string out = line + "\n";
    for (size_t off = 0; off < out.size();) {
      const ssize_t n = ::write(STDOUT_FILENO, out.data() + off, out.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // the client is gone
      off += static_cast<size_t>(n);
    }
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }

 private:
  std::mutex mu_;
  bool closed_ = false;
};

namespace {

class StdoutOutput : public McpOutput {
 public:
  explicit StdoutOutput(std::shared_ptr<McpStdio::Writer> writer) : writer_(std::move(writer)) {}
  void Notify(std::string line) override { writer_->Write(line); }
  void Reply(std::string line) override { writer_->Write(line); }

 private:
  std::shared_ptr<McpStdio::Writer> writer_;
};

}  // namespace

// The wait for the session's close, which the destructor can cut short.
struct McpStdio::CloseWait {
  std::mutex mu;
  std::condition_variable cv;
  bool closed = false;
  bool stopping = false;
};

McpStdio::McpStdio(Daemon* daemon, McpOptions options, size_t max_line, std::function<void()> end,
                   std::function<void(const std::string&)> warn)
    : writer_(std::make_shared<Writer>()),
      session_(McpSession::Create(std::move(options), InProcessMcpLink(daemon, gate_))),
      close_(std::make_shared<CloseWait>()),
      max_line_(max_line),
      end_(std::move(end)),
      warn_(std::move(warn)) {
  if (::pipe2(wake_, O_CLOEXEC) != 0) wake_[0] = wake_[1] = -1;
  reader_ = std::thread([this] { Read(); });
}

McpStdio::~McpStdio() {
  if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
  {
    std::lock_guard<std::mutex> lock(close_->mu);
    close_->stopping = true;
  }
  close_->cv.notify_all();
  reader_.join();
  gate_->Close();
  writer_->Close();
  for (int fd : wake_) {
    if (fd >= 0) ::close(fd);
  }
}

void McpStdio::Read() {
  std::string pending;
  size_t scanned = 0;
  bool discarding = false;
  char buf[65536];
  for (;;) {
    size_t nl;
    while ((nl = pending.find('\n', scanned)) != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      scanned = 0;
      if (!discarding) Take(line);
      discarding = false;
    }
    if (pending.size() > max_line_) {
      if (!discarding) writer_->Write(ErrorReply(nullptr, LineTooLongError(max_line_)));
      discarding = true;
      pending.clear();
    }
    scanned = pending.size();
    struct pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, wake_[0] >= 0 ? 2 : 1, -1) < 0 && errno != EINTR) break;
    if (wake_[0] >= 0 && fds[1].revents != 0) return;  // torn down: no close, no end
    if (fds[0].revents == 0) continue;
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
  }
  // EOF: a last line without its newline still counts.
  if (!pending.empty() && !discarding) Take(pending);
  CloseSession();
  end_();
}

void McpStdio::Take(const std::string& line) {
  if (absl::StripAsciiWhitespace(line).empty()) return;
  session_->Handle(ParseMcpMessage(line), std::make_shared<StdoutOutput>(writer_));
}

void McpStdio::CloseSession() {
  std::shared_ptr<CloseWait> wait = close_;
  // Its calls run to their end first, as a stdio daemon's requests do
  // at EOF; SIGTERM's drain bounds them.
  session_->Close(
      [wait] {
        {
          std::lock_guard<std::mutex> lock(wait->mu);
          wait->closed = true;
        }
        wait->cv.notify_all();
      },
      /*cancel=*/false);
  std::unique_lock<std::mutex> lock(wait->mu);
  if (!wait->cv.wait_for(lock, kCloseWait, [&] { return wait->closed || wait->stopping; })) {
    warn_(absl::StrCat("the MCP session did not close within ", kCloseWait.count(), " minutes: going on without it"));
  }
}

}  // namespace cubicle::rpc
