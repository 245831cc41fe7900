// cubicle's PID 1 inside the sandbox: forks the payload, forwards
// SIGTERM/SIGINT/SIGHUP/SIGQUIT (and SIGUSR1/SIGUSR2) to it, reaps every
// zombie, and reports the payload's wait status and rusage on the control
// socket. When the payload ends, init exits, and the kernel kills whatever is
// left in the pid namespace (daemonized grandchildren included).
#pragma once

#include "namespaces/control.h"

namespace cubicle::namespaces {

// Registers the launcher's argv strings (contiguous, from main()), which the
// kernel shows as /proc/PID/cmdline. Init overwrites its copy, so the
// sandbox does not learn the host command line (paths, tokens in flags).
void SetArgvArea(int argc, char** argv);

// Replaces this process's command line (the registered argv area, zeroed)
// and its comm with `name`: init's, and the cold launcher's cleaner, which
// shares the launcher's memory and would otherwise show its command line.
void NameProcess(const char* name);

// A socket init serves besides its signals (the egress bridge): init keeps
// `fd` and `partner_fd` open (the payload never has them) and calls
// `on_readable(fd, partner_fd)` whenever `fd` is readable. The callback
// must not block or allocate.
struct InitService {
  int fd = -1;
  int partner_fd = -1;
  void (*on_readable)(int fd, int partner_fd) = nullptr;
};

// cubicle's init in two halves, so that the payload can be forked before
// the request arrives (runtime/child_main.cc): BecomeInit() makes this process
// cubicle's init (not dumpable, launcher argv hidden, every signal blocked
// and taken later with sigwaitinfo or a signalfd; children reset their own
// mask); Supervise() forwards signals to `payload_pid`, reaps every child,
// serves `service` when given, reports the payload's wait status and rusage
// on `control_fd` (`report` carries the step stamps so far) and exits, or
// lingers (AfterExit). Supervise closes every fd but `control_fd` and the
// service's. BecomeInit fails, saying why in `error`, if this process
// cannot be made undumpable, or with `stay_dumpable` (bwrap's --info-fd
// for a caller without CAP_SYS_PTRACE: SandboxSpec::inspectable_init,
// docs/security.md) dumpable.
bool BecomeInit(bool stay_dumpable, ChildError* error);

// In a process init made after BecomeInit (before its execve): the signal
// state of a fresh process — the forwarded signals' dispositions back to
// their defaults (BecomeInit left every other one there), nothing blocked.
// A few syscalls, where resetting all 64 dispositions would be one each.
void RestoreSignalsForPayload();

// What init does once the payload's exit is reported.
struct AfterExit {
  // Stay until the launcher hangs up the control socket (or kills init)
  // instead of exiting. A pool's launcher returns at the report and tears
  // the sandbox down after its reply is out; init's own exit (its copy of
  // the launcher's address space torn down) would otherwise take the CPU
  // the launcher is woken on, and delay the reply by as much.
  bool linger = false;
  // Init is PID 1 of its own pid namespace: before lingering it kills
  // every other process in it, as its exit would have.
  bool own_pid_namespace = false;
  // The payload is not init's child but came into its pid namespace from
  // outside (a warm interpreter forked by its template, runtime/
  // warm_template.h): its exit is seen on this pidfd, and reported by its
  // parent, not by init. -1: the payload is init's child.
  int adopted_pidfd = -1;
};

[[noreturn]] void Supervise(int control_fd, ControlMessage* report, long payload_pid,
                            const InitService* service = nullptr, AfterExit after = {});

}  // namespace cubicle::namespaces
