#include "egress/gateway.h"

#include "base/fd_passing.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/json.hpp>

#include <chrono>
#include <cstring>
#include <future>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status.h"
#include "egress/address_class.h"
#include "egress/control_messages.h"
#include "egress/http.h"
#include "egress/matcher.h"
#include "seccomp/policy.h"

namespace cubicle::egress {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// One splice moves at most this much; the pipe is grown to hold it.
constexpr size_t kSpliceChunk = 1 << 20;
// Splices per wake-up before yielding to other connections.
constexpr int kPumpRounds = 16;

std::array<uint8_t, 16> ToBytes(const asio::ip::address& a) {
  std::array<uint8_t, 16> out{};
  if (a.is_v4()) {
    out[10] = out[11] = 0xff;
    auto b = a.to_v4().to_bytes();
    std::memcpy(out.data() + 12, b.data(), 4);
  } else {
    auto b = a.to_v6().to_bytes();
    std::memcpy(out.data(), b.data(), 16);
  }
  return out;
}

// Appends one JSON object per line; a single write(2) per line on an
// O_APPEND fd, so lines from several gateways never interleave.
class DecisionLog {
 public:
  static absl::StatusOr<DecisionLog> Open(const std::string& path) {
    CUBICLE_ASSIGN_OR_RETURN(UniqueFd fd, OpenDecisionLog(path));
    return Adopt(std::move(fd));
  }
  static DecisionLog Adopt(UniqueFd fd) {
    DecisionLog log;
    log.fd_ = std::move(fd);
    return log;
  }
  void Write(const boost::json::object& line) {
    std::string text = boost::json::serialize(line);
    text.push_back('\n');
    (void)!::write(fd_.get(), text.data(), text.size());
  }

 private:
  UniqueFd fd_;
};

struct SandboxState;
class Connection;

// The engine's thread (and the resolver thread Asio starts from it) reads
// what sandboxes send. In a gateway process (gateway_process.h) the whole
// process is unprivileged already; where the engine runs inside another
// process (tests, benchmarks) its thread still gives up root before reading
// a byte: credentials are per thread in Linux, so raw setgroups/setresgid/
// setresuid change this thread only (glibc's wrappers would change every
// thread), and leaving uid 0 clears its capabilities. Then no_new_privs and
// the sandboxes' baseline seccomp filter, for this thread only.
absl::Status DropThreadPrivileges() {
  if (::geteuid() == 0) {
    if (::syscall(SYS_setgroups, 0, nullptr) != 0) return ErrnoStatus(errno, "setgroups(egress gateway)");
    if (::syscall(SYS_setresgid, kGatewayId, kGatewayId, kGatewayId) != 0) {
      return ErrnoStatus(errno, absl::StrCat("setresgid(egress gateway, ", kGatewayId, ")"));
    }
    if (::syscall(SYS_setresuid, kGatewayId, kGatewayId, kGatewayId) != 0) {
      return ErrnoStatus(errno, absl::StrCat("setresuid(egress gateway, ", kGatewayId, ")"));
    }
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return ErrnoStatus(errno, "prctl(PR_SET_NO_NEW_PRIVS, gateway)");
  // The sandboxes' baseline filter, on this thread only (no TSYNC): no
  // mount, ptrace, bpf, namespaces, keyctl, io_uring, ... from here on.
  // A gateway process has it already; a second copy would only cost.
  if (::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) == 2) return absl::OkStatus();
  CUBICLE_ASSIGN_OR_RETURN(const seccomp::BpfProgram* bpf, seccomp::Compiled(seccomp::Policy::kDefault));
  if (int rc = seccomp::Load(bpf->AsFprog()); rc != 0) return ErrnoStatus(-rc, "seccomp(egress gateway)");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<UniqueFd> OpenDecisionLog(const std::string& path) {
  UniqueFd fd;
  if (path.empty()) {
    fd.reset(::fcntl(2, F_DUPFD_CLOEXEC, 3));
    if (!fd) return ErrnoStatus(errno, "dup(stderr, egress log)");
  } else {
    fd.reset(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640));
    if (!fd) return ErrnoStatus(errno, absl::StrCat("open(", path, ", egress log)"));
  }
  return fd;
}

// The largest control message (the launcher's "A", "D", "T", "S").
constexpr size_t kMaxControlMessage = 64 * 1024;

struct Gateway::Impl {
  Policy policy;
  std::string revision;
  asio::io_context io{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread thread;
  std::optional<DecisionLog> log;
  std::map<std::string, std::shared_ptr<SandboxState>> sandboxes;
  egress::Counts counts;  // every connection that has ended
  // A gateway process's control socket (ServeLauncher), and who waits for
  // its end.
  std::optional<asio::posix::stream_descriptor> launcher;
  std::promise<void>* launcher_gone = nullptr;
  std::vector<char> message;

  absl::Status AttachOnLoop(const std::string& sandbox, int fd);
  void Serve(std::shared_ptr<SandboxState> sandbox);
  void CloseSandbox(const std::shared_ptr<SandboxState>& sandbox, absl::string_view why);
  void Tag(const std::string& sandbox, const std::string& request_id);
  void ReadLauncher();
  bool DrainLauncher();
  void LauncherGone();
};

namespace {

struct SandboxState {
  std::string id;
  std::string request_id;  // the request it runs now (Tag), if any
  asio::posix::stream_descriptor channel;
  std::set<std::shared_ptr<Connection>> connections;
  uint64_t bytes = 0;  // both directions, every connection
  bool closed = false;
  SandboxState(asio::io_context& io, std::string name, int fd) : id(std::move(name)), channel(io, fd) {}
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Gateway::Impl* gw, std::shared_ptr<SandboxState> sandbox, tcp::socket client)
      : gw_(gw),
        sandbox_(std::move(sandbox)),
        request_id_(sandbox_->request_id),
        client_(std::move(client)),
        upstream_(gw->io),
        resolver_(gw->io),
        idle_(gw->io),
        start_(Clock::now()),
        last_active_(start_) {}

