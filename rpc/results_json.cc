#include "rpc/results_json.h"

#include <boost/json/array.hpp>

#include <optional>
#include <string>

#include "absl/time/time.h"

namespace cubicle::rpc {
namespace {

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }
double Ms(const struct timeval& tv) { return static_cast<double>(tv.tv_sec) * 1e3 + tv.tv_usec / 1e3; }

}  // namespace

boost::json::object ResultToJson(const runtime::ExecResult& result) {
  boost::json::object out;
  out["reason"] = std::string(runtime::ExitReasonName(result.reason));
  out["exit_code"] = result.reason == runtime::ExitReason::kExited ? boost::json::value(result.exit_code)
                                                                    : boost::json::value(nullptr);
  out["signal"] = result.signal != 0 ? boost::json::value(result.signal) : boost::json::value(nullptr);
  out["status"] = result.ShellStatus();
  out["warm"] = result.warm;
  if (result.reason == runtime::ExitReason::kSetupFailed) {
    out["error"] = std::string(result.setup_error.message());
  }
  out["wall_ms"] = Ms(result.wall);
  out["setup_ms"] = Ms(result.setup);
  boost::json::object ru;
  ru["user_ms"] = Ms(result.rusage.ru_utime);
  ru["system_ms"] = Ms(result.rusage.ru_stime);
  ru["max_rss_kb"] = result.rusage.ru_maxrss;
  ru["minor_faults"] = result.rusage.ru_minflt;
  ru["major_faults"] = result.rusage.ru_majflt;
  ru["voluntary_switches"] = result.rusage.ru_nvcsw;
  ru["involuntary_switches"] = result.rusage.ru_nivcsw;
  out["rusage"] = std::move(ru);
  if (result.cgroup.has_value()) {
    const cgroups::Stats& st = *result.cgroup;
    boost::json::object cg;
    auto put = [&](const char* key, const std::optional<uint64_t>& v) {
      cg[key] = v.has_value() ? boost::json::value(*v) : boost::json::value(nullptr);
    };
    put("memory_peak_bytes", st.memory_peak_bytes);
    put("cpu_usage_ns", st.cpu_usage_ns);
    put("pids_peak", st.pids_peak);
    put("oom_kills", st.oom_kills);
    put("memory_limit_hits", st.memory_limit_hits);
    out["cgroup"] = std::move(cg);
  } else {
    out["cgroup"] = nullptr;
  }
  boost::json::array steps;
  for (const auto& [name, d] : result.steps) {
    steps.push_back(boost::json::object{{"step", name}, {"ms", Ms(d)}});
  }
  out["steps"] = std::move(steps);
  boost::json::array warnings;
  for (const std::string& w : result.warnings) warnings.push_back(boost::json::string(w));
  out["warnings"] = std::move(warnings);
  return out;
}

boost::json::object ProbeToJson(const runtime::ProbeReport& report) {
  boost::json::object out;
  out["root"] = report.root;
  out["kernel"] = report.kernel;
  boost::json::object checks;
  for (const runtime::ProbeCheck& c : report.checks) {
    boost::json::object o{{"ok", c.ok}, {"detail", c.detail}};
    if (!c.ok) o["impact"] = c.impact;
    checks[c.name] = std::move(o);
  }
  out["checks"] = std::move(checks);
  boost::json::object cg;
  cg["version"] = report.cgroups.version;
  cg["v2_mount"] = report.cgroups.v2_mount;
  boost::json::array v2, v1;
  for (const std::string& c : report.cgroups.v2_controllers) v2.push_back(boost::json::string(c));
  for (const std::string& c : report.cgroups.v1_controllers) v1.push_back(boost::json::string(c));
  cg["v2_controllers"] = std::move(v2);
  cg["v1_controllers"] = std::move(v1);
  out["cgroups"] = std::move(cg);
  boost::json::array warnings;
  for (const std::string& w : report.warnings) warnings.push_back(boost::json::string(w));
  out["warnings"] = std::move(warnings);
  return out;
}

bool ValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += len;
  }
  return true;
}

size_t Utf8Boundary(absl::string_view s) {
  // The last lead byte within the final 3 bytes, and whether what follows
  // it is fewer continuation bytes than it announces.
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c >> 6) == 0x2) continue;  // a continuation byte: look further back
    const size_t len = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    return len > back ? s.size() - back : s.size();
  }
  return s.size();
}

}  // namespace cubicle::rpc
