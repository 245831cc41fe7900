#include "cli/egress_flags.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "cli/flag_values.h"
#include "egress/policy.h"

namespace cubicle::cli {
namespace {

CLI::Option* Repeatable(CLI::App* app, const char* name, const char* type, const char* help) {
  return app->add_option(name)
      ->description(help)
      ->type_size(1)
      ->type_name(type)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

// "flag: message" for errors that name the value already.
absl::Status Named(absl::string_view flag, const absl::Status& st) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", st.message()));
}

}  // namespace

void AddEgressFlags(CLI::App* app, EgressFlags* f) {
  app->add_option("--net", f->net, "Network policy: none (default: lo only) or allowlist (via the egress gateway)");
  f->allow_domain = Repeatable(app, "--allow-domain", "PATTERN",
                               "With --net allowlist: example.org (that name) or *.example.org (its subdomains)");
  f->allow_port = Repeatable(app, "--allow-port", "N", "With --net allowlist: an allowed port (default 80 and 443)");
  f->allow_cidr = Repeatable(app, "--egress-allow-cidr", "CIDR",
                             "Let a normally refused address range through (e.g. an internal mirror)");
  f->resolve = Repeatable(app, "--egress-resolve", "HOST=ADDR", "Answer HOST with ADDR instead of DNS");
  app->add_option("--egress-max-connections", f->max_connections, "Connections open at once (default 64)");
  app->add_option("--egress-max-bytes", f->max_bytes, "Bytes both ways over all connections (default: no cap)");
  app->add_option("--egress-idle-timeout", f->idle_timeout, "Seconds a connection may idle (default 60)");
  app->add_option("--egress-port", f->bridge_port, "The bridge's port on 127.0.0.1 inside (default 18118)");
  app->add_option("--egress-log", f->log, "Append the gateway's JSON-lines decisions to FILE (default: stderr)");
}

absl::Status ApplyEgressFlags(const EgressFlags& f, bool seccomp_given, runtime::SandboxSpec* spec) {
  absl::StatusOr<egress::NetMode> mode = egress::ParseNetMode(f.net);
  if (!mode.ok()) return Named("--net", mode.status());
  egress::Policy& p = spec->egress;
  p = egress::Policy();
  p.mode = *mode;
  if (p.mode == egress::NetMode::kNone) {
    for (const CLI::Option* opt : {f.allow_domain, f.allow_port, f.allow_cidr, f.resolve}) {
      if (opt->count() > 0) return absl::InvalidArgumentError(absl::StrCat(opt->get_name(), " needs --net allowlist"));
    }
    for (const std::string* v : {&f.max_connections, &f.max_bytes, &f.idle_timeout, &f.bridge_port, &f.log}) {
      if (!v->empty()) return absl::InvalidArgumentError("the --egress-* flags need --net allowlist");
    }
    return absl::OkStatus();
  }
  for (const std::string& text : f.allow_domain->results()) {
    absl::StatusOr<egress::DomainPattern> d = egress::ParseDomainPattern(text);
    if (!d.ok()) return Named("--allow-domain", d.status());
    p.domains.push_back(*std::move(d));
  }
  if (f.allow_port->count() > 0) p.ports.clear();
  for (const std::string& text : f.allow_port->results()) {
    absl::StatusOr<uint16_t> port = egress::ParsePort(text);
    if (!port.ok()) return Named("--allow-port", port.status());
    if (std::find(p.ports.begin(), p.ports.end(), *port) == p.ports.end()) p.ports.push_back(*port);
  }
  for (const std::string& text : f.allow_cidr->results()) {
    absl::StatusOr<egress::Cidr> c = egress::ParseCidr(text);
    if (!c.ok()) return Named("--egress-allow-cidr", c.status());
    p.allow_cidrs.push_back(*c);
  }
  for (const std::string& text : f.resolve->results()) {
    absl::StatusOr<egress::ResolveOverride> r = egress::ParseResolve(text);
    if (!r.ok()) return Named("--egress-resolve", r.status());
    p.resolve.push_back(*std::move(r));
  }
  if (!f.max_connections.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(std::optional<uint64_t> n, ParseLimitCount("--egress-max-connections", f.max_connections));
    if (!n.has_value() || *n == 0 || *n > 100000) {
      return absl::InvalidArgumentError(
          absl::StrCat("--egress-max-connections '", f.max_connections, "': expected 1 to 100000"));
    }
    p.budgets.max_connections = static_cast<uint32_t>(*n);
  }
  if (!f.max_bytes.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(p.budgets.max_bytes, ParseSize("--egress-max-bytes", f.max_bytes));
    if (p.budgets.max_bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--egress-max-bytes '", f.max_bytes, "': must be positive"));
    }
  }
  if (!f.idle_timeout.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(p.budgets.idle_timeout, ParseSeconds("--egress-idle-timeout", f.idle_timeout));
  }
  if (!f.bridge_port.empty()) {
    absl::StatusOr<uint16_t> port = egress::ParsePort(f.bridge_port);
    if (!port.ok()) return Named("--egress-port", port.status());
    p.bridge_port = *port;
  }
  p.log_path = f.log;
  if (!p.log_path.empty() && p.log_path.front() != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) return ErrnoStatus(errno, "--egress-log: getcwd");
    p.log_path = absl::StrCat(cwd, "/", p.log_path);
  }
  if (!seccomp_given && spec->seccomp == seccomp::Policy::kNoNetwork) spec->seccomp = seccomp::Policy::kDefault;
  return egress::ValidatePolicy(p);
}

}  // namespace cubicle::cli