  void Start() {
    ArmIdle();
    ReadHead();
  }

  // Over a budget before anything was read: answered with 403 (and
  // logged), never served.
  void RefuseAtOnce(std::string rule, std::string reason) {
    ArmIdle();
    Refuse(403, std::move(rule), std::move(reason));
  }

  // Ends the connection once: closes both sockets and logs the decision.
  void Close(absl::string_view end) {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    idle_.cancel();
    resolver_.cancel();
    client_.close(ignored);
    upstream_.close(ignored);
    for (Half& h : halves_) h.pipe_r.reset(), h.pipe_w.reset();
    boost::json::object line;
    line["ts"] = absl::FormatTime(absl::RFC3339_full, absl::Now(), absl::UTCTimeZone());
    line["sandbox"] = sandbox_->id;
    if (!request_id_.empty()) line["request_id"] = request_id_;
    line["revision"] = gw_->revision;
    line["method"] = head_.method;
    line["host"] = head_.host;
    line["port"] = head_.port;
    line["address"] = address_;
    line["decision"] = decision_;
    line["rule"] = rule_;
    line["end"] = std::string(end);
    if (!reason_.empty()) line["reason"] = reason_;
    line["bytes_up"] = bytes_up_;
    line["bytes_down"] = bytes_down_;
    line["duration_us"] = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count();
    gw_->log->Write(line);
    gw_->counts.Count(decision_, rule_, bytes_up_, bytes_down_);
    sandbox_->connections.erase(shared_from_this());
  }

 private:
  struct Half {
    tcp::socket* src = nullptr;
    tcp::socket* dst = nullptr;
    UniqueFd pipe_r, pipe_w;
    size_t pending = 0;  // bytes in the pipe
    bool eof = false;
    bool done = false;
    uint64_t* counter = nullptr;
  };

