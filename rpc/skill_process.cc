#include "rpc/skill_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "rpc/jsonrpc.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

constexpr size_t kTail = 4096;

void KeepTail(std::string& tail, absl::string_view data) {
  if (data.size() >= kTail) {
    tail = std::string(data.substr(data.size() - kTail));
    return;
  }
  tail.append(data.data(), data.size());
  if (tail.size() > kTail) tail.erase(0, tail.size() - kTail);
}

void Signal(int fd) {
  uint64_t one = 1;
  (void)!::write(fd, &one, sizeof(one));
}

void Drain(int fd) {
  uint64_t n;
  (void)!::read(fd, &n, sizeof(n));
}

absl::StatusOr<UniqueFd> MakeEventFd(const char* what) {
  UniqueFd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!fd) return ErrnoStatus(errno, absl::StrCat("eventfd(", what, ")"));
  return fd;
}

// Milliseconds until `deadline` for poll(2): at least 0, at most a day.
int PollTimeout(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(deadline - absl::Now(), absl::Milliseconds(1)));
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 86'400'000));
}

}  // namespace

SkillProcess::SkillProcess(Options options) : options_(std::move(options)) {}

absl::StatusOr<std::shared_ptr<SkillProcess>> SkillProcess::Start(Options options) {
  std::shared_ptr<SkillProcess> p(new SkillProcess(std::move(options)));
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2(skill stdin)");
  UniqueFd stdin_read(ends[0]);
  p->stdin_write_.reset(ends[1]);
  if (::fcntl(ends[1], F_SETFL, O_NONBLOCK) != 0) return ErrnoStatus(errno, "fcntl(skill stdin, O_NONBLOCK)");
  CUBICLE_ASSIGN_OR_RETURN(p->kill_fd_, MakeEventFd("skill kill"));
  CUBICLE_ASSIGN_OR_RETURN(p->wake_fd_, MakeEventFd("skill call"));
  // The thread holds no reference: Close(), which the destructor calls,
  // joins it before the object goes.
  p->runner_ = std::thread([raw = p.get(), in = std::move(stdin_read)]() mutable { raw->Run(std::move(in)); });
  return p;
}

SkillProcess::~SkillProcess() { Close(); }

void SkillProcess::Run(UniqueFd stdin_read) {
  runtime::ExecRequest request = options_.request;
  request.cancel_fd = kill_fd_.get();
  runtime::CaptureOptions capture;
  // The whole run's own copies are not needed (each call keeps its part,
  // and the tails are kept here): nothing is kept there.
  capture.budget = 0;
  capture.max_line = options_.max_line;
  capture.stdin_fd = stdin_read.get();
  capture.on_stdout_line = [this](absl::string_view text, bool overlong) { return OnLine(text, overlong); };
  capture.on_read = [this](int stream, absl::string_view data) { OnRead(stream, data); };
  absl::StatusOr<runtime::CapturedRun> run = runtime::RunCaptured(options_.runner, std::move(request), "", capture);
  stdin_read.reset();
  std::lock_guard<std::mutex> lock(mu_);
  Ended ended;
  if (run.ok()) {
    ended.result = std::move(run->result);
  } else {
    ended.status = run.status();
  }
  ended.out_tail = out_tail_;
  ended.err_tail = err_tail_;
  ended_ = std::move(ended);
  Wake();
}

// On the runner's thread: one stdout line. Never stops the run (false).
// The line is parsed outside the lock: a call's state is not held up by a
// long line.
bool SkillProcess::OnLine(absl::string_view text, bool overlong) {
  std::optional<json::value> awaited;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (overlong) {
      overlong_ = true;
      Wake();
      return false;
    }
    awaited = awaited_;
  }
  if (awaited.has_value()) {
    if (std::optional<json::object> response = MatchResponse(text, *awaited)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (awaited_ == awaited) {  // not abandoned meanwhile
        response_ = std::move(response);
        awaited_.reset();
        Wake();
      }
      return false;
    }
  }
  std::optional<SkillMessage> message = ParseSkillMessage(text);
  if (!message.has_value()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_call_ && stdout_logs_.size() < options_.log_budget) {
      absl::StrAppend(&stdout_logs_, text.substr(0, options_.log_budget - stdout_logs_.size()), "\n");
    }
    return false;
  }
  if (!message->request) {
    NotificationSink sink;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (in_call_) ++notifications_;
      sink = sink_;
    }
    // Sent at once, on this thread, before any later line is read: the
    // client sees the notifications before the response.
    if (sink) sink(message->object);
    return false;
  }
  if (options_.on_request) {
    options_.on_request(*this, std::move(message->object));
  } else {
    (void)Send(ErrorReply(message->object.at("id"), Error{kMethodNotFound, "this skill may not send requests", nullptr}),
               absl::Now() + absl::Seconds(1));
  }
  return false;
}

void SkillProcess::OnRead(int stream, absl::string_view data) {
  std::lock_guard<std::mutex> lock(mu_);
  KeepTail(stream == 0 ? out_tail_ : err_tail_, data);
  if (stream != 1) return;
  if (logs_.size() < options_.log_budget) {
    const size_t room = options_.log_budget - logs_.size();
    logs_.append(data.data(), std::min(room, data.size()));
    if (data.size() > room) logs_truncated_ = true;
  } else if (!data.empty()) {
    logs_truncated_ = true;
  }
}

void SkillProcess::Wake() { Signal(wake_fd_.get()); }

