#include "runtime/capture.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>

#include "base/status.h"
#include "base/unique_fd.h"

namespace cubicle::runtime {

Runner FreshSandboxRunner(SandboxSpec spec, ZygoteOptions options) {
  options.wait_until_ready = false;
  return [spec = std::move(spec), options = std::move(options)](const ExecRequest& r) -> absl::StatusOr<ExecResult> {
    absl::StatusOr<std::unique_ptr<Zygote>> zygote = Zygote::Create(spec, options);
    if (!zygote.ok()) return zygote.status();
    return (*zygote)->Run(r);
  };
}
namespace {

struct Stream {
  UniqueFd read_end;
  std::string* data;
  bool* truncated;
  uint64_t* total;
  bool open = true;
};

// Splits stdout into lines for the hook; tells the execution to stop
// (through the cancel eventfd) once the hook says so.
struct LineSplitter {
  const CaptureOptions* options;
  int cancel_fd;
  std::string line;
  bool overlong = false;
  bool stopped = false;
  std::function<void()> before_line;

  void Feed(const char* data, size_t n) {
    if (!options->on_stdout_line || stopped) return;
    for (size_t i = 0; i < n && !stopped; ++i) {
      if (data[i] == '\n') {
        Emit();
        continue;
      }
      if (line.size() < options->max_line) {
        line.push_back(data[i]);
      } else if (!overlong) {
        overlong = true;
        Stop(options->on_stdout_line(line, true));
      }
    }
  }
  void Finish() {
    if (!line.empty() && !stopped) Emit();
  }
  void Emit() {
    // What the payload wrote to stderr before this line is read first: a
    // hook that ends a call on its answer then has the call's whole log.
    if (before_line) before_line();
    if (!overlong) Stop(options->on_stdout_line(line, false));
    line.clear();
    overlong = false;
  }
  void Stop(bool stop) {
    if (!stop) return;
    stopped = true;
    uint64_t one = 1;
    (void)!::write(cancel_fd, &one, sizeof(one));
  }
};

// One read of a readable (or closed) pipe: the bytes are kept up to the
// budget and fed to the line hook. False at EOF (or a read error), when the
// stream is closed.
bool ReadOnce(Stream& s, bool is_stdout, const CaptureOptions& options, LineSplitter* lines) {
  const uint64_t budget = options.budget;
  char buf[65536];
  ssize_t n;
  do {
    n = ::read(s.read_end.get(), buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  // Nothing now (the read ends are non-blocking): a stderr read ahead of a
  // stdout line (LineSplitter::before_line) took what a poll had seen.
  if (n < 0 && errno == EAGAIN) return true;
  if (n <= 0) {
    s.open = false;
    if (is_stdout) lines->Finish();
    return false;
  }
  if (is_stdout) lines->Feed(buf, static_cast<size_t>(n));
  if (options.on_read) options.on_read(is_stdout ? 0 : 1, absl::string_view(buf, static_cast<size_t>(n)));
  *s.total += static_cast<uint64_t>(n);
  uint64_t room = budget > s.data->size() ? budget - s.data->size() : 0;
  const size_t kept = static_cast<size_t>(std::min<uint64_t>(room, static_cast<uint64_t>(n)));
  s.data->append(buf, kept);
  if (kept > 0 && options.on_kept) options.on_kept(is_stdout ? 0 : 1, absl::string_view(buf, kept));
  if (static_cast<uint64_t>(n) > room) *s.truncated = true;
  return true;
}

// What is left once the execution has returned: both pipes until both are
// at EOF — or, once the line hook has what it wanted, until neither holds
// more data: what the payload wrote before its answer is in the pipes
// already, and nothing after it is needed, so the caller does not wait for
// the sandbox to die.
void Drain(Stream (&streams)[2], const CaptureOptions& options, LineSplitter* lines) {
  while (streams[0].open || streams[1].open) {
    struct pollfd fds[2];
    for (int i = 0; i < 2; ++i) fds[i] = {streams[i].open ? streams[i].read_end.get() : -1, POLLIN, 0};
    int ready = ::poll(fds, 2, lines->stopped ? 0 : -1);
    if (ready == 0) return;  // stopped, and everything written so far is read
    if (ready < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (int i = 0; i < 2; ++i) {
      if (streams[i].open && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
        ReadOnce(streams[i], i == 0, options, lines);
      }
    }
  }
}

}  // namespace

absl::StatusOr<CapturedRun> RunCaptured(const Runner& run, ExecRequest request, absl::string_view stdin_data,
                                        uint64_t budget) {
  CaptureOptions options;
  options.budget = budget;
  return RunCaptured(run, std::move(request), stdin_data, options);
}

absl::StatusOr<CapturedRun> RunCaptured(const Runner& run, ExecRequest request, absl::string_view stdin_data,
                                        const CaptureOptions& options) {
  // The line hook's way to stop the execution: the caller's own cancel
  // eventfd (Zygote::Run watches one), else one made for the hook.
  UniqueFd cancel;
  if (options.on_stdout_line && request.cancel_fd < 0) {
    cancel.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!cancel) return ErrnoStatus(errno, "eventfd(cancel)");
    request.cancel_fd = cancel.get();
  }
  // No stdin: /dev/null, opened once for all (reads give EOF at once, as
  // an empty memfd's did), which spares each such request a memfd's
  // creation and release.
  static const int dev_null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  UniqueFd in;
  if (options.stdin_fd < 0 && (!stdin_data.empty() || dev_null < 0)) {
    in.reset(::memfd_create("cubicle-stdin", MFD_CLOEXEC));
    if (!in) return ErrnoStatus(errno, "memfd_create(stdin)");
    for (size_t off = 0; off < stdin_data.size();) {
      ssize_t n = ::write(in.get(), stdin_data.data() + off, stdin_data.size() - off);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "write(stdin memfd)");
      }
      off += static_cast<size_t>(n);
    }
    ::lseek(in.get(), 0, SEEK_SET);
  }
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2(stdout)");
  UniqueFd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2(stderr)");
  UniqueFd err_read(err_pipe[0]), err_write(err_pipe[1]);
  if (::fcntl(out_pipe[0], F_SETFL, O_NONBLOCK) != 0 || ::fcntl(err_pipe[0], F_SETFL, O_NONBLOCK) != 0) {
    return ErrnoStatus(errno, "fcntl(output pipes, O_NONBLOCK)");
  }