  void ArmIdle() {
    const auto idle = std::chrono::nanoseconds(absl::ToInt64Nanoseconds(gw_->policy.budgets.idle_timeout));
    idle_.expires_at(last_active_ + idle);
    idle_.async_wait([self = shared_from_this(), idle](boost::system::error_code ec) {
      if (ec || self->closed_) return;
      if (Clock::now() - self->last_active_ >= idle) {
        if (self->decision_ == "none") self->SetDecision("deny", "idle_timeout");
        self->Close("idle_timeout");
        return;
      }
      self->ArmIdle();
    });
  }

  void SetDecision(std::string decision, std::string rule) {
    decision_ = std::move(decision);
    rule_ = std::move(rule);
  }

  void ReadHead() {
    if (buffer_.size() < kMaxRequestHead) buffer_.resize(kMaxRequestHead);
    client_.async_read_some(
        asio::buffer(buffer_.data() + buffered_, kMaxRequestHead - buffered_),
        [self = shared_from_this()](boost::system::error_code ec, size_t n) {
          if (self->closed_) return;
          if (ec) {
            self->SetDecision("none", "client_closed_before_request");
            self->Close(ec == asio::error::eof ? "eof" : "reset");
            return;
          }
          self->buffered_ += n;
          self->last_active_ = Clock::now();
          self->OnBytes();
        });
  }

  void OnBytes() {
    absl::StatusOr<std::optional<RequestHead>> parsed =
        ParseRequestHead(absl::string_view(buffer_.data(), buffered_));
    if (!parsed.ok()) {
      int status = absl::IsResourceExhausted(parsed.status()) ? 431 : absl::IsUnimplemented(parsed.status()) ? 501 : 400;
      Refuse(status, "bad_request", std::string(parsed.status().message()));
      return;
    }
    if (!parsed->has_value()) {
      ReadHead();
      return;
    }
    head_ = **std::move(parsed);
    Decide();
  }

  // The policy, in order: the name (or IP literal), the port, then every
  // address the name resolves to.
  void Decide() {
    const Policy& p = gw_->policy;
    absl::StatusOr<std::array<uint8_t, 16>> literal = ParseAddress(head_.host);
    if (literal.ok()) {
      address_ = FormatAddress(*literal);
      AddressVerdict v = JudgeAddress(*literal, p.allow_cidrs);
      if (!v.allowed || v.rule != "allow_cidr") {
        Refuse(403, "ip_literal", absl::StrCat("host ", head_.host, " is an IP address; only names on the allowlist (or an allow_cidr) are let through"));
        return;
      }
      host_ = address_;
    } else {
      absl::StatusOr<std::string> host = NormalizeHostName(head_.host);
      if (!host.ok()) {
        Refuse(400, "bad_host", std::string(host.status().message()));
        return;
      }
      host_ = *std::move(host);
      if (FindMatch(p.domains, host_) == nullptr) {
        Refuse(403, "domain_allowlist", absl::StrCat("host ", host_, " matches no allowed domain"));
        return;
      }
    }
    if (std::find(p.ports.begin(), p.ports.end(), head_.port) == p.ports.end()) {
      Refuse(403, "port_allowlist", absl::StrCat("port ", head_.port, " is not an allowed port"));
      return;
    }
    if (p.budgets.max_bytes != 0 && sandbox_->bytes >= p.budgets.max_bytes) {
      Refuse(403, "budget_bytes", absl::StrCat("the sandbox used its ", p.budgets.max_bytes, " bytes of egress"));
      return;
    }
    if (literal.ok()) {
      CheckAndConnect({*literal});
      return;
    }
    for (const ResolveOverride& r : p.resolve) {
      if (r.host == host_) {
        CheckAndConnect(r.addresses);
        return;
      }
    }
    resolver_.async_resolve(
        host_, std::to_string(head_.port), tcp::resolver::numeric_service,
        [self = shared_from_this()](boost::system::error_code ec, tcp::resolver::results_type results) {
          if (self->closed_) return;
          if (ec || results.empty()) {
            self->Refuse(502, "resolve_failed", absl::StrCat("cannot resolve ", self->host_, ": ", ec.message()), "error");
            return;
          }
          std::vector<std::array<uint8_t, 16>> addresses;
          for (const auto& entry : results) addresses.push_back(ToBytes(entry.endpoint().address()));
          self->CheckAndConnect(addresses);
        });
  }