SkillProcess::CallOutcome SkillProcess::Call(absl::string_view method, const json::value& params,
                                             absl::Duration timeout, int cancel_fd,
                                             NotificationSink on_notification) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  CallOutcome out;
  json::value id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_call_) {
      out.end = CallEnd::kBusy;
      return out;
    }
    if (ended_.has_value()) return out;  // kEnded
    in_call_ = true;
    id = static_cast<int64_t>(++next_id_);
    awaited_ = id;
    sink_ = std::move(on_notification);
    response_.reset();
    stdout_logs_.clear();
    Drain(wake_fd_.get());
  }
  calls_.fetch_add(1);
  const std::string line = Request(id, method, params.is_null() ? json::value(json::object()) : params);
  // What the call leaves behind for the next, whatever ends it.
  auto finish = [&](CallEnd end) {
    std::lock_guard<std::mutex> lock(mu_);
    out.end = end;
    if (end == CallEnd::kAnswered) out.response = std::move(*response_);
    out.logs = std::exchange(logs_, {});
    out.logs_truncated = std::exchange(logs_truncated_, false);
    out.stdout_logs = std::exchange(stdout_logs_, {});
    out.notifications = std::exchange(notifications_, 0);
    awaited_.reset();
    sink_ = nullptr;
    response_.reset();
    in_call_ = false;
    out.wall = absl::Now() - start;
    return out;
  };
  if (absl::Status sent = Send(line, deadline); !sent.ok()) {
    return finish(ended() ? CallEnd::kEnded : CallEnd::kStdinFull);
  }
  for (;;) {
    std::optional<CallEnd> end;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (response_.has_value()) {
        end = CallEnd::kAnswered;
      } else if (overlong_) {
        end = CallEnd::kOverlong;
      } else if (ended_.has_value()) {
        end = CallEnd::kEnded;
      }
    }
    if (end.has_value()) return finish(*end);
    struct pollfd fds[2] = {{wake_fd_.get(), POLLIN, 0}, {cancel_fd, POLLIN, 0}};
    const int ready = ::poll(fds, cancel_fd >= 0 ? 2 : 1, PollTimeout(deadline));
    if (ready < 0 && errno != EINTR) return finish(CallEnd::kEnded);
    if (ready == 0) return finish(CallEnd::kTimedOut);
    if (ready > 0 && cancel_fd >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      return finish(CallEnd::kCancelled);
    }
    if (ready > 0 && (fds[0].revents & POLLIN)) Drain(wake_fd_.get());
  }
}

absl::Status SkillProcess::Send(absl::string_view line, absl::Time deadline) {
  std::lock_guard<std::mutex> lock(send_mu_);
  std::string data = absl::StrCat(line, "\n");
  size_t off = 0;
  while (off < data.size()) {
    if (!stdin_write_) return absl::FailedPreconditionError("the skill's stdin is closed");
    const ssize_t n = ::write(stdin_write_.get(), data.data() + off, data.size() - off);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) return ErrnoStatus(errno, "write(skill stdin)");
    // Full: the skill is not reading yet. Wait for room, its end (the
    // read end closes with it) or the deadline.
    struct pollfd fds[2] = {{stdin_write_.get(), POLLOUT, 0}, {kill_fd_.get(), POLLIN, 0}};
    const int ready = ::poll(fds, 2, PollTimeout(deadline));
    if (ready == 0) return absl::DeadlineExceededError("the skill did not read its stdin in time");
    if (ready > 0 && (fds[1].revents & POLLIN)) return absl::CancelledError("the skill is being closed");
    if (ready > 0 && (fds[0].revents & (POLLERR | POLLHUP))) return ErrnoStatus(EPIPE, "write(skill stdin)");
  }
  return absl::OkStatus();
}

bool SkillProcess::Spawn(std::function<void(int cancel_fd)> work) {
  // Each its own cancel fd: the work may write it itself (a line hook
  // stopping its run once answered), which must not stop the others.
  absl::StatusOr<UniqueFd> cancel = MakeEventFd("skill callee");
  if (!cancel.ok()) return false;
  std::lock_guard<std::mutex> lock(close_mu_);
  if (closed_) return false;
  spawn_cancel_fds_.push_back(*std::move(cancel));
  spawned_.emplace_back([work = std::move(work), fd = spawn_cancel_fds_.back().get()] { work(fd); });
  return true;
}

const SkillProcess::Ended& SkillProcess::Close() {
  std::vector<std::thread> spawned;
  {
    std::lock_guard<std::mutex> lock(close_mu_);
    if (!closed_) {
      closed_ = true;
      // What it started first (callees), then the skill itself.
      for (const UniqueFd& fd : spawn_cancel_fds_) Signal(fd.get());
      spawned = std::move(spawned_);
      Signal(kill_fd_.get());
    }
  }
  {
    // A second Close() waits for the first's joins. close_mu_ is not held
    // here: the runner's thread may be in Spawn() until it sees the kill.
    std::lock_guard<std::mutex> lock(join_mu_);
    for (std::thread& t : spawned) t.join();
    if (runner_.joinable()) {
      if (runner_.get_id() == std::this_thread::get_id()) {
        runner_.detach();  // never: the runner holds no reference (Start)
      } else {
        runner_.join();
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    stdin_write_.reset();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!ended_.has_value()) ended_ = Ended{absl::CancelledError("closed before it started"), {}, {}, {}};
  return *ended_;
}

bool SkillProcess::ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_.has_value();
}

std::optional<SkillProcess::Ended> SkillProcess::Outcome() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_;
}

}  // namespace cubicle::rpc
