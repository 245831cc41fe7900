// What the sandbox side of a zygote reads: everything it needs, computed
// before clone, so that the child only reads memory and makes syscalls
// (docs/architecture.md). Internal to runtime/: the host side fills a
// ChildPlan (BuildChildPlan, then the fds of Zygote::Create), the child
// runs ChildMain on it.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/child_error.h"
#include "namespaces/capabilities.h"
#include "namespaces/exec_request.h"
#include "namespaces/prefault.h"
#include "namespaces/process.h"
#include "rootfs/builder.h"
#include "runtime/host_features.h"
#include "runtime/spec.h"
#include "runtime/warm.h"

namespace cubicle::runtime {

struct ZygoteOptions;

inline constexpr size_t kPayloadStackBytes = 128 * 1024;

// The exec stamp page of an armed payload: CLOCK_MONOTONIC stamps of
// init's hand-off and of the payload's "executing", read by the launcher
// with pread once the execution ends (so it is not woken while the payload
// execs).
enum : int { kStampHandOff = 0, kStampExecReady, kStampCount };
inline constexpr size_t kStampBytes = kStampCount * sizeof(int64_t);

// The launcher's 'J' (JoinGroupsSentLater): 'J', then the paths of the v1
// groups whose tasks files come with it, one per line.
inline constexpr size_t kGroupsMessageBytes = 2048;

// How a sandbox's payload starts. Chosen once per sandbox, by
// ChoosePayloadRoute; an armed payload's request then goes either straight
// to it (the direct channel) or, when it brings a workspace, through init.
enum class PayloadRoute {
  kSpawned,   // init spawns it at hand-off (the cold path)
  kArmed,     // started before "ready", its hygiene done; waits for its request (a pool's zygote)
  kWarm,      // a warm interpreter, started before "ready", its modules imported
  kAdopted,   // a warm interpreter forked by a warm template into this sandbox (runtime/warm_template.h)
  kTemplate,  // the template interpreter itself: forks kAdopted payloads, is never handed a request
  kAsPid1,    // bwrap --as-pid-1: the sandbox's first process becomes the payload; no init
};

// The route for `spec`: --as-pid-1 decides first, then a warm template's
// own sandbox, a sandbox whose interpreter comes from a template, a warm
// interpreter; a plain payload is armed when the zygote is built ahead of
// its request.
PayloadRoute ChoosePayloadRoute(const SandboxSpec& spec, const ZygoteOptions& options, bool ahead_of_request);
const char* PayloadRouteName(PayloadRoute route);

// The sandbox's ids (DESIGN §4.2), and bwrap's user-namespace options.
struct ChildIds {
  uid_t uid = 0;
  gid_t gid = 0;
  // A user namespace the launcher joined (SandboxSpec::join_userns): no
  // maps of ours; ids switch only where asked for.
  bool joined_userns = false;
  bool switch_uid = false;
  bool switch_gid = false;
  int userns_after_setup_fd = -1;  // SandboxSpec::join_userns_after_setup, or -1
  // Set up as uid/gid 0 of the new user namespace (which maps 0 to the
  // sandbox's host ids), then nest one in which the sandbox is uid/gid
  // (SetsUpAsRootForDevpts).
  bool set_up_as_root = false;
  bool disable_userns = false;
  bool assert_userns_disabled = false;
};

// What init sets up besides the root: which namespaces it has new.
struct ChildSystem {
  bool pid_namespace = true;
  bool net_namespace = true;
  bool uts_namespace = true;
  bool set_hostname = true;
  std::string hostname;
  bool init_new_session = false;  // SandboxSpec::init_new_session (not with --as-pid-1)
  bool init_dumpable = false;     // SandboxSpec::inspectable_init
};

// The payload's setup error, left in memory the launcher shares with the
// sandbox (MAP_SHARED, made before clone) rather than sent: once a supplied
// seccomp program is in place, the payload may be refused every syscall
// that could carry a report, but not a store to memory. The launcher reads
// it when the payload's own report did not come.
struct LateReport {
  ChildError error;
  int32_t written;  // 1 once `error` is whole (release; the launcher acquires)
};

// The payload's hygiene (DESIGN §4.5) and the request-independent parts of
// its exec.
struct PayloadHygienePlan {
  bool die_with_parent = true;
  bool new_session = true;
  std::vector<namespaces::Rlimit> rlimits;
  sock_fprog seccomp{};  // the policy's program, or `own_seccomp`
  bool load_seccomp = false;
  // The strict policy's exec token (seccomp/policy.h, Policy::kStrict),
  // fresh for this sandbox, and the program that tests it, which `seccomp`
  // points into; 0 and empty for every other policy and for routes whose
  // payload never execs once filtered (kTemplate, kAdopted: they get the
  // no-exec program). The payload's exec passes it (ExecSearchingPath).
  uint64_t exec_token = 0;
  std::vector<sock_filter> own_seccomp;
  bool keep_capabilities = false;  // bwrap's kept set instead of dropping all
  namespaces::KeptCapabilities capabilities;
  std::vector<sock_fprog> extra_seccomp;  // bwrap --seccomp: loaded last
  LateReport* late_report = nullptr;      // with extra_seccomp: see LateReport
  std::string argv0;                      // bwrap --argv0
  std::string exec_label;                 // bwrap --exec-label
  std::vector<int> inherited_fds;         // kept at their numbers (bwrap's inherited fds)
  // cwd fallbacks, each with its "PWD=..." entry ready for the environment.
  std::vector<std::string> cwd_fallbacks;
  std::vector<std::string> pwd_entries;
};

// The fds the child finds open.
struct ChildChannels {
  int control = -1;
  // The launcher's end of the control pair: the child closes its copy
  // first, so that the launcher's death is EOF even before "go".
  int launcher_control = -1;
  // The sandbox's end of its egress channel, and the bridge's port (-1 / 0:
  // no egress).
  int egress = -1;
  uint16_t bridge_port = 0;
  int direct = -1;      // an armed payload's end of the launcher's direct channel, or -1
  int exec_stamp = -1;  // the exec stamp page's memfd (kStamp*), or -1
  // kAdopted: init's end of the socket its forked interpreter says "R" on
  // and takes its request from. kTemplate: the template interpreter's
  // socket to its owner, which sends it its spawn requests.
  int warm = -1;
  int template_owner = -1;
};

// The sandbox's v1 groups: "tasks" files the child writes "0" to first
// thing (JoinOwnGroups), with the groups' paths for errors; or, with
// `join_later`, the files the launcher sends once it has made the groups
// while the child built its root (JoinGroupsSentLater).
struct ChildGroups {
  std::vector<int> task_fds;
  std::vector<const char*> task_paths;
  bool join_later = false;
};

// A warm interpreter's command line and environment, as NULL-terminated
// arrays into `strings`.
struct WarmCommand {
  std::vector<std::string> strings;
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::string search_path;
  // An R interpreter: it gets the library its bootstrap loads as
  // kRLibraryFd (runtime/warm_r.h).
  bool r_library = false;
};

// Memory the child writes at hand-off, allocated before clone so that it
// allocates nothing.
struct HandOffMemory {
  // Where the request is received. Left uninitialised: the parent never
  // touches these pages, so the child's first write to each is a fresh
  // page, not a copy, and only the pages a request fills are made at all.
  std::unique_ptr<char[]> request_buffer{new char[namespaces::kMaxExecRequestBytes + 1]};
  std::unique_ptr<char*[]> request_pointers{new char*[namespaces::kMaxExecStrings + 2]};
  // The stack of a spawned or armed payload, which runs in init's memory.
  std::unique_ptr<char[]> payload_stack;
  // A zygote built ahead of its request maps what the hand-off runs and
  // writes while it waits (PrefaultForHandOff).
  bool prefault = false;
  std::vector<namespaces::MemoryRange> text;
};

struct ChildPlan {
  PayloadRoute route = PayloadRoute::kSpawned;
  rootfs::PreparedPlan rootfs;
  ChildIds ids;
  ChildSystem system;
  PayloadHygienePlan hygiene;
  ChildChannels fds;
  ChildGroups groups;
  WarmCommand warm;
  HandOffMemory memory;
};

// Fills everything of `plan` that follows from the spec and the options
// alone (not the fds, the groups or the host trees): the route, the mount
// plan, ids, namespaces, hygiene, the warm command line, the hand-off
// memory. InvalidArgument for a bad warm interpreter.
absl::Status BuildChildPlan(const SandboxSpec& spec, const ZygoteOptions& options, const HostFeatures& features,
                            bool ahead_of_request, ChildPlan* plan);

// The PATH entry of `env`, or the default search path.
std::string SearchPath(const std::vector<std::string>& env);

// The sandbox's first process: ids, root filesystem, hostname, loopback,
// "ready", then it waits for its execution request and becomes cubicle's
// init (child_main.cc).
[[noreturn]] void ChildMain(const ChildPlan& plan);

}  // namespace cubicle::runtime
