// Siblings of one warm template (runtime/warm_template.h, issue 27): every
// child's interpreter is a fork of the same template interpreter, so what
// one child does must never reach another — its processes, its files, its
// memory and module state, its random numbers, its fds, its namespaces
// and cgroup. Each test makes one template and two or three children of
// it, and has the children look for each other while both are alive: the
// first is held (it waits on its stdin) while the test and its sibling
// look, so that "not seen" never means "already gone".
//
// The suite is named Core* so that tests/rootless.sh runs it unprivileged
// too, and instantiated as WarmTemplate/... so that
// --gtest_filter='WarmTemplate*' picks it. Each test runs twice: with only
// json preloaded, and with the standard library's random sources
// (random, secrets, uuid, tempfile) imported in the template before any
// child is forked.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "runtime/warm_template.h"
#include "runtime/zygote.h"
#include "tests/support/host_probes.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

// ---- What the children run ---------------------------------------------------

// Every payload starts with this. A payload says `key=value` lines (out),
// single words the test waits for (say), and waits for the test's go-ahead,
// one line on its stdin (wait; "" at EOF, when the test lets it end).
constexpr char kPrelude[] = R"py(
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def out(key, value):
    print("%s=%s" % (key, value), flush=True)
def say(word):
    print(word, flush=True)
def wait():
    return sys.stdin.readline().strip()
def errname(e):
    return errno.errorcode.get(e, str(e))
def name_self(name):
    # How the test finds this process's host pid: by its comm.
    with open("/proc/self/comm", "w") as f:
        f.write(name)
def visible_pids():
    return sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
)py";

// Names itself, says what it sees, then (told the sibling's host pid)
// looks for the sibling and tries to signal it, SIGKILL included.
constexpr char kProcesses[] = R"py(
name_self(sys.argv[1])
out("pid", os.getpid())
out("pids", " ".join(map(str, visible_pids())))
say("ready")
target = int(wait())
pids = visible_pids()
out("probe_pids", " ".join(map(str, pids)))
comms = []
for p in pids:
    try:
        with open("/proc/%d/comm" % p) as f:
            comms.append(f.read().strip())
    except OSError as e:
        comms.append("?" + errname(e.errno))
out("comms", " ".join(comms))
out("exists", os.path.exists("/proc/%d" % target))
for sig in (0, 9):
    if target in pids:
        out("kill%d" % sig, "visible")  # one of its own: never signalled
        continue
    try:
        os.kill(target, sig)
        out("kill%d" % sig, "ok")
    except OSError as e:
        out("kill%d" % sig, errname(e.errno))
say("probed")
wait()
out("end", "released")
)py";

// Writes its token to /tmp/secret once told its sibling has written its
// own, then reads it back at the end.
constexpr char kTmp[] = R"py(
token = sys.argv[1]
def secret():
    try:
        with open("/tmp/secret") as f:
            return f.read()
    except OSError as e:
        return errname(e.errno)
out("before", " ".join(sorted(os.listdir("/tmp"))))
say("ready")
wait()
out("found", secret())
with open("/tmp/secret", "w") as f:
    f.write(token)
out("listing", " ".join(sorted(os.listdir("/tmp"))))
say("written")
wait()
out("after", secret())
)py";

// Creates a file named after its token in every directory it can write
// to: each read-write mount but /proc's and /sys's (which hold no file a
// payload makes), walked without leaving that mount, at most 2000
// directories in all. Then, told the sibling's files, says which of them
// it finds, and whether its own still hold its token.
constexpr char kWritable[] = R"py(
token = sys.argv[1]
mounts = set()
with open("/proc/self/mountinfo") as f:
    for line in f:
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if "rw" in fields[5].split(",") and fstype not in ("proc", "sysfs"):
            mounts.add(fields[4])
made, walked = [], 0
for top in sorted(mounts):
    try:
        device = os.stat(top).st_dev
    except OSError:
        continue
    stack = [top]
    while stack and walked < 2000:
        directory = stack.pop()
        walked += 1
        path = os.path.join(directory, ".sibling-" + token)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError:
            pass
        else:
            os.write(fd, token.encode())
            os.close(fd)
            made.append(path)
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False) and e.stat(follow_symlinks=False).st_dev == device:
                    stack.append(e.path)
            except OSError:
                pass
out("mounts", " ".join(sorted(mounts)))
out("walked", walked)
out("made", " ".join(made))
say("ready")
theirs = wait().split()
out("found", " ".join(p for p in theirs if os.path.exists(p)))
kept = []
for p in made:
    with open(p) as f:
        kept.append(f.read() == token)
out("kept", all(kept))
)py";

// Holds a secret in a buffer and in the state of a preloaded module; told
// the sibling's host pid and where its secret lies, tries to read it (by
// /proc/PID/mem and process_vm_readv), and searches its own whole address
// space for any child's secret.
constexpr char kMemory[] = R"py(
import json, re
name_self(sys.argv[2])
marker = "cubicle-sibling-secret:" + sys.argv[1]
held = ctypes.create_string_buffer(marker.encode())
out("address", ctypes.addressof(held))
out("length", len(marker))
# The preloaded module as the template left it, then made this child's own.
out("pristine_mark", getattr(json, "cubicle_sibling", None))
out("pristine_dumps", json.dumps([1, 2]))
json.cubicle_sibling = sys.argv[1]
json.JSONEncoder.item_separator = ";"
out("own_dumps", json.dumps([1, 2]))
say("ready")
target, address, length = (int(x) for x in wait().split())
try:
    fd = os.open("/proc/%d/mem" % target, os.O_RDONLY)
    try:
        out("their_mem", os.pread(fd, length, address).hex())
    finally:
        os.close(fd)
