#include "namespaces/exec_request.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/fd_passing.h"
#include "base/status.h"

namespace cubicle::namespaces {

absl::Status SendExecRequest(int control_fd, const std::vector<std::string>& argv,
                             const std::vector<std::string>& env, const std::string& cwd,
                             const std::string& search_path, const int (&stdio)[3], int workspace_fd,
                             bool* peer_gone, uint32_t warm, bool linger) {
  *peer_gone = false;
  if (argv.size() + env.size() > kMaxExecStrings) {
    return absl::InvalidArgumentError(
        absl::StrCat("argv and environment have ", argv.size() + env.size(), " entries; at most ",
                     kMaxExecStrings, " are accepted"));
  }
  ExecRequestHeader header{kExecRequestMagic, static_cast<uint32_t>(argv.size()),
                           static_cast<uint32_t>(env.size()),
                           (workspace_fd >= 0 ? kRequestHasWorkspace : 0u) | (linger ? kRequestLinger : 0u),
                           warm};
  std::string body(reinterpret_cast<const char*>(&header), sizeof(header));
  for (const auto* list : {&argv, &env}) {
    for (const std::string& s : *list) {
      if (s.find('\0') != std::string::npos) {
        return absl::InvalidArgumentError("argv and environment entries may not contain NUL bytes");
      }
      body.append(s).push_back('\0');
    }
  }
  body.append(cwd).push_back('\0');
  body.append(search_path).push_back('\0');
  if (body.size() > kMaxExecRequestBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the request (argv, environment, cwd) is ",
                                                   body.size(), " bytes; at most ",
                                                   kMaxExecRequestBytes, " are accepted"));
  }
  const int fds[4] = {stdio[0], stdio[1], stdio[2], workspace_fd};
  ssize_t n = SendWithFds(control_fd, body.data(), body.size(), fds, workspace_fd >= 0 ? 4 : 3, MSG_NOSIGNAL);
  if (n == static_cast<ssize_t>(body.size())) return absl::OkStatus();
  *peer_gone = n < 0 && (errno == EPIPE || errno == ECONNRESET);
  return ErrnoStatus(n < 0 ? errno : EMSGSIZE, "sendmsg(execution request)");
}

bool ReceiveExecRequest(int control_fd, char* buffer, char** pointers, ExecRequestView* out,
                        ChildError* error) {
  int fds[4] = {-1, -1, -1, -1};
  size_t nfds = 0;
  int msg_flags = 0;
  ssize_t n = ReceiveWithFds(control_fd, buffer, kMaxExecRequestBytes + 1, fds, 4, &nfds, 0, &msg_flags);
  if (n == 0) return child::Fail(error, "wait for request", "launcher exited", EPIPE);
  if (n < 0) return child::Fail(error, "recvmsg", "execution request", errno);
  ExecRequestHeader header;
  if ((msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || static_cast<size_t>(n) < sizeof(header) || nfds < 3) {
    return child::Fail(error, "execution request", "malformed or truncated", EPROTO);
  }
  std::memcpy(&header, buffer, sizeof(header));
  const bool has_workspace = header.flags & kRequestHasWorkspace;
  if (header.magic != kExecRequestMagic || header.argc == 0 ||
      static_cast<size_t>(header.argc) + header.envc > kMaxExecStrings ||
      nfds != (has_workspace ? 4u : 3u)) {
    return child::Fail(error, "execution request", "bad header", EPROTO);
  }
  // Walk the NUL-terminated strings; every one must end inside the message.
  char* p = buffer + sizeof(header);
  char* end = buffer + n;
  auto next = [&](char** s) {
    if (p >= end) return false;
    char* nul = static_cast<char*>(std::memchr(p, '\0', static_cast<size_t>(end - p)));
    if (nul == nullptr) return false;
    *s = p;
    p = nul + 1;
    return true;
  };
  char** argv = pointers;
  char** envp = pointers + header.argc + 1;
  char* cwd = nullptr;
  char* path = nullptr;
  bool ok = true;
  for (uint32_t i = 0; ok && i < header.argc; ++i) ok = next(&argv[i]);
  argv[header.argc] = nullptr;
  for (uint32_t i = 0; ok && i < header.envc; ++i) ok = next(&envp[i]);
  envp[header.envc] = nullptr;
  ok = ok && next(&cwd) && next(&path) && p == end;
  if (!ok) return child::Fail(error, "execution request", "strings do not match the header", EPROTO);
  out->argv = argv;
  out->envp = envp;
  out->cwd = cwd;
  out->search_path = path;
  for (int i = 0; i < 3; ++i) out->stdio[i] = fds[i];
  out->workspace_fd = has_workspace ? fds[3] : -1;
  out->warm = header.warm;
  out->linger = header.flags & kRequestLinger;
  out->bytes = static_cast<size_t>(n);
  return true;
}

bool ForwardExecRequest(int socket_fd, char* buffer, const ExecRequestView& view, ChildError* error) {
  // The workspace stays with init (it moved it in): the forwarded message
  // carries the stdio fds only.
  ExecRequestHeader header;
  std::memcpy(&header, buffer, sizeof(header));
  header.flags &= ~kRequestHasWorkspace;
  std::memcpy(buffer, &header, sizeof(header));
  ssize_t n = SendWithFds(socket_fd, buffer, view.bytes, view.stdio, 3, MSG_NOSIGNAL);
  for (int fd : view.stdio) ::close(fd);
  if (n != static_cast<ssize_t>(view.bytes)) {
    return child::Fail(error, "sendmsg", "request to the warm interpreter", n < 0 ? errno : EMSGSIZE);
  }
  return true;
}

}  // namespace cubicle::namespaces
