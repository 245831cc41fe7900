// The host side of egress: an HTTP/1.1 forward proxy (absolute-URI requests
// and CONNECT tunnels, TLS passed through untouched) that lets a sandbox
// reach only the names of its policy, on its ports, at addresses the
// classifier accepts — connecting to the very address it checked.
//
// This is the engine. The launcher runs one per policy revision in a
// process of its own (gateway_process.h), shared by the sandboxes with that
// policy: made on first use, gone when the last sandbox lets go.
// Each sandbox is attached by its private socketpair; the gateway receives
// the sandbox's accepted client sockets on it (bridge.h), so which sandbox a
// connection came from is which socketpair it arrived on — nothing inside
// the sandbox can claim another identity.
//
// It runs on its own Boost.Asio thread, which drops root for that thread
// (kGatewayId, no capabilities, no_new_privs, the sandboxes' baseline
// seccomp filter) before it reads anything. Relaying is splice(2) through a pipe per direction: the
// bytes never enter user space.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "egress/counts.h"
#include "egress/policy.h"

namespace cubicle::egress {

class Gateway;

// The host uid and gid the gateway's thread runs as when the launcher is
// root: below the sandboxes' range (runtime::kDefaultHostIdBase), mapped
// into no sandbox, owning nothing.
inline constexpr unsigned kGatewayId = 999'999;

// One sandbox's hold on its gateway (in-process or its own process): while
// it lives, connections arriving on the sandbox's channel are served; its
// destruction closes the channel and every open connection of that sandbox,
// and lets go of the gateway.
class Attachment {
 public:
  using Tagger = std::function<void(const std::string& request_id)>;
  Attachment() = default;
  Attachment(std::shared_ptr<void> gateway, std::function<void()> detach, Tagger tag = nullptr);
  Attachment(Attachment&&) noexcept = default;
  Attachment& operator=(Attachment&& other) noexcept;
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;
  ~Attachment();

  // The sandbox's connections from now on belong to `request_id`: their
  // decision lines carry it (docs/egress.md). Called before the request is
  // handed to the sandbox, so no connection of the request can come first.
  // Nothing for an empty Attachment.
  void Tag(const std::string& request_id) const;

 private:
  void Release();
  std::shared_ptr<void> gateway_;
  std::function<void()> detach_;
  Tagger tag_;
};

// The decision log: `path` opened for appending, or a copy of stderr when
// empty.
absl::StatusOr<UniqueFd> OpenDecisionLog(const std::string& path);

class Gateway : public std::enable_shared_from_this<Gateway> {
 public:
  // Validates `policy` (allowlist mode) and starts the gateway's thread.
  // The decision log is `log` when given (opened before privileges were
  // dropped), else policy.log_path. Fails with the step that failed.
  static absl::StatusOr<std::shared_ptr<Gateway>> Start(const Policy& policy, UniqueFd log = UniqueFd());
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // Serves connections arriving on `channel` (the host end of a
  // SOCK_SEQPACKET socketpair) as coming from `sandbox`.
  absl::StatusOr<Attachment> Attach(const std::string& sandbox, UniqueFd channel);

  // `sandbox`'s connections from now on carry `request_id` in the log (an
  // invalid id, or a sandbox not attached, is ignored). Returns once the
  // engine has it.
  void Tag(const std::string& sandbox, const std::string& request_id);

  // The connections ended so far, by decision and rule, and the bytes
  // relayed (egress/counts.h).
  Counts CountsSoFar();

  // A gateway process's engine serves its launcher's control socket
  // itself, on its own thread (the messages after "R" in
  // egress/gateway_process.h): a tag is then always read before any
  // connection the tagged request makes, since the launcher sends it before
  // the request and the engine reads what the launcher sent before what a
  // sandbox sent. Returns when the launcher hangs up, once every sandbox is
  // closed and the final counts are sent.
  void ServeLauncher(UniqueFd control);

  const std::string& revision() const;
  const Policy& policy() const;

  struct Impl;  // opaque: the Asio state, defined in gateway.cc

 private:
  explicit Gateway(std::unique_ptr<Impl> impl);
  void Detach(const std::string& sandbox);  // waits until it is done
  std::unique_ptr<Impl> impl_;
};

}  // namespace cubicle::egress