  // Every address must pass; the connection goes to exactly these, with no
  // second lookup (so a rebinding DNS answer cannot swap them).
  void CheckAndConnect(const std::vector<std::array<uint8_t, 16>>& addresses) {
    std::vector<tcp::endpoint> endpoints;
    for (const auto& a : addresses) {
      AddressVerdict v = JudgeAddress(a, gw_->policy.allow_cidrs);
      if (!v.allowed) {
        address_ = FormatAddress(a);
        Refuse(403, absl::StrCat("address_class: ", v.rule),
               absl::StrCat(host_, " resolves to ", address_, " (", v.rule, "), which is refused"));
        return;
      }
      asio::ip::address_v6::bytes_type b;
      std::memcpy(b.data(), a.data(), 16);
      asio::ip::address_v6 v6(b);
      endpoints.emplace_back(v6.is_v4_mapped() ? asio::ip::address(asio::ip::make_address_v4(asio::ip::v4_mapped, v6))
                                               : asio::ip::address(v6),
                             head_.port);
    }
    address_ = FormatAddress(addresses.front());
    SetDecision("allow", head_.connect ? "connect" : "http");
    asio::async_connect(upstream_, endpoints,
                        [self = shared_from_this()](boost::system::error_code ec, const tcp::endpoint& ep) {
                          if (self->closed_) return;
                          if (ec) {
                            self->Refuse(502, "upstream_connect", absl::StrCat("connect to ", self->address_, ": ", ec.message()), "error");
                            return;
                          }
                          self->address_ = ep.address().to_string();
                          self->last_active_ = Clock::now();
                          self->Forward();
                        });
  }

  // CONNECT: "200" to the client. HTTP: the rewritten head upstream. Then
  // whatever the client sent after its head, then the relay.
  void Forward() {
    if (head_.connect) {
      reply_ = "HTTP/1.1 200 Connection established\r\n\r\n";
      asio::async_write(client_, asio::buffer(reply_), [self = shared_from_this()](boost::system::error_code ec, size_t) {
        if (self->closed_) return;
        if (ec) return self->Close("reset");
        self->SendEarly();
      });
      return;
    }
    reply_ = UpstreamHead(head_);
    bytes_up_ += reply_.size();
    sandbox_->bytes += reply_.size();
    asio::async_write(upstream_, asio::buffer(reply_), [self = shared_from_this()](boost::system::error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->Close("upstream_reset");
      self->SendEarly();
    });
  }

  void SendEarly() {
    const size_t n = buffered_ - head_.head_bytes;
    if (n == 0) return StartRelay();
    bytes_up_ += n;
    sandbox_->bytes += n;
    asio::async_write(upstream_, asio::buffer(buffer_.data() + head_.head_bytes, n),
                      [self = shared_from_this()](boost::system::error_code ec, size_t) {
                        if (self->closed_) return;
                        if (ec) return self->Close("upstream_reset");
                        self->StartRelay();
                      });
  }

  void StartRelay() {
    buffer_.clear();
    buffer_.shrink_to_fit();
    halves_[0].src = &client_, halves_[0].dst = &upstream_, halves_[0].counter = &bytes_up_;
    halves_[1].src = &upstream_, halves_[1].dst = &client_, halves_[1].counter = &bytes_down_;
    for (Half& h : halves_) {
      int p[2];
      if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
        SetDecision("error", absl::StrCat("pipe2: ", ErrnoName(errno)));
        return Close("error");
      }
      h.pipe_r.reset(p[0]);
      h.pipe_w.reset(p[1]);
      ::fcntl(p[1], F_SETPIPE_SZ, static_cast<int>(kSpliceChunk));  // best effort: 64 KiB otherwise
    }
    for (tcp::socket* s : {&client_, &upstream_}) {
      int fl = ::fcntl(s->native_handle(), F_GETFL);
      ::fcntl(s->native_handle(), F_SETFL, fl | O_NONBLOCK);
    }
    Pump(0);
    Pump(1);
  }

