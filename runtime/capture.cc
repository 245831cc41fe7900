#include "runtime/capture.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "base/status.h"
#include "base/unique_fd.h"

namespace cubicle::runtime {

Runner FreshSandboxRunner(SandboxSpec spec) {
  return [spec = std::move(spec)](const ExecRequest& r) -> absl::StatusOr<ExecResult> {
    ZygoteOptions options;
    options.wait_until_ready = false;
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

// Reads both pipes until both are at EOF — or, once the line hook has
// what it wanted, until neither holds more data: what the payload wrote
// before its answer is in the pipes already, and nothing after it is
// needed, so the caller does not wait for the sandbox to die.
void Drain(Stream (&streams)[2], uint64_t budget, LineSplitter* lines) {
  char buf[65536];
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
      if (!streams[i].open || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(streams[i].read_end.get(), buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        streams[i].open = false;
        if (i == 0) lines->Finish();
        continue;
      }
      Stream& s = streams[i];
      if (i == 0) lines->Feed(buf, static_cast<size_t>(n));
      *s.total += static_cast<uint64_t>(n);
      uint64_t room = budget > s.data->size() ? budget - s.data->size() : 0;
      s.data->append(buf, static_cast<size_t>(std::min<uint64_t>(room, static_cast<uint64_t>(n))));
      if (static_cast<uint64_t>(n) > room) *s.truncated = true;
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
  const uint64_t budget = options.budget;
  UniqueFd cancel(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!cancel) return ErrnoStatus(errno, "eventfd(cancel)");
  UniqueFd in(::memfd_create("cubicle-stdin", MFD_CLOEXEC));
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
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2(stdout)");
  UniqueFd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2(stderr)");
  UniqueFd err_read(err_pipe[0]), err_write(err_pipe[1]);

  CapturedRun captured;
  Stream streams[2] = {{std::move(out_read), &captured.out, &captured.out_truncated, &captured.out_total},
                       {std::move(err_read), &captured.err, &captured.err_truncated, &captured.err_total}};
  LineSplitter lines{&options, cancel.get()};
  std::thread drain([&streams, budget, &lines] { Drain(streams, budget, &lines); });
  request.stdin_fd = in.get();
  if (options.on_stdout_line) request.cancel_fd = cancel.get();
  request.stdout_fd = out_write.get();
  request.stderr_fd = err_write.get();
  absl::StatusOr<ExecResult> result = run(request);
  // The sandbox is gone: closing our write ends lets the drain reach EOF.
  out_write.reset();
  err_write.reset();
  drain.join();
  if (!result.ok()) return result.status();
  captured.result = *std::move(result);
  return captured;
}

}  // namespace cubicle::runtime