except OSError as e:
    out("their_mem", errname(e.errno))

class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
local = ctypes.create_string_buffer(length)
mine, theirs = iovec(ctypes.addressof(local), length), iovec(address, length)
libc.process_vm_readv.restype = ctypes.c_ssize_t
libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p,
                                  ctypes.c_ulong, ctypes.c_ulong]
n = libc.process_vm_readv(target, ctypes.byref(mine), 1, ctypes.byref(theirs), 1, 0)
out("vm_readv", errname(ctypes.get_errno()) if n < 0 else "read " + local.raw[:n].hex())

# Every readable mapping of this process, in 8 MiB reads that overlap by
# 64 bytes, at most 1 GiB in all.
pattern = re.compile(rb"cubicle-sibling-secret:([0-9a-f]{32})")
seen, scanned, capped = set(), 0, False
with open("/proc/self/maps") as f:
    maps = f.read().splitlines()
fd = os.open("/proc/self/mem", os.O_RDONLY)
for line in maps:
    fields = line.split()
    if fields[1][0] != "r" or (len(fields) > 5 and fields[5].startswith("[v")):
        continue  # [vvar], [vsyscall]: not memory of this process's
    start, end = (int(x, 16) for x in fields[0].split("-"))
    at = start
    while at < end and not capped:
        try:
            data = os.pread(fd, min(1 << 23, end - at), at)
        except OSError:
            break
        if not data:
            break
        scanned += len(data)
        capped = scanned > (1 << 30)
        seen.update(m.group(1).decode() for m in pattern.finditer(data))
        at += len(data) - 64 if len(data) > 64 and at + len(data) < end else len(data)
os.close(fd)
out("secrets_seen", " ".join(sorted(seen)))
out("capped", capped)
out("mark_now", json.cubicle_sibling)
say("probed")
wait()
)py";

// What a sibling could predict if the template's random state were shared.
constexpr char kRandom[] = R"py(
import random, secrets, tempfile, uuid
out("random", repr(random.random()))
out("getrandbits", random.getrandbits(64))
out("urandom", os.urandom(16).hex())
out("token_hex", secrets.token_hex(16))
out("uuid4", uuid.uuid4())
out("tempfile_name", next(tempfile._get_candidate_names()))
)py";

// Its open fds, with what each is: the listing's own directory fd is
// closed by the time it is looked at, and left out.
constexpr char kFds[] = R"py(
name_self(sys.argv[1])
numbers, targets = [], []
for n in sorted(os.listdir("/proc/self/fd"), key=int):
    try:
        targets.append("%s -> %s" % (n, os.readlink("/proc/self/fd/" + n)))
    except OSError:
        continue
    numbers.append(n)
out("fds", " ".join(numbers))
out("targets", ", ".join(targets))
say("ready")
wait()
)py";

// Its namespaces, and in two of them something of its own: an abstract
// unix socket (net) and a System V shared memory segment (ipc). Told the
// sibling's token, tries to reach the sibling's.
constexpr char kNamespaces[] = R"py(
import socket
name_self(sys.argv[1])
token = sys.argv[2]
for ns in ("pid", "net", "mnt", "ipc", "uts", "cgroup", "user"):
    out("ns_" + ns, os.readlink("/proc/self/ns/" + ns))
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind("\0cubicle-sibling-" + token)
listener.listen(1)
IPC_CREAT = 0o1000
def shm(name, flags):
    if libc.shmget(int(name[:7], 16), 4096, flags) < 0:
        return errname(ctypes.get_errno())
    return "ok"
out("shm_made", shm(token, IPC_CREAT | 0o600))
say("ready")
other = wait()
def connect(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect("\0cubicle-sibling-" + name)
        return "ok"
    except OSError as e:
        return errname(e.errno)
    finally:
        s.close()
out("connect_own", connect(token))
out("connect_other", connect(other))
out("shm_own", shm(token, 0))
out("shm_other", shm(other, 0))
say("probed")
wait()
)py";

// ---- The test's side -----------------------------------------------------------

using Facts = std::map<std::string, std::string>;

// The `key=value` lines of `text` (other lines are left out).
Facts ParseFacts(absl::string_view text) {
  Facts facts;
  for (const std::string& line : Lines(text)) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) facts[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return facts;
}

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) std::abort();  // getrandom cannot fail for a few bytes once the pool is up
    got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(raw);
}

// The host pids of processes whose comm is `name` (a child's, set by
// name_self).
std::vector<pid_t> HostPidsNamed(const std::string& name) {
  std::vector<pid_t> pids;
  for (const std::string& entry : ListDirectory("/proc")) {
    pid_t pid;
    if (!absl::SimpleAtoi(entry, &pid)) continue;
    std::string comm = ReadFile(absl::StrCat("/proc/", pid, "/comm"));
    if (absl::StripSuffix(comm, "\n") == name) pids.push_back(pid);
  }
  return pids;
}

