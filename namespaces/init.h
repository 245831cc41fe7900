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

using PayloadMain = void (*)(void* arg);  // must not return (execve or _exit)

// `report` carries the step stamps so far; init adds its own and sends it as
// the kPayloadExited message. Never returns.
[[noreturn]] void RunInit(int control_fd, ControlMessage* report, PayloadMain payload, void* arg);

// RunInit in two halves, for an init whose payload is forked before the
// request arrives (a warm interpreter): BecomeInit() makes this process
// cubicle's init (not dumpable, launcher argv hidden, every signal blocked
// and taken later with sigwaitinfo; children reset their own mask);
// Supervise() forwards signals to `payload_pid`, reaps, reports its exit on
// `control_fd` and exits. Supervise closes every fd but `control_fd`.
void BecomeInit();
[[noreturn]] void Supervise(int control_fd, ControlMessage* report, long payload_pid);

}  // namespace cubicle::namespaces
