// The termination signals a one-shot launcher (`cubicle run`, `cubicle
// bwrap`) passes on to its sandbox instead of dying of them: blocked for
// the object's life and readable on a signalfd the launcher polls; the
// caller's mask comes back on destruction.
#pragma once

#include <signal.h>
#include <sys/signalfd.h>

#include "base/unique_fd.h"

namespace cubicle::cli {

class ForwardedSignals {
 public:
  ForwardedSignals() {
    sigset_t forwarded;
    sigemptyset(&forwarded);
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaddset(&forwarded, sig);
    ::sigprocmask(SIG_BLOCK, &forwarded, &previous_);
    fd_.reset(::signalfd(-1, &forwarded, SFD_CLOEXEC | SFD_NONBLOCK));
  }
  ~ForwardedSignals() { ::sigprocmask(SIG_SETMASK, &previous_, nullptr); }
  ForwardedSignals(const ForwardedSignals&) = delete;
  ForwardedSignals& operator=(const ForwardedSignals&) = delete;

  // -1 if the signalfd could not be made (the signals stay blocked).
  int fd() const { return fd_.get(); }

 private:
  sigset_t previous_;
  UniqueFd fd_;
};

}  // namespace cubicle::cli