std::string ReadLink(const std::string& path) {
  char target[512];
  ssize_t n = ::readlink(path.c_str(), target, sizeof(target));
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : absl::StrCat("readlink: ", std::strerror(errno));
}

// This process's cgroups anywhere under /sys/fs/cgroup (cgroups/cgroup.cc
// names them cubicle-<pid>-<n>): its own pid in the name keeps tests in
// other processes out of the comparison. At most 6 levels deep and 50000
// directories.
std::set<std::string> OwnCgroups() {
  const std::string prefix = absl::StrCat("cubicle-", ::getpid(), "-");
  std::set<std::string> found;
  std::vector<std::pair<std::string, int>> stack = {{"/sys/fs/cgroup", 0}};
  int walked = 0;
  while (!stack.empty() && walked < 50000) {
    auto [dir, depth] = stack.back();
    stack.pop_back();
    ++walked;
    for (const std::string& name : ListDirectory(dir)) {
      const std::string path = absl::StrCat(dir, "/", name);
      struct stat st;
      if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
      if (absl::StartsWith(name, prefix)) found.insert(path);
      if (depth < 6) stack.emplace_back(path, depth + 1);
    }
  }
  return found;
}

// A child's payload running on a thread of its own, stdin and stdout on
// pipes: the test reads what it says and tells it when to go on, while it
// and its sibling are both alive. Destruction cancels a payload the test
// did not Finish and waits for Run() to return.
class HeldChild {
 public:
  HeldChild(runtime::Zygote& zygote, runtime::ExecRequest request) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) std::abort();
    stdin_read_.reset(in[0]);
    stdin_write_.reset(in[1]);
    stdout_read_.reset(out[0]);
    stdout_write_.reset(out[1]);
    stderr_.reset(::memfd_create("held-child-stderr", MFD_CLOEXEC));
    cancel_.reset(::eventfd(0, EFD_CLOEXEC));
    done_.reset(::eventfd(0, EFD_CLOEXEC));
    if (!stderr_ || !cancel_ || !done_) std::abort();
    request.stdin_fd = stdin_read_.get();
    request.stdout_fd = stdout_write_.get();
    request.stderr_fd = stderr_.get();
    request.cancel_fd = cancel_.get();
    thread_ = std::thread([this, &zygote, request] {
      result_ = zygote.Run(request);
      const uint64_t one = 1;
      (void)!::write(done_.get(), &one, sizeof(one));
    });
  }
  ~HeldChild() {
    if (!thread_.joinable()) return;
    const uint64_t one = 1;
    (void)!::write(cancel_.get(), &one, sizeof(one));
    thread_.join();
  }
  HeldChild(const HeldChild&) = delete;
  HeldChild& operator=(const HeldChild&) = delete;

  // The write end of the payload's stdout, as this process holds it.
  int stdout_fd() const { return stdout_write_.get(); }

  // One line to the payload's stdin.
  bool Send(absl::string_view line) {
    std::string data = absl::StrCat(line, "\n");
    return ::write(stdin_write_.get(), data.data(), data.size()) == static_cast<ssize_t>(data.size());
  }

  // The facts the payload says until it says `word`; an error when it ends
  // first or says nothing for `limit`.
  absl::StatusOr<Facts> ReadUntil(absl::string_view word, absl::Duration limit = absl::Seconds(30)) {
    const absl::Time deadline = absl::Now() + limit;
    std::string said;
    for (;;) {
      size_t newline;
      while ((newline = buffered_.find('\n')) != std::string::npos) {
        std::string line = buffered_.substr(0, newline);
        buffered_.erase(0, newline + 1);
        if (line == word) return ParseFacts(said);
        absl::StrAppend(&said, line, "\n");
      }
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError(absl::StrCat("no \"", word, "\" within ", absl::FormatDuration(limit),
                                                        "; said:\n", said));
      }
      struct pollfd fds[2] = {{stdout_read_.get(), POLLIN, 0}, {done_.get(), POLLIN, 0}};
      if (::poll(fds, 2, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) < 0 && errno != EINTR) {
        return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
      }
      if (fds[0].revents & POLLIN) {
        char buf[4096];
        ssize_t n = ::read(stdout_read_.get(), buf, sizeof(buf));
        if (n > 0) buffered_.append(buf, static_cast<size_t>(n));
        continue;  // what it said before it ended is read first
      }
      if (fds[1].revents & POLLIN) {
        if (thread_.joinable()) thread_.join();
        std::string err = ReadStderr();
        return absl::FailedPreconditionError(absl::StrCat(
            "the payload ended before saying \"", word, "\": ",
            result_.ok() ? absl::StrCat("exit ", result_->exit_code, " ", result_->setup_error.ToString())
                         : result_.status().ToString(),
            "; said:\n", said, buffered_, "stderr:\n", err));
      }
    }
  }

  // Closes the payload's stdin (its last wait() returns "") and waits for
  // its end: its result, what it said since the last ReadUntil, its stderr.
  absl::StatusOr<SandboxRun> Finish() {
    stdin_write_.reset();
    if (thread_.joinable()) thread_.join();
    if (!result_.ok()) return result_.status();
    // The sandbox is gone: all it wrote is in the pipe already.
    if (::fcntl(stdout_read_.get(), F_SETFL, O_NONBLOCK) != 0) return absl::InternalError("fcntl(O_NONBLOCK)");
    char buf[4096];
    for (int i = 0; i < 1024; ++i) {
      ssize_t n = ::read(stdout_read_.get(), buf, sizeof(buf));
      if (n <= 0) break;
      buffered_.append(buf, static_cast<size_t>(n));
    }
    SandboxRun run;
    run.result = *result_;
    run.out = std::exchange(buffered_, "");
    run.err = ReadStderr();
    return run;
  }

 private:
  std::string ReadStderr() {
    std::string err;
    char buf[4096];
    for (off_t at = 0; at < (1 << 20);) {
      ssize_t n = ::pread(stderr_.get(), buf, sizeof(buf), at);
      if (n <= 0) break;
      err.append(buf, static_cast<size_t>(n));
      at += n;
    }
    return err;
  }

  UniqueFd stdin_read_, stdin_write_, stdout_read_, stdout_write_, stderr_, cancel_, done_;
  std::string buffered_;
  absl::StatusOr<runtime::ExecResult> result_ = absl::UnknownError("not run");
  std::thread thread_;
};

