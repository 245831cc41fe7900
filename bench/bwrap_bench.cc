// `cubicle bwrap` against the system's bubblewrap with the same argv, in the
// same run: the runner's command line from the bwrap-compatibility issue
// (all namespaces, --disable-userns, --cap-drop ALL, /usr and its symlinks,
// /dev, /proc, a /tmp tmpfs, a read-write workspace, a cleared environment)
// around `/bin/true` and `python3 -I -c pass`, with and without a seccomp
// program on fd 3. cubicle runs through a symlink named `bwrap`, as a
// launcher would run it.
//
// Each repetition times one execution (spawn to reap); the repetitions are
// the samples, p50/p90/p99 per execution (bench_stats.h). CUBICLE_BENCH_REPS
// sets how many (default 200); CUBICLE_BINARY points at another build.
#include <fcntl.h>
#include <seccomp.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_stats.h"
#include "benchmark/benchmark.h"

namespace cubicle::bench {
namespace {

constexpr char kSystemBwrap[] = "/usr/bin/bwrap";

// A scratch directory with the workspace and the `bwrap` symlink to cubicle.
struct Scratch {
  std::string dir, workspace, cubicle_bwrap;
  Scratch() {
    char tmpl[] = "/tmp/bwrap-bench-XXXXXX";
    dir = ::mkdtemp(tmpl) != nullptr ? tmpl : "/tmp";
    workspace = dir + "/ws";
    ::mkdir(workspace.c_str(), 0755);
    const char* env = std::getenv("CUBICLE_BINARY");
    std::string binary = env != nullptr && *env != '\0' ? env : CUBICLE_BINARY_PATH;
    cubicle_bwrap = dir + "/bwrap";
    ::symlink(binary.c_str(), cubicle_bwrap.c_str());
  }
  ~Scratch() {
    ::unlink(cubicle_bwrap.c_str());
    ::rmdir(workspace.c_str());
    ::rmdir(dir.c_str());
  }
};

// A function-local static: removed at exit, after the last benchmark.
const Scratch& TheScratch() {
  static const Scratch scratch;
  return scratch;
}

// The runner's seccomp program: allow everything but a few syscalls, as
// launchers do (here: ptrace, bpf, mkdir; the payloads use none).
const std::string& SeccompProgram() {
  static const std::string* program = [] {
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    for (int nr : {SCMP_SYS(ptrace), SCMP_SYS(bpf), SCMP_SYS(mkdir)}) seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
    int fd = ::memfd_create("bpf", MFD_CLOEXEC);
    seccomp_export_bpf(ctx, fd);
    seccomp_release(ctx);
    auto* data = new std::string();
    ::lseek(fd, 0, SEEK_SET);
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0) data->append(buf, static_cast<size_t>(n));
    ::close(fd);
    return data;
  }();
  return *program;
}

std::vector<std::string> RunnerArgv(const std::string& bwrap, bool seccomp, const std::vector<std::string>& payload) {
  std::vector<std::string> argv = {
      bwrap, "--die-with-parent", "--new-session", "--unshare-all", "--unshare-user", "--disable-userns",
      "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib",
      "/lib", "--symlink", "usr/lib64", "/lib64", "--dev", "/dev", "--tmpfs", "/tmp", "--proc", "/proc",
      "--bind", TheScratch().workspace, "/workspace", "--chdir", "/workspace", "--clearenv", "--setenv", "HOME",
      "/tmp", "--setenv", "PATH", "/usr/bin:/bin"};
  if (seccomp) argv.insert(argv.end(), {"--seccomp", "3"});
  argv.push_back("--");
  argv.insert(argv.end(), payload.begin(), payload.end());
  return argv;
}

// posix_spawn + waitpid, stdio on /dev/null, the seccomp program (a fresh
// memfd, made outside the timed region by the caller) on fd 3.
std::string SpawnAndWait(const std::vector<std::string>& args, int fd3) {
  static const int dev_null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (int fd = 0; fd < 3; ++fd) posix_spawn_file_actions_adddup2(&actions, dev_null, fd);
  if (fd3 >= 0) posix_spawn_file_actions_adddup2(&actions, fd3, 3);
  char* envp[] = {const_cast<char*>("PATH=/usr/bin:/bin"), nullptr};
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return absl::StrCat("posix_spawn(", args[0], "): ", std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::StrCat("waitpid: ", std::strerror(errno));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::StrCat(args[0], WIFEXITED(status) ? " exited " : " killed by signal ",
                        WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  }
  return "";
}

int SeccompFd() {
  int fd = ::memfd_create("bpf", MFD_CLOEXEC);
  const std::string& program = SeccompProgram();
  if (fd >= 0 && ::write(fd, program.data(), program.size()) == static_cast<ssize_t>(program.size())) {
    ::lseek(fd, 0, SEEK_SET);
    return fd;
  }
  return -1;
}

void Time(benchmark::State& state, bool cubicle, bool seccomp, const std::vector<std::string>& payload) {
  if (::access(kSystemBwrap, X_OK) != 0) {
    state.SkipWithError("bubblewrap not installed");
    return;
  }
  const std::vector<std::string> argv =
      RunnerArgv(cubicle ? TheScratch().cubicle_bwrap : kSystemBwrap, seccomp, payload);
  // Once untimed: page cache and dentries warm for every contender.
  int fd = seccomp ? SeccompFd() : -1;
  std::string error = SpawnAndWait(argv, fd);
  if (fd >= 0) ::close(fd);
  if (!error.empty()) {
    state.SkipWithError(error.c_str());
    return;
  }
  for (auto _ : state) {
    state.PauseTiming();
    fd = seccomp ? SeccompFd() : -1;
    state.ResumeTiming();
    error = SpawnAndWait(argv, fd);
    state.PauseTiming();
    if (fd >= 0) ::close(fd);
    state.ResumeTiming();
    if (!error.empty()) {
      state.SkipWithError(error.c_str());
      break;
    }
  }
}

const std::vector<std::string> kTrue = {"/bin/true"};
const std::vector<std::string> kPython = {"/usr/bin/python3", "-I", "-c", "pass"};

void BM_BwrapTrue(benchmark::State& s) { Time(s, false, false, kTrue); }
void BM_CubicleBwrapTrue(benchmark::State& s) { Time(s, true, false, kTrue); }
void BM_BwrapTrueSeccomp(benchmark::State& s) { Time(s, false, true, kTrue); }
void BM_CubicleBwrapTrueSeccomp(benchmark::State& s) { Time(s, true, true, kTrue); }
void BM_BwrapPython(benchmark::State& s) { Time(s, false, false, kPython); }
void BM_CubicleBwrapPython(benchmark::State& s) { Time(s, true, false, kPython); }

BENCHMARK(BM_BwrapTrue)->Apply(PerExecution);
BENCHMARK(BM_CubicleBwrapTrue)->Apply(PerExecution);
BENCHMARK(BM_BwrapTrueSeccomp)->Apply(PerExecution);
BENCHMARK(BM_CubicleBwrapTrueSeccomp)->Apply(PerExecution);
BENCHMARK(BM_BwrapPython)->Apply(PerExecution);
BENCHMARK(BM_CubicleBwrapPython)->Apply(PerExecution);

}  // namespace
}  // namespace cubicle::bench

BENCHMARK_MAIN();
