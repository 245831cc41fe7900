#include "namespaces/exec_request.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace cubicle::namespaces {

absl::Status SendExecRequest(int control_fd, const std::vector<std::string>& argv,
                             const std::vector<std::string>& env, const std::string& cwd,
                             const std::string& search_path, const int (&stdio)[3], int workspace_fd,
                             bool* peer_gone, uint32_t warm) {
  *peer_gone = false;
  if (argv.size() + env.size() > kMaxExecStrings) {
    return absl::InvalidArgumentError(
        absl::StrCat("argv and environment have ", argv.size() + env.size(), " entries; at most ",
                     kMaxExecStrings, " are accepted"));
  }
  ExecRequestHeader header{kExecRequestMagic, static_cast<uint32_t>(argv.size()),
                           static_cast<uint32_t>(env.size()),
                           workspace_fd >= 0 ? kRequestHasWorkspace : 0u, warm};
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
  int fds[4] = {stdio[0], stdio[1], stdio[2], workspace_fd};
  const int nfds = workspace_fd >= 0 ? 4 : 3;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(fds))];
  std::memset(control, 0, sizeof(control));
  struct iovec iov = {body.data(), body.size()};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
  struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
  std::memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * nfds);
  for (;;) {
    ssize_t n = ::sendmsg(control_fd, &msg, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(body.size())) return absl::OkStatus();
    if (n < 0 && errno == EINTR) continue;
    *peer_gone = n < 0 && (errno == EPIPE || errno == ECONNRESET);
    return ErrnoStatus(n < 0 ? errno : EMSGSIZE, "sendmsg(execution request)");
  }
}

bool ReceiveExecRequest(int control_fd, char* buffer, char** pointers, ExecRequestView* out,
                        ChildError* error) {
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  struct iovec iov = {buffer, kMaxExecRequestBytes + 1};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(control_fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return child::Fail(error, "wait for request", "launcher exited", EPIPE);
  if (n < 0) return child::Fail(error, "recvmsg", "execution request", errno);
  int fds[4] = {-1, -1, -1, -1};
  size_t nfds = 0;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      if (nfds > 4) nfds = 4;
      std::memcpy(fds, CMSG_DATA(c), nfds * sizeof(int));
    }
  }
  ExecRequestHeader header;
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || static_cast<size_t>(n) < sizeof(header) || nfds < 3) {
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
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 3)];
  std::memset(control, 0, sizeof(control));
  struct iovec iov = {buffer, view.bytes};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int) * 3);
  std::memcpy(CMSG_DATA(cmsg), view.stdio, sizeof(int) * 3);
  ssize_t n;
  do {
    n = ::sendmsg(socket_fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  for (int fd : view.stdio) ::close(fd);
  if (n != static_cast<ssize_t>(view.bytes)) {
    return child::Fail(error, "sendmsg", "request to the warm interpreter", n < 0 ? errno : EMSGSIZE);
  }
  return true;
}

}  // namespace cubicle::namespaces