// Whether this process may make a user namespace with a mount namespace
// in it, as a template's sandbox needs: tried in a forked child
// (unshare(CLONE_NEWUSER) needs a single-threaded caller).
HostProperty ProbeUserNamespaces() {
  pid_t pid = ::fork();
  if (pid < 0) return HostProperty::Absent(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) _exit(::unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0 ? 0 : errno);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return HostProperty::Present();
  return HostProperty::Absent(absl::StrCat(
      "a warm template's sandbox needs a user namespace, and unshare(CLONE_NEWUSER|CLONE_NEWNS) failed here: ",
      WIFEXITED(status) ? std::strerror(WEXITSTATUS(status)) : "the probe was killed"));
}

const HostProperty& UserNamespaces() {
  static const HostProperty property = ProbeUserNamespaces();
  return property;
}

struct Preloads {
  const char* name;
  std::vector<std::string> modules;
};

const Preloads kPreloads[] = {
    {"Json", {"json"}},
    {"RandomSources", {"json", "random", "secrets", "uuid", "tempfile"}},
};

// One template and its children (destroyed first: each holds the template).
struct Family {
  std::shared_ptr<runtime::WarmTemplate> parent;
  std::vector<std::unique_ptr<runtime::Zygote>> children;
};

class CoreTemplateSiblings : public HostHygieneTest, public ::testing::WithParamInterface<Preloads> {
 protected:
  void SetUp() override {
    HostHygieneTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    REQUIRE_HOST(Python3());  // the template's interpreter, through the sandbox's /usr bind
    REQUIRE_HOST(UserNamespaces());
    cgroups_before_ = OwnCgroups();
  }
  void TearDown() override {
    // Every test's family and children are gone by now: so are their groups.
    EXPECT_EQ(OwnCgroups(), cgroups_before_) << "cgroups outlived their sandboxes";
    HostHygieneTest::TearDown();
  }

  // With limits, so that each sandbox has cgroups where the host gives
  // them (a spec without limits has none).
  runtime::SandboxSpec Profile() const {
    runtime::SandboxSpec spec = TestSpec({});
    spec.env = {"PATH=/usr/bin:/bin"};
    spec.limits.memory_max = 512ull << 20;
    spec.limits.pids_max = 64;
    return spec;
  }
  runtime::ZygoteOptions Options() const {
    runtime::ZygoteOptions options;
    options.interpreter = runtime::WarmInterpreter{{"python3", "-I"}, GetParam().modules};
    return options;
  }

  // A template and `count` children of it, each built and its interpreter
  // forked in before any payload runs.
  absl::StatusOr<Family> MakeFamily(int count) {
    Family family;
    absl::StatusOr<std::shared_ptr<runtime::WarmTemplate>> parent = runtime::WarmTemplate::Start(Profile(), Options());
    if (!parent.ok()) return parent.status();
    family.parent = *std::move(parent);
    for (int i = 0; i < count; ++i) {
      absl::StatusOr<std::unique_ptr<runtime::Zygote>> child = family.parent->Make(Profile(), Options());
      if (!child.ok()) return child.status();
      family.children.push_back(*std::move(child));
    }
    return family;
  }

  // `python3 -I -c <prelude + program> ARGS...`: served warm by the child.
  static runtime::ExecRequest Request(absl::string_view program, std::vector<std::string> args = {}) {
    runtime::ExecRequest r;
    r.argv = {"python3", "-I", "-c", absl::StrCat(kPrelude, program)};
    r.argv.insert(r.argv.end(), args.begin(), args.end());
    r.env = {"PATH=/usr/bin:/bin"};
    r.timeout = absl::Seconds(60);  // a backstop: the test ends every payload itself
    return r;
  }

  // A finished child: ran warm (a fork of the template's interpreter, not
  // an exec) and exited 0.
  static void ExpectCleanEnd(const absl::StatusOr<SandboxRun>& run, absl::string_view who) {
    ASSERT_TRUE(run.ok()) << who << ": " << run.status();
    EXPECT_EQ(run->result.reason, runtime::ExitReason::kExited) << who << ": " << run->result.setup_error << run->err;
    EXPECT_EQ(run->result.exit_code, 0) << who << ": " << run->err;
    EXPECT_TRUE(run->result.warm) << who << " was exec'd, not run in the template's fork";
  }