  CapturedRun captured;
  Stream streams[2] = {{std::move(out_read), &captured.out, &captured.out_truncated, &captured.out_total},
                       {std::move(err_read), &captured.err, &captured.err_truncated, &captured.err_total}};
  LineSplitter lines{&options, request.cancel_fd};
  lines.before_line = [&] {
    Stream& err = streams[1];
    for (int i = 0; i < 16 && err.open; ++i) {
      struct pollfd fd = {err.read_end.get(), POLLIN, 0};
      if (::poll(&fd, 1, 0) <= 0 || !(fd.revents & (POLLIN | POLLHUP | POLLERR))) return;
      ReadOnce(err, false, options, &lines);
    }
  };
  request.stdin_fd = options.stdin_fd >= 0 ? options.stdin_fd : in ? in.get() : dev_null;
  request.stdout_fd = out_write.get();
  request.stderr_fd = err_write.get();
  // While it runs, the pipes are read in Zygote::Run's own wait: no thread
  // to start and join per execution (each was a clone, its stack's page
  // faults and two wake-ups on the request path).
  request.output_fds[0] = streams[0].read_end.get();
  request.output_fds[1] = streams[1].read_end.get();
  request.on_output = [&](int i) { return ReadOnce(streams[i], i == 0, options, &lines); };
  absl::StatusOr<ExecResult> result = run(request);
  // The payload has ended: with our write ends closed, the rest of the
  // output reaches EOF once the sandbox's last process is gone.
  out_write.reset();
  err_write.reset();
  Drain(streams, options, &lines);
  if (!result.ok()) return result.status();
  captured.result = *std::move(result);
  return captured;
}

}  // namespace cubicle::runtime