  void Pump(int which) {
    if (closed_) return;
    Half& h = halves_[which];
    const Budgets& budgets = gw_->policy.budgets;
    for (int round = 0; round < kPumpRounds; ++round) {
      if (h.pending == 0) {
        if (h.eof) {
          ::shutdown(h.dst->native_handle(), SHUT_WR);
          h.done = true;
          if (halves_[0].done && halves_[1].done) Close("eof");
          return;
        }
        ssize_t n = ::splice(h.src->native_handle(), nullptr, h.pipe_w.get(), nullptr, kSpliceChunk,
                             SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n == 0) {
          h.eof = true;
          continue;
        }
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN) return Wait(which, tcp::socket::wait_read);
          return Close(which == 0 ? "client_reset" : "upstream_reset");
        }
        h.pending = static_cast<size_t>(n);
      }
      ssize_t m = ::splice(h.pipe_r.get(), nullptr, h.dst->native_handle(), nullptr, h.pending,
                           SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (m < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return Wait(which, tcp::socket::wait_write);
        return Close(which == 0 ? "upstream_reset" : "client_reset");
      }
      h.pending -= static_cast<size_t>(m);
      *h.counter += static_cast<uint64_t>(m);
      sandbox_->bytes += static_cast<uint64_t>(m);
      last_active_ = Clock::now();
      if (budgets.max_bytes != 0 && sandbox_->bytes > budgets.max_bytes) {
        reason_ = absl::StrCat("the sandbox went over its ", budgets.max_bytes, " bytes of egress");
        return Close("budget_bytes");
      }
    }
    asio::post(gw_->io, [self = shared_from_this(), which] { self->Pump(which); });
  }

  void Wait(int which, tcp::socket::wait_type type) {
    Half& h = halves_[which];
    tcp::socket* s = type == tcp::socket::wait_read ? h.src : h.dst;
    s->async_wait(type, [self = shared_from_this(), which](boost::system::error_code ec) {
      if (self->closed_) return;
      if (ec) return self->Close("error");
      self->Pump(which);
    });
  }

  // Answers the client with `status` and a one-line reason naming the rule,
  // then closes.
  void Refuse(int status, std::string rule, std::string reason, std::string decision = "deny") {
    SetDecision(std::move(decision), rule);
    const char* text = status == 403 ? "Forbidden"
                       : status == 400 ? "Bad Request"
                       : status == 431 ? "Request Header Fields Too Large"
                       : status == 501 ? "Not Implemented"
                                       : "Bad Gateway";
    std::string body = absl::StrCat("cubicle egress: refused by rule ", rule, ": ", reason, "\n");
    for (char& c : body) {
      if (c == '\r' || (c == '\n' && &c != &body.back())) c = ' ';
    }
    reply_ = absl::StrCat("HTTP/1.1 ", status, " ", text, "\r\nContent-Type: text/plain\r\nContent-Length: ",
                          body.size(), "\r\nConnection: close\r\nX-Cubicle-Egress-Rule: ", rule, "\r\n\r\n", body);
    reason_ = reason;
    asio::async_write(client_, asio::buffer(reply_), [self = shared_from_this()](boost::system::error_code, size_t) {
      self->Close("refused");
    });
  }