 private:
  std::set<std::string> cgroups_before_;
};

std::string PreloadsName(const ::testing::TestParamInfo<Preloads>& info) { return info.param.name; }
void PrintTo(const Preloads& preloads, std::ostream* os) { *os << absl::StrJoin(preloads.modules, ","); }

INSTANTIATE_TEST_SUITE_P(WarmTemplate, CoreTemplateSiblings, ::testing::ValuesIn(kPreloads), PreloadsName);

// ---- 1. Processes --------------------------------------------------------------

TEST_P(CoreTemplateSiblings, NeitherSeesNorSignalsTheOthersProcesses) {
  absl::StatusOr<Family> family = MakeFamily(2);
  ASSERT_TRUE(family.ok()) << family.status();
  const std::string names[2] = {absl::StrCat("sib-a-", RandomHex(4)), absl::StrCat("sib-b-", RandomHex(4))};
  HeldChild a(*family->children[0], Request(kProcesses, {names[0]}));
  HeldChild b(*family->children[1], Request(kProcesses, {names[1]}));
  absl::StatusOr<Facts> ready[2] = {a.ReadUntil("ready"), b.ReadUntil("ready")};
  ASSERT_TRUE(ready[0].ok()) << ready[0].status();
  ASSERT_TRUE(ready[1].ok()) << ready[1].status();

  // The host sees both, by the names they gave themselves.
  pid_t host[2];
  for (int i = 0; i < 2; ++i) {
    std::vector<pid_t> pids = HostPidsNamed(names[i]);
    ASSERT_EQ(pids.size(), 1u) << names[i];
    host[i] = pids[0];
    ASSERT_EQ(::kill(host[i], 0), 0) << names[i];
    // Each sees its init and itself: nothing of the template's, nothing of its sibling's.
    EXPECT_EQ((*ready[i])["pids"], absl::StrCat("1 ", (*ready[i])["pid"])) << names[i];
  }

  // Each, while the other is alive, looks for it by its host pid and tries
  // to signal it.
  ASSERT_TRUE(a.Send(absl::StrCat(host[1])));
  absl::StatusOr<Facts> probe_a = a.ReadUntil("probed");
  ASSERT_TRUE(probe_a.ok()) << probe_a.status();
  ASSERT_TRUE(b.Send(absl::StrCat(host[0])));
  absl::StatusOr<Facts> probe_b = b.ReadUntil("probed");
  ASSERT_TRUE(probe_b.ok()) << probe_b.status();
  Facts* views[2] = {&*probe_a, &*probe_b};
  for (int i = 0; i < 2; ++i) {
    Facts& view = *views[i];
    const std::string& sibling = names[1 - i];
    EXPECT_EQ(view["probe_pids"], absl::StrCat("1 ", (*ready[i])["pid"])) << names[i];
    std::vector<std::string> comms = absl::StrSplit(view["comms"], ' ', absl::SkipEmpty());
    EXPECT_EQ(std::count(comms.begin(), comms.end(), sibling), 0) << names[i] << " sees " << view["comms"];
    EXPECT_EQ(view["exists"], "False") << names[i] << " sees /proc/" << host[1 - i];
    EXPECT_EQ(view["kill0"], "ESRCH") << names[i];
    EXPECT_EQ(view["kill9"], "ESRCH") << names[i];
  }
  // SIGKILL reached neither.
  EXPECT_EQ(::kill(host[0], 0), 0);
  EXPECT_EQ(::kill(host[1], 0), 0);
  absl::StatusOr<SandboxRun> end[2] = {a.Finish(), b.Finish()};
  for (int i = 0; i < 2; ++i) {
    ExpectCleanEnd(end[i], names[i]);
    if (end[i].ok()) {
      EXPECT_EQ(end[i]->out, "end=released\n") << names[i];
    }
  }
}

// ---- 2. /tmp -------------------------------------------------------------------

TEST_P(CoreTemplateSiblings, EachTmpStartsEmptyAndStaysItsOwn) {
  absl::StatusOr<Family> family = MakeFamily(2);
  ASSERT_TRUE(family.ok()) << family.status();
  const std::string tokens[2] = {RandomHex(16), RandomHex(16)};
  HeldChild a(*family->children[0], Request(kTmp, {tokens[0]}));
  HeldChild b(*family->children[1], Request(kTmp, {tokens[1]}));
  absl::StatusOr<Facts> ready[2] = {a.ReadUntil("ready"), b.ReadUntil("ready")};
  ASSERT_TRUE(ready[0].ok()) << ready[0].status();
  ASSERT_TRUE(ready[1].ok()) << ready[1].status();
  EXPECT_EQ((*ready[0])["before"], "");
  EXPECT_EQ((*ready[1])["before"], "");

  // A writes /tmp/secret; then B, with A alive and its file written, looks
  // for it and writes its own.
  ASSERT_TRUE(a.Send(""));
  absl::StatusOr<Facts> wrote_a = a.ReadUntil("written");
  ASSERT_TRUE(wrote_a.ok()) << wrote_a.status();
  EXPECT_EQ((*wrote_a)["found"], "ENOENT");
  EXPECT_EQ((*wrote_a)["listing"], "secret");
  ASSERT_TRUE(b.Send(""));
  absl::StatusOr<Facts> wrote_b = b.ReadUntil("written");
  ASSERT_TRUE(wrote_b.ok()) << wrote_b.status();
  EXPECT_EQ((*wrote_b)["found"], "ENOENT") << "B sees A's /tmp/secret";
  EXPECT_EQ((*wrote_b)["listing"], "secret");

  // Each reads back its own token: B's write did not reach A's file.
  absl::StatusOr<SandboxRun> end[2] = {a.Finish(), b.Finish()};
  for (int i = 0; i < 2; ++i) {
    ExpectCleanEnd(end[i], i == 0 ? "A" : "B");
    if (end[i].ok()) {
      EXPECT_EQ(ParseFacts(end[i]->out)["after"], tokens[i]) << (i == 0 ? "A" : "B");
    }
  }
}

