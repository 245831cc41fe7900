#include "rpc/systemd.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>

#include "absl/strings/str_cat.h"
#include "base/dynamic_symbols.h"

namespace cubicle::rpc::systemd {
namespace {

struct Sd {
  decltype(&sd_notify) notify = nullptr;
  decltype(&sd_listen_fds) listen_fds = nullptr;
  decltype(&sd_is_socket_unix) is_unix = nullptr;
  decltype(&sd_is_socket_inet) is_inet = nullptr;
  bool ok() const { return notify && listen_fds && is_unix && is_inet; }
};

const Sd& Lib() {
  static const Sd sd = [] {
    Sd s;
    void* lib = ::dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return s;  // kept loaded for the process's life
    ResolveSymbol(lib, "sd_notify", &s.notify);
    ResolveSymbol(lib, "sd_listen_fds", &s.listen_fds);
    ResolveSymbol(lib, "sd_is_socket_unix", &s.is_unix);
    ResolveSymbol(lib, "sd_is_socket_inet", &s.is_inet);
    return s;
  }();
  return sd;
}

}  // namespace

bool Notifying() {
  const char* socket = ::getenv("NOTIFY_SOCKET");
  return socket != nullptr && *socket != '\0';
}

bool Notify(const std::string& state) {
  if (!Notifying() || !Lib().ok()) return false;
  return Lib().notify(0, state.c_str()) > 0;
}

absl::StatusOr<ActivatedSockets> TakeActivatedSockets() {
  ActivatedSockets out;
  if (::getenv("LISTEN_FDS") == nullptr) return out;
  if (!Lib().ok()) {
    return absl::FailedPreconditionError("LISTEN_FDS is set but libsystemd.so.0 could not be loaded");
  }
  const int n = Lib().listen_fds(/*unset_environment=*/1);
  if (n < 0) return absl::FailedPreconditionError(absl::StrCat("sd_listen_fds: error ", -n));
  for (int fd = SD_LISTEN_FDS_START; fd < SD_LISTEN_FDS_START + n; ++fd) {
    // Passed without FD_CLOEXEC: no sandbox or fork server may inherit them.
    (void)::fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (Lib().is_unix(fd, SOCK_STREAM, /*listening=*/1, nullptr, 0) > 0) {
      out.unix_streams.push_back(fd);
    } else if (Lib().is_inet(fd, AF_UNSPEC, SOCK_STREAM, /*listening=*/1, 0) > 0) {
      out.tcp_streams.push_back(fd);
    } else {
      return absl::FailedPreconditionError(
          absl::StrCat("socket activation: fd ", fd, " is not a listening Unix or TCP stream socket"));
    }
  }
  return out;
}

}  // namespace cubicle::rpc::systemd