  Gateway::Impl* gw_;
  std::shared_ptr<SandboxState> sandbox_;
  // The request the sandbox ran when this connection reached the gateway.
  const std::string request_id_;
  tcp::socket client_;
  tcp::socket upstream_;
  tcp::resolver resolver_;
  asio::steady_timer idle_;
  Clock::time_point start_, last_active_;
  std::vector<char> buffer_;
  size_t buffered_ = 0;
  RequestHead head_;
  std::string host_, address_, decision_ = "none", rule_, reason_, reply_;
  uint64_t bytes_up_ = 0, bytes_down_ = 0;
  Half halves_[2];
  bool closed_ = false;
};

}  // namespace

void Gateway::Impl::CloseSandbox(const std::shared_ptr<SandboxState>& sandbox, absl::string_view why) {
  if (sandbox->closed) return;
  sandbox->closed = true;
  boost::system::error_code ignored;
  sandbox->channel.close(ignored);
  std::vector<std::shared_ptr<Connection>> open(sandbox->connections.begin(), sandbox->connections.end());
  for (const auto& c : open) c->Close(why);
  sandboxes.erase(sandbox->id);
}

absl::Status Gateway::Impl::AttachOnLoop(const std::string& sandbox, int fd) {
  if (sandboxes.count(sandbox) != 0) {
    ::close(fd);
    return absl::AlreadyExistsError(absl::StrCat("egress: sandbox ", sandbox, " is already attached"));
  }
  auto state = std::make_shared<SandboxState>(io, sandbox, fd);
  sandboxes[sandbox] = state;
  Serve(state);
  return absl::OkStatus();
}

void Gateway::Impl::Tag(const std::string& sandbox, const std::string& request_id) {
  auto it = sandboxes.find(sandbox);
  if (it != sandboxes.end() && ValidRequestId(request_id)) it->second->request_id = request_id;
}

void Gateway::Impl::ReadLauncher() {
  launcher->async_wait(asio::posix::stream_descriptor::wait_read, [this](boost::system::error_code ec) {
    if (!launcher.has_value()) return;
    if (ec || !DrainLauncher()) return LauncherGone();
    ReadLauncher();
  });
}