// ---- 3. Everything else a child can write ----------------------------------

// In the default profile the walk finds /tmp, /dev/shm and /dev itself
// writable, each a tmpfs of the sandbox's own; the root, /usr and /etc are
// read-only, and there is no workspace unless a request brings one (that
// request's own). The test does not depend on that list: wherever one
// child can write, the other must not find what it wrote.
TEST_P(CoreTemplateSiblings, NoFileOneWritesAnywhereIsVisibleToTheOther) {
  absl::StatusOr<Family> family = MakeFamily(2);
  ASSERT_TRUE(family.ok()) << family.status();
  const std::string tokens[2] = {RandomHex(8), RandomHex(8)};
  HeldChild a(*family->children[0], Request(kWritable, {tokens[0]}));
  HeldChild b(*family->children[1], Request(kWritable, {tokens[1]}));
  absl::StatusOr<Facts> made[2] = {a.ReadUntil("ready"), b.ReadUntil("ready")};
  ASSERT_TRUE(made[0].ok()) << made[0].status();
  ASSERT_TRUE(made[1].ok()) << made[1].status();
  std::set<std::string> places[2];
  for (int i = 0; i < 2; ++i) {
    Facts& f = *made[i];
    int walked = 0;
    ASSERT_TRUE(absl::SimpleAtoi(f["walked"], &walked)) << f["walked"];
    EXPECT_LT(walked, 2000) << "the walk stopped short: read-write mounts " << f["mounts"];
    for (absl::string_view path : absl::StrSplit(f["made"], ' ', absl::SkipEmpty())) {
      places[i].insert(std::string(path.substr(0, path.rfind('/'))));
    }
    // /tmp at least: the walk can find a writable place.
    EXPECT_TRUE(places[i].contains("/tmp")) << f["made"];
  }
  // Same profile, same places: each looked everywhere the other wrote.
  EXPECT_EQ(places[0], places[1]);

  ASSERT_TRUE(a.Send((*made[1])["made"]));
  ASSERT_TRUE(b.Send((*made[0])["made"]));
  absl::StatusOr<SandboxRun> end[2] = {a.Finish(), b.Finish()};
  for (int i = 0; i < 2; ++i) {
    ExpectCleanEnd(end[i], i == 0 ? "A" : "B");
    if (!end[i].ok()) continue;
    Facts f = ParseFacts(end[i]->out);
    EXPECT_EQ(f["found"], "") << (i == 0 ? "A" : "B") << " finds its sibling's files";
    EXPECT_EQ(f["kept"], "True") << (i == 0 ? "A" : "B") << "'s files changed";
  }
}

// ---- 4. Memory and module state -----------------------------------------------

TEST_P(CoreTemplateSiblings, NeitherReadsTheOthersMemoryNorSeesItsModuleState) {
  absl::StatusOr<Family> family = MakeFamily(2);
  ASSERT_TRUE(family.ok()) << family.status();
  const std::string secrets[2] = {RandomHex(16), RandomHex(16)};
  const std::string names[2] = {absl::StrCat("sib-a-", RandomHex(4)), absl::StrCat("sib-b-", RandomHex(4))};
  HeldChild a(*family->children[0], Request(kMemory, {secrets[0], names[0]}));
  // A has set its module state before B starts: B's pristine view is after A's change.
  absl::StatusOr<Facts> ready_a = a.ReadUntil("ready");
  ASSERT_TRUE(ready_a.ok()) << ready_a.status();
  HeldChild b(*family->children[1], Request(kMemory, {secrets[1], names[1]}));
  absl::StatusOr<Facts> ready_b = b.ReadUntil("ready");
  ASSERT_TRUE(ready_b.ok()) << ready_b.status();
  Facts* ready[2] = {&*ready_a, &*ready_b};

  pid_t host[2];
  for (int i = 0; i < 2; ++i) {
    Facts& f = *ready[i];
    EXPECT_EQ(f["pristine_mark"], "None") << names[i];
    EXPECT_EQ(f["pristine_dumps"], "[1, 2]") << names[i];
    EXPECT_EQ(f["own_dumps"], "[1;2]") << names[i] << ": the change to json did not take";
    std::vector<pid_t> pids = HostPidsNamed(names[i]);
    ASSERT_EQ(pids.size(), 1u) << names[i];
    host[i] = pids[0];
    // The secret is where the child says, at that host pid: what the
    // sibling is about to try cannot fail for a wrong address.
    uint64_t address = 0;
    size_t length = 0;
    ASSERT_TRUE(absl::SimpleAtoi(f["address"], &address) && absl::SimpleAtoi(f["length"], &length)) << names[i];
    UniqueFd mem(::open(absl::StrCat("/proc/", host[i], "/mem").c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(mem.valid()) << "open(/proc/" << host[i] << "/mem): " << std::strerror(errno);
    std::string held(length, '\0');
    ASSERT_EQ(::pread(mem.get(), held.data(), length, static_cast<off_t>(address)), static_cast<ssize_t>(length))
        << std::strerror(errno);
    EXPECT_EQ(held, absl::StrCat("cubicle-sibling-secret:", secrets[i]));
  }

  ASSERT_TRUE(a.Send(absl::StrCat(host[1], " ", (*ready[1])["address"], " ", (*ready[1])["length"])));
  absl::StatusOr<Facts> probe_a = a.ReadUntil("probed");
  ASSERT_TRUE(probe_a.ok()) << probe_a.status();
  ASSERT_TRUE(b.Send(absl::StrCat(host[0], " ", (*ready[0])["address"], " ", (*ready[0])["length"])));
  absl::StatusOr<Facts> probe_b = b.ReadUntil("probed");
  ASSERT_TRUE(probe_b.ok()) << probe_b.status();
  Facts* probes[2] = {&*probe_a, &*probe_b};
  for (int i = 0; i < 2; ++i) {
    Facts& f = *probes[i];
    // The sibling's host pid names nothing in its pid namespace; and the
    // profile's filter refuses process_vm_readv outright (EPERM) before
    // the pid would be looked up.
    EXPECT_EQ(f["their_mem"], "ENOENT") << names[i];
    EXPECT_TRUE(f["vm_readv"] == "EPERM" || f["vm_readv"] == "ESRCH") << names[i] << ": " << f["vm_readv"];
    // Its whole address space holds its own secret and not its sibling's.
    EXPECT_EQ(f["capped"], "False") << names[i];
    EXPECT_EQ(f["secrets_seen"], secrets[i]) << names[i];
    EXPECT_EQ(f["mark_now"], secrets[i]) << names[i] << ": its json state changed under it";
  }
  absl::StatusOr<SandboxRun> end[2] = {a.Finish(), b.Finish()};
  for (int i = 0; i < 2; ++i) ExpectCleanEnd(end[i], names[i]);
}

// ---- 5. Random numbers --------------------------------------------------------

TEST_P(CoreTemplateSiblings, EachChildDrawsItsOwnRandomNumbers) {
  absl::StatusOr<Family> family = MakeFamily(3);
  ASSERT_TRUE(family.ok()) << family.status();
  std::vector<Facts> draws;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<SandboxRun> run = RunInZygote(*family->children[i], Request(kRandom));
    ExpectCleanEnd(run, absl::StrCat("child ", i));
    ASSERT_TRUE(run.ok());
    draws.push_back(ParseFacts(run->out));
  }
  for (const char* key : {"random", "getrandbits", "urandom", "token_hex", "uuid4", "tempfile_name"}) {
    std::set<std::string> values;
    for (Facts& draw : draws) {
      EXPECT_FALSE(draw[key].empty()) << key;
      values.insert(draw[key]);
    }
    EXPECT_EQ(values.size(), 3u) << key << ": " << draws[0][key] << " " << draws[1][key] << " " << draws[2][key];
  }
}

// ---- 6. Fds -----------------------------------------------------------------

// The bootstrap keeps no fd of its own for the payload: the socket to init
// is closed once the request is read, the control socket before it. What
// is open is the request's stdio, and nothing of the template's.
TEST_P(CoreTemplateSiblings, OnlyTheRequestsStdioIsOpen) {
  absl::StatusOr<Family> family = MakeFamily(2);
  ASSERT_TRUE(family.ok()) << family.status();
  const std::string names[2] = {absl::StrCat("sib-a-", RandomHex(4)), absl::StrCat("sib-b-", RandomHex(4))};
  HeldChild a(*family->children[0], Request(kFds, {names[0]}));
  HeldChild b(*family->children[1], Request(kFds, {names[1]}));
  HeldChild* children[2] = {&a, &b};
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<Facts> ready = children[i]->ReadUntil("ready");
    ASSERT_TRUE(ready.ok()) << ready.status();
    EXPECT_EQ((*ready)["fds"], "0 1 2") << names[i] << ": " << (*ready)["targets"];
    // From the host too (no listing fd of its own to leave out), and its
    // stdout is the request's pipe.
    std::vector<pid_t> pids = HostPidsNamed(names[i]);
    ASSERT_EQ(pids.size(), 1u) << names[i];
    EXPECT_EQ(ListDirectory(absl::StrCat("/proc/", pids[0], "/fd")), (std::set<std::string>{"0", "1", "2"}))
        << names[i];
    EXPECT_EQ(ReadLink(absl::StrCat("/proc/", pids[0], "/fd/1")),
              ReadLink(absl::StrCat("/proc/self/fd/", children[i]->stdout_fd())))
        << names[i];
  }
  absl::StatusOr<SandboxRun> end[2] = {a.Finish(), b.Finish()};
  for (int i = 0; i < 2; ++i) ExpectCleanEnd(end[i], names[i]);
}

// ---- 7. Namespaces and cgroups ---------------------------------------------------