// Every message the launcher has sent so far, without waiting. False at
// EOF (or an error): the launcher is gone.
bool Gateway::Impl::DrainLauncher() {
  if (!launcher.has_value()) return true;
  message.resize(kMaxControlMessage);
  for (;;) {
    int received = -1;
    size_t nfds = 0;
    int msg_flags = 0;
    const ssize_t n = ReceiveWithFds(launcher->native_handle(), message.data(), message.size(), &received, 1, &nfds,
                                     MSG_DONTWAIT, &msg_flags);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    UniqueFd passed(nfds > 0 ? received : -1);
    if (n <= 0) return false;
    const absl::string_view m(message.data(), static_cast<size_t>(n));
    std::string sandbox, request_id;
    uint64_t sequence = 0;
    if (m[0] == 'A' && passed && m.size() > 1) {
      (void)AttachOnLoop(std::string(m.substr(1)), passed.release());  // a second "A": refused, fd closed
    } else if (m[0] == 'D') {
      auto it = sandboxes.find(std::string(m.substr(1)));
      if (it != sandboxes.end()) CloseSandbox(std::shared_ptr<SandboxState>(it->second), "sandbox_gone");
    } else if (ParseTagMessage(m, &sandbox, &request_id)) {
      Tag(sandbox, request_id);
    } else if (ParseCountsRequest(m, &sequence)) {
      // A launcher that does not read its answers loses them; it asks again.
      const std::string reply = CountsReply(sequence, counts);
      (void)::send(launcher->native_handle(), reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
  }
}

// The launcher hung up (or died): every sandbox is closed, the final
// counts go back on the socket it may still read, and ServeLauncher
// returns.
void Gateway::Impl::LauncherGone() {
  if (!launcher.has_value()) return;
  std::vector<std::shared_ptr<SandboxState>> all;
  for (auto& [id, s] : sandboxes) all.push_back(s);
  for (auto& s : all) CloseSandbox(s, "gateway_stopped");
  const std::string last = FinalCounts(counts);
  (void)::send(launcher->native_handle(), last.data(), last.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  boost::system::error_code ignored;
  launcher->close(ignored);
  launcher.reset();
  if (launcher_gone != nullptr) launcher_gone->set_value();
  launcher_gone = nullptr;
}

// Receives client sockets from the sandbox's init until its end closes.
void Gateway::Impl::Serve(std::shared_ptr<SandboxState> sandbox) {
  sandbox->channel.async_wait(asio::posix::stream_descriptor::wait_read, [this, sandbox](boost::system::error_code ec) {
    if (sandbox->closed) return;
    if (ec) return CloseSandbox(sandbox, "sandbox_gone");
    // What the launcher sent first is read first: a tag it sent before the
    // request that made these connections, or the sandbox's detach.
    if (!DrainLauncher()) return LauncherGone();
    if (sandbox->closed) return;
    for (;;) {
      char tag;
      int received = -1;
      size_t nfds = 0;
      int msg_flags = 0;
      ssize_t n = ReceiveWithFds(sandbox->channel.native_handle(), &tag, 1, &received, 1, &nfds, MSG_DONTWAIT,
                                 &msg_flags);
      if (n < 0 && errno == EAGAIN) break;
      if (n <= 0) {
        if (nfds > 0) ::close(received);
        return CloseSandbox(sandbox, "sandbox_gone");  // init is gone
      }
      std::vector<int> fds;
      if (nfds > 0) fds.push_back(received);
      // One TCP socket per message, from our own init; anything else is
      // closed unread.
      for (size_t i = 0; i < fds.size(); ++i) {
        UniqueFd fd(fds[i]);
        int type = 0, domain = 0;
        socklen_t len = sizeof(int);
        if (i != 0 || (msg_flags & MSG_CTRUNC) ||
            ::getsockopt(fd.get(), SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM ||
            ::getsockopt(fd.get(), SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_INET) {
          continue;
        }
        tcp::socket client(io);
        boost::system::error_code assign_ec;
        client.assign(tcp::v4(), fd.release(), assign_ec);
        if (assign_ec) continue;
        auto conn = std::make_shared<Connection>(this, sandbox, std::move(client));
        const bool over = sandbox->connections.size() >= policy.budgets.max_connections;
        sandbox->connections.insert(conn);
        if (over) {
          conn->RefuseAtOnce("budget_connections",
                             absl::StrCat("the sandbox has ", policy.budgets.max_connections, " connections open"));
        } else {
          conn->Start();
        }
      }
    }
    Serve(sandbox);
  });
}

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::shared_ptr<Gateway>> Gateway::Start(const Policy& policy, UniqueFd log_fd) {
  if (policy.mode != NetMode::kAllowlist) {
    return absl::InvalidArgumentError("a gateway serves an allowlist policy only");
  }
  CUBICLE_RETURN_IF_ERROR(ValidatePolicy(policy));
  auto impl = std::make_unique<Impl>();
  impl->policy = policy;
  impl->revision = Revision(policy);
  if (log_fd) {
    impl->log.emplace(DecisionLog::Adopt(std::move(log_fd)));
  } else {
    CUBICLE_ASSIGN_OR_RETURN(DecisionLog log, DecisionLog::Open(policy.log_path));
    impl->log.emplace(std::move(log));
  }
  impl->work.emplace(asio::make_work_guard(impl->io));
  Impl* raw = impl.get();
  std::promise<absl::Status> dropped;
  impl->thread = std::thread([raw, &dropped] {
    ::pthread_setname_np(::pthread_self(), "cubicle-egress");
    absl::Status st = DropThreadPrivileges();
    const bool ok = st.ok();
    dropped.set_value(std::move(st));
    if (ok) raw->io.run();
  });
  if (absl::Status st = dropped.get_future().get(); !st.ok()) {
    impl->thread.join();
    return st;
  }
  return std::shared_ptr<Gateway>(new Gateway(std::move(impl)));
}

Gateway::~Gateway() {
  Impl* impl = impl_.get();
  asio::post(impl->io, [impl] {
    std::vector<std::shared_ptr<SandboxState>> all;
    for (auto& [id, s] : impl->sandboxes) all.push_back(s);
    for (auto& s : all) impl->CloseSandbox(s, "gateway_stopped");
    impl->work.reset();
    impl->io.stop();
  });
  if (impl->thread.joinable()) impl->thread.join();
}

const std::string& Gateway::revision() const { return impl_->revision; }
const Policy& Gateway::policy() const { return impl_->policy; }

absl::StatusOr<Attachment> Gateway::Attach(const std::string& sandbox, UniqueFd channel) {
  int type = 0;
  socklen_t len = sizeof(type);
  if (::getsockopt(channel.get(), SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
    return ErrnoStatus(errno, "getsockopt(egress channel, SO_TYPE)");
  }
  if (type != SOCK_SEQPACKET) return absl::InvalidArgumentError("egress channel: not a SOCK_SEQPACKET socket");
  std::promise<absl::Status> done;
  Impl* impl = impl_.get();
  int fd = channel.release();
  asio::post(impl->io, [impl, sandbox, fd, &done] { done.set_value(impl->AttachOnLoop(sandbox, fd)); });
  CUBICLE_RETURN_IF_ERROR(done.get_future().get());
  std::shared_ptr<Gateway> self = shared_from_this();
  Gateway* raw = self.get();
  return Attachment(
      std::move(self), [raw, sandbox] { raw->Detach(sandbox); },
      [raw, sandbox](const std::string& request_id) { raw->Tag(sandbox, request_id); });
}

void Gateway::Tag(const std::string& sandbox, const std::string& request_id) {
  std::promise<void> done;
  Impl* impl = impl_.get();
  asio::post(impl->io, [impl, &sandbox, &request_id, &done] {
    impl->Tag(sandbox, request_id);
    done.set_value();
  });
  done.get_future().wait();
}

Counts Gateway::CountsSoFar() {
  std::promise<Counts> done;
  Impl* impl = impl_.get();
  asio::post(impl->io, [impl, &done] { done.set_value(impl->counts); });
  return done.get_future().get();
}

void Gateway::ServeLauncher(UniqueFd control) {
  std::promise<void> gone;
  Impl* impl = impl_.get();
  int fd = control.release();
  asio::post(impl->io, [impl, fd, &gone] {
    impl->launcher.emplace(impl->io, fd);
    impl->launcher_gone = &gone;
    impl->ReadLauncher();
  });
  gone.get_future().wait();
}

void Gateway::Detach(const std::string& sandbox) {
  std::promise<void> done;
  Impl* impl = impl_.get();
  asio::post(impl->io, [impl, &sandbox, &done] {
    auto it = impl->sandboxes.find(sandbox);
    if (it != impl->sandboxes.end()) impl->CloseSandbox(std::shared_ptr<SandboxState>(it->second), "sandbox_gone");
    done.set_value();
  });
  done.get_future().wait();
}

Attachment::Attachment(std::shared_ptr<void> gateway, std::function<void()> detach, Tagger tag)
    : gateway_(std::move(gateway)), detach_(std::move(detach)), tag_(std::move(tag)) {}

Attachment& Attachment::operator=(Attachment&& other) noexcept {
  if (this != &other) {
    Release();
    gateway_ = std::move(other.gateway_);
    detach_ = std::move(other.detach_);
    tag_ = std::move(other.tag_);
  }
  return *this;
}

Attachment::~Attachment() { Release(); }

void Attachment::Tag(const std::string& request_id) const {
  if (tag_) tag_(request_id);
}

void Attachment::Release() {
  if (detach_) detach_();
  detach_ = nullptr;
  tag_ = nullptr;
  gateway_.reset();  // the last sandbox of a revision stops its gateway
}

}  // namespace cubicle::egress