// Their user namespace is the template's (runtime/warm_template.h), shared
// by design and holding no capability for either; every other namespace
// is each child's own.
TEST_P(CoreTemplateSiblings, EachHasItsOwnNamespaces) {
  absl::StatusOr<Family> family = MakeFamily(2);
  ASSERT_TRUE(family.ok()) << family.status();
  const std::string names[2] = {absl::StrCat("sib-a-", RandomHex(4)), absl::StrCat("sib-b-", RandomHex(4))};
  const std::string tokens[2] = {RandomHex(8), RandomHex(8)};
  HeldChild a(*family->children[0], Request(kNamespaces, {names[0], tokens[0]}));
  HeldChild b(*family->children[1], Request(kNamespaces, {names[1], tokens[1]}));
  absl::StatusOr<Facts> ready[2] = {a.ReadUntil("ready"), b.ReadUntil("ready")};
  ASSERT_TRUE(ready[0].ok()) << ready[0].status();
  ASSERT_TRUE(ready[1].ok()) << ready[1].status();
  for (const char* ns : {"pid", "net", "mnt", "ipc", "uts", "cgroup"}) {
    const std::string key = absl::StrCat("ns_", ns);
    EXPECT_TRUE(absl::StartsWith((*ready[0])[key], absl::StrCat(ns, ":["))) << (*ready[0])[key];
    EXPECT_NE((*ready[0])[key], (*ready[1])[key]) << ns;
  }
  for (const char* ns : {"pid", "net", "mnt", "ipc", "uts", "cgroup", "user"}) {
    const std::string host = ReadLink(absl::StrCat("/proc/self/ns/", ns));
    for (int i = 0; i < 2; ++i) EXPECT_NE((*ready[i])[absl::StrCat("ns_", ns)], host) << names[i] << ": " << ns;
  }
  for (int i = 0; i < 2; ++i) EXPECT_EQ((*ready[i])["shm_made"], "ok") << names[i];

  // What each made in its net and ipc namespaces: its own reachable, its
  // sibling's (alive, made the same way) not.
  ASSERT_TRUE(a.Send(tokens[1]));
  absl::StatusOr<Facts> probe_a = a.ReadUntil("probed");
  ASSERT_TRUE(probe_a.ok()) << probe_a.status();
  ASSERT_TRUE(b.Send(tokens[0]));
  absl::StatusOr<Facts> probe_b = b.ReadUntil("probed");
  ASSERT_TRUE(probe_b.ok()) << probe_b.status();
  Facts* probes[2] = {&*probe_a, &*probe_b};
  for (int i = 0; i < 2; ++i) {
    Facts& f = *probes[i];
    EXPECT_EQ(f["connect_own"], "ok") << names[i];
    EXPECT_EQ(f["connect_other"], "ECONNREFUSED") << names[i];
    EXPECT_EQ(f["shm_own"], "ok") << names[i];
    EXPECT_EQ(f["shm_other"], "ENOENT") << names[i];
  }
  absl::StatusOr<SandboxRun> end[2] = {a.Finish(), b.Finish()};
  for (int i = 0; i < 2; ++i) ExpectCleanEnd(end[i], names[i]);
}

// Inside, each cgroup namespace makes its own group "/": the host's view
// tells the groups apart. The fixture checks they are gone afterwards.
TEST_P(CoreTemplateSiblings, EachHasItsOwnCgroup) {
  absl::StatusOr<Family> family = MakeFamily(2);
  ASSERT_TRUE(family.ok()) << family.status();
  const std::string names[2] = {absl::StrCat("sib-a-", RandomHex(4)), absl::StrCat("sib-b-", RandomHex(4))};
  HeldChild a(*family->children[0], Request(kFds, {names[0]}));  // names itself, then waits
  HeldChild b(*family->children[1], Request(kFds, {names[1]}));
  std::string groups[2];
  HeldChild* children[2] = {&a, &b};
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<Facts> ready = children[i]->ReadUntil("ready");
    ASSERT_TRUE(ready.ok()) << ready.status();
    std::vector<pid_t> pids = HostPidsNamed(names[i]);
    ASSERT_EQ(pids.size(), 1u) << names[i];
    groups[i] = ReadFile(absl::StrCat("/proc/", pids[0], "/cgroup"));
    ASSERT_FALSE(groups[i].empty()) << names[i];
  }
  if (groups[0] == ReadFile("/proc/self/cgroup")) {
    GTEST_SKIP() << "the sandboxes have no cgroup of their own here (no cgroup hierarchy, or none this user "
                    "may write): there is no group to tell apart";
  }
  EXPECT_NE(groups[0], groups[1]);
  // Each in groups of its own sandbox's (cgroups/cgroup.cc's names), which
  // the fixture's check after the test can see.
  const std::string own = absl::StrCat("/cubicle-", ::getpid(), "-");
  EXPECT_TRUE(absl::StrContains(groups[0], own)) << groups[0];
  EXPECT_TRUE(absl::StrContains(groups[1], own)) << groups[1];
  EXPECT_FALSE(OwnCgroups().empty());
  absl::StatusOr<SandboxRun> end[2] = {a.Finish(), b.Finish()};
  for (int i = 0; i < 2; ++i) ExpectCleanEnd(end[i], names[i]);
}

}  // namespace
}  // namespace cubicle::test_support
