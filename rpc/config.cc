#include "rpc/config.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <unordered_set>
#include <utility>

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/status.h"
#include "base/units.h"
#include "npu/host_layout.h"
#include "npu/passthrough.h"
#include "egress/policy_json.h"
#include "rootfs/mount_plan.h"
#include "runtime/defaults.h"
#include "seccomp/policy.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

constexpr size_t kMaxConfigBytes = 16 << 20;
constexpr uint64_t kMaxId = 4294967294u;  // (uid_t)-1 means "no change" to the kernel
constexpr size_t kMaxSocketPath = 107;    // sun_path, less its NUL

// ---------------------------------------------------------------------------
// JSON paths, as errors show them: "profiles.shell.binds[2].dest".

std::string Member(absl::string_view path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

std::string Element(absl::string_view path, size_t index) { return absl::StrCat(path, "[", index, "]"); }

absl::Status Error(absl::string_view path, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", problem));
}

absl::string_view AsView(json::string_view s) { return absl::string_view(s.data(), s.size()); }

// ---------------------------------------------------------------------------
// The syntax pass. boost::json::parse keeps the last of duplicate keys
// without a word, so a first pass with a handler that only remembers keys
// turns `"memory": "256M", ... "memory": "8G"` into an error naming both the
// path and the place. It also yields the offset of a syntax error.

class KeyChecker {
 public:
  static constexpr size_t max_object_size = size_t(-1);
  static constexpr size_t max_array_size = size_t(-1);
  static constexpr size_t max_key_size = size_t(-1);
  static constexpr size_t max_string_size = size_t(-1);

  bool on_document_begin(boost::system::error_code&) { return true; }
  bool on_document_end(boost::system::error_code&) { return true; }
  bool on_object_begin(boost::system::error_code&) {
    frames_.push_back(Frame{.object = true});
    return true;
  }
  bool on_object_end(size_t, boost::system::error_code&) { return EndContainer(); }
  bool on_array_begin(boost::system::error_code&) {
    frames_.push_back(Frame{.object = false});
    return true;
  }
  bool on_array_end(size_t, boost::system::error_code&) { return EndContainer(); }
  bool on_key_part(json::string_view s, size_t, boost::system::error_code&) {
    partial_key_.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, size_t, boost::system::error_code& ec) {
    partial_key_.append(s.data(), s.size());
    Frame& top = frames_.back();
    if (top.keys.contains(partial_key_)) {
      duplicate_ = absl::StrCat(PathOfTop(), ": duplicate key '", partial_key_, "'");
      ec = json::error::syntax;  // any error stops the parser; duplicate_ says which
      return false;
    }
    top.keys.insert(partial_key_);
    top.key = std::move(partial_key_);
    partial_key_.clear();
    return true;
  }
  bool on_string_part(json::string_view, size_t, boost::system::error_code&) { return true; }
  bool on_string(json::string_view, size_t, boost::system::error_code&) { return Scalar(); }
  bool on_number_part(json::string_view, boost::system::error_code&) { return true; }
  bool on_int64(int64_t, json::string_view, boost::system::error_code&) { return Scalar(); }
  bool on_uint64(uint64_t, json::string_view, boost::system::error_code&) { return Scalar(); }
  bool on_double(double, json::string_view, boost::system::error_code&) { return Scalar(); }
  bool on_bool(bool, boost::system::error_code&) { return Scalar(); }
  bool on_null(boost::system::error_code&) { return Scalar(); }
  bool on_comment_part(json::string_view, boost::system::error_code&) { return true; }
  bool on_comment(json::string_view, boost::system::error_code&) { return true; }

  const std::string& duplicate() const { return duplicate_; }

 private:
  struct Frame {
    bool object = true;
    std::unordered_set<std::string> keys;
    std::string key;                // the member being read
    size_t index = 0;               // the element being read
  };

  bool Scalar() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
    return true;
  }
  bool EndContainer() {
    frames_.pop_back();
    return Scalar();
  }
  // The path of the innermost container.
  std::string PathOfTop() const {
    std::string path;
    for (size_t i = 0; i + 1 < frames_.size(); ++i) {
      path = frames_[i].object ? Member(path, frames_[i].key) : Element(path, frames_[i].index);
    }
    return path.empty() ? "(top level)" : path;
  }

  std::vector<Frame> frames_;
  std::string partial_key_;
  std::string duplicate_;
};

json::parse_options Options() {
  json::parse_options options;
  options.allow_comments = true;  // operators annotate their configs
  return options;
}

std::string LineColumn(absl::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  size_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return absl::StrCat("line ", line, ", column ", offset - line_start + 1);
}

absl::StatusOr<json::value> ParseJson(absl::string_view text) {
  json::basic_parser<KeyChecker> checker(Options());
  boost::system::error_code ec;
  size_t consumed = checker.write_some(false, text.data(), text.size(), ec);
  if (!ec && consumed < text.size()) ec = json::error::extra_data;  // it stops after one value
  if (ec) {
    const std::string& duplicate = checker.handler().duplicate();
    if (!duplicate.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(duplicate, " (", LineColumn(text, consumed), ")"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON at ", LineColumn(text, consumed), ": ", ec.message()));
  }
  json::value value = json::parse(json::string_view(text.data(), text.size()), ec, {}, Options());
  if (ec) return absl::InvalidArgumentError(absl::StrCat("invalid JSON: ", ec.message()));
  return value;
}

// ---------------------------------------------------------------------------
// Typed reading, one value at a time. Each converter takes the value and its
// path and says precisely what was expected.

std::string Describe(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: return "null";
    case json::kind::bool_: return v.get_bool() ? "true" : "false";
    case json::kind::int64: return absl::StrCat(v.get_int64());
    case json::kind::uint64: return absl::StrCat(v.get_uint64());
    case json::kind::double_: return absl::StrCat(v.get_double());
    case json::kind::string: return absl::StrCat("'", AsView(v.get_string()), "'");
    case json::kind::array: return "an array";
    case json::kind::object: return "an object";
  }
  return "a value";
}

absl::Status Expected(const json::value& v, absl::string_view path, absl::string_view what) {
  return Error(path, absl::StrCat("expected ", what, ", got ", Describe(v)));
}

absl::StatusOr<std::string> AsString(const json::value& v, absl::string_view path) {
  if (!v.is_string()) return Expected(v, path, "a string");
  absl::string_view s = AsView(v.get_string());
  if (s.find('\0') != absl::string_view::npos) return Error(path, "contains a NUL byte");
  return std::string(s);
}

absl::StatusOr<bool> AsBool(const json::value& v, absl::string_view path) {
  if (!v.is_bool()) return Expected(v, path, "true or false");
  return v.get_bool();
}

// A whole number in [min, max]. JSON does not tell 1000 from 1e3 or 1000.0,
// so neither does this; 1.5 is an error.
absl::StatusOr<uint64_t> AsCount(const json::value& v, absl::string_view path, uint64_t min, uint64_t max) {
  uint64_t n;
  if (v.is_uint64()) {
    n = v.get_uint64();
  } else if (v.is_int64() && v.get_int64() >= 0) {
    n = static_cast<uint64_t>(v.get_int64());
  } else if (v.is_int64()) {
    return Error(path, absl::StrCat(v.get_int64(), " is negative"));
  } else if (v.is_double() && v.get_double() < 0) {
    return Error(path, absl::StrCat(v.get_double(), " is negative"));
  } else if (v.is_double() && std::floor(v.get_double()) == v.get_double()) {
    if (v.get_double() >= 0x1p64) {
      return Error(path, absl::StrCat(v.get_double(), " is outside [", min, ", ", max, "]"));
    }
    n = static_cast<uint64_t>(v.get_double());
  } else {
    return Expected(v, path, "a whole number");
  }
  if (n < min || n > max) return Error(path, absl::StrCat(n, " is outside [", min, ", ", max, "]"));
  return n;
}

// "256M"-style strings or plain byte counts.
absl::StatusOr<uint64_t> AsSize(const json::value& v, absl::string_view path) {
  if (v.is_string()) {
    absl::StatusOr<uint64_t> n = ParseSize(path, AsView(v.get_string()));
    if (!n.ok()) return Error(path, absl::StrCat(Describe(v), " is not a size (expected 256M or bytes)"));
    return *n;
  }
  if (v.is_number()) {
    absl::StatusOr<uint64_t> n = AsCount(v, path, 0, UINT64_MAX);
    if (n.ok()) return *n;
  }
  return Error(path, absl::StrCat(Describe(v), " is not a size (expected 256M or bytes)"));
}

absl::StatusOr<uint64_t> AsPositiveSize(const json::value& v, absl::string_view path) {
  CUBICLE_ASSIGN_OR_RETURN(uint64_t n, AsSize(v, path));
  if (n == 0) return Error(path, "must be positive");
  return n;
}

absl::StatusOr<double> AsPositiveNumber(const json::value& v, absl::string_view path) {
  if (!v.is_number()) return Expected(v, path, "a number");
  double d = v.to_number<double>();
  if (!std::isfinite(d) || d <= 0) return Error(path, absl::StrCat(d, " must be positive"));
  return d;
}

// Milliseconds, a positive whole number below a year.
absl::StatusOr<absl::Duration> AsMillis(const json::value& v, absl::string_view path) {
  CUBICLE_ASSIGN_OR_RETURN(uint64_t ms, AsCount(v, path, 1, uint64_t{365} * 24 * 3600 * 1000));
  return absl::Milliseconds(static_cast<int64_t>(ms));
}

// An octal permission string: "0600", "1777". Never a JSON number, where
// 600 would silently mean 01130.
absl::StatusOr<uint32_t> AsMode(const json::value& v, absl::string_view path, uint32_t max) {
  if (!v.is_string()) return Expected(v, path, "an octal mode string like \"0600\"");
  absl::string_view s = AsView(v.get_string());
  uint32_t mode = 0;
  bool ok = !s.empty() && s.size() <= 5;
  for (char c : s) {
    if (c < '0' || c > '7') ok = false;
    mode = mode * 8 + static_cast<uint32_t>(c - '0');
  }
  if (!ok || mode > max) {
    return Error(path, absl::StrFormat("'%s' is not an octal mode (expected e.g. \"0600\", at most 0%o)", s, max));
  }
  return mode;
}

// An object whose keys are all known: a misspelt key is an error, never
// silently ignored.
class Object {
 public:
  static absl::StatusOr<Object> Open(const json::value& v, std::string path,
                                     std::initializer_list<absl::string_view> allowed) {
    if (!v.is_object()) return Expected(v, path.empty() ? "(top level)" : path, "an object");
    for (const json::key_value_pair& kv : v.get_object()) {
      absl::string_view key = AsView(kv.key());
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        return Error(Member(path, key),
                     absl::StrCat("unknown key (expected one of: ", absl::StrJoin(allowed, ", "), ")"));
      }
    }
    return Object(v.get_object(), std::move(path));
  }

  const json::value* Find(absl::string_view key) const {
    return object_->if_contains(json::string_view(key.data(), key.size()));
  }
  std::string PathOf(absl::string_view key) const { return Member(path_, key); }
  const std::string& path() const { return path_; }

  // Reads `key`, when present, into `out` (a T or a std::optional<T>).
  template <typename Out, typename Convert>
  absl::Status Read(absl::string_view key, Out* out, Convert convert) const {
    const json::value* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    auto converted = convert(*v, PathOf(key));
    if (!converted.ok()) return converted.status();
    *out = *std::move(converted);
    return absl::OkStatus();
  }

 private:
  Object(const json::object& object, std::string path) : object_(&object), path_(std::move(path)) {}
  const json::object* object_;
  std::string path_;
};

auto CountIn(uint64_t min, uint64_t max) {
  return [min, max](const json::value& v, absl::string_view path) { return AsCount(v, path, min, max); };
}

template <typename T>
absl::Status ReadCount(const Object& o, absl::string_view key, T* out, uint64_t min, uint64_t max) {
  uint64_t n = static_cast<uint64_t>(*out);
  CUBICLE_RETURN_IF_ERROR(o.Read(key, &n, CountIn(min, max)));
  *out = static_cast<T>(n);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> AsStringArray(const json::value& v, absl::string_view path) {
  if (!v.is_array()) return Expected(v, path, "an array of strings");
  std::vector<std::string> out;
  const json::array& a = v.get_array();
  for (size_t i = 0; i < a.size(); ++i) {
    CUBICLE_ASSIGN_OR_RETURN(std::string s, AsString(a[i], Element(path, i)));
    out.push_back(std::move(s));
  }
  return out;
}

// Each element of an array of objects, with its path.
template <typename Each>
absl::Status ForEachElement(const json::value& v, absl::string_view path, Each each) {
  if (!v.is_array()) return Expected(v, path, "an array");
  const json::array& a = v.get_array();
  for (size_t i = 0; i < a.size(); ++i) CUBICLE_RETURN_IF_ERROR(each(a[i], Element(path, i)));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// The sections.

unsigned HostCpus() {
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<unsigned>(n) : 1;
}

absl::Status ParseSocket(const json::value& v, DaemonConfig* config) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, "socket", {"path", "mode"}));
  CUBICLE_RETURN_IF_ERROR(o.Read("path", &config->socket_path, AsString));
  if (o.Find("path") != nullptr) {
    const std::string& p = config->socket_path;
    if (p.empty() || p.front() != '/') {
      return Error(o.PathOf("path"), absl::StrCat("'", p, "' must be an absolute path"));
    }
    if (p.size() > kMaxSocketPath) {
      return Error(o.PathOf("path"), absl::StrCat("'", p, "' is longer than the ", kMaxSocketPath,
                                                  " bytes a Unix socket address holds"));
    }
  }
  return o.Read("mode", &config->socket_mode,
                [](const json::value& m, absl::string_view path) { return AsMode(m, path, 0777); });
}

absl::Status ParseConcurrency(const json::value& v, DaemonConfig* config) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, "concurrency", {"max_concurrent", "max_queue"}));
  CUBICLE_RETURN_IF_ERROR(ReadCount(o, "max_concurrent", &config->max_concurrent, 1, 4096));
  return ReadCount(o, "max_queue", &config->max_queue, 0, 1 << 20);
}

absl::Status ParseCeilings(const json::value& v, DaemonConfig* config) {
  CUBICLE_ASSIGN_OR_RETURN(
      Object o, Object::Open(v, "ceilings", {"memory", "pids", "cpus", "timeout_ms", "output_bytes"}));
  cgroups::Limits& c = config->ceiling;
  CUBICLE_RETURN_IF_ERROR(o.Read("memory", &c.memory_max, AsPositiveSize));
  CUBICLE_RETURN_IF_ERROR(o.Read("pids", &c.pids_max, CountIn(1, cgroups::kMaxPids)));
  CUBICLE_RETURN_IF_ERROR(o.Read("cpus", &c.cpus, AsPositiveNumber));
  CUBICLE_RETURN_IF_ERROR(o.Read("timeout_ms", &config->max_timeout, AsMillis));
  CUBICLE_RETURN_IF_ERROR(o.Read("output_bytes", &config->max_output_bytes, AsPositiveSize));
  // A ceiling is a bound, not an allocation: more CPUs than this host has
  // is allowed (profiles filled from it get at most the host's).
  absl::Status valid = cgroups::ValidateLimits(c, nullptr, UINT_MAX);
  if (!valid.ok()) return Error("ceilings", valid.message());
  return absl::OkStatus();
}


absl::StatusOr<rlim_t> AsRlimValue(const json::value& v, absl::string_view path) {
  if (v.is_string() && AsView(v.get_string()) == "unlimited") return RLIM_INFINITY;
  if (v.is_string()) return Expected(v, path, "a whole number or \"unlimited\"");
  CUBICLE_ASSIGN_OR_RETURN(uint64_t n, AsCount(v, path, 0, RLIM_INFINITY - 1));
  return static_cast<rlim_t>(n);
}

// {"nofile": 1024, "core": 0, "stack": {"soft": 8388608, "hard": "unlimited"}}:
// each replaces the default's entry for that resource, or is added.
absl::Status ParseRlimits(const json::value& v, absl::string_view path, runtime::SandboxSpec* spec) {
  if (!v.is_object()) return Expected(v, path, "an object");
  for (const json::key_value_pair& kv : v.get_object()) {
    std::string at = Member(path, AsView(kv.key()));
    std::optional<int> known = RlimitByName(AsView(kv.key()));
    if (!known.has_value()) {
      return Error(at, "unknown resource (expected one of: as, core, cpu, data, fsize, locks, memlock, msgqueue, "
                       "nice, nofile, nproc, rss, rtprio, rttime, sigpending, stack)");
    }
    runtime::RlimitSpec limit{.resource = *known};
    if (kv.value().is_object()) {
      CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(kv.value(), at, {"soft", "hard"}));
      if (o.Find("soft") == nullptr || o.Find("hard") == nullptr) return Error(at, "needs both soft and hard");
      CUBICLE_RETURN_IF_ERROR(o.Read("soft", &limit.soft, AsRlimValue));
      CUBICLE_RETURN_IF_ERROR(o.Read("hard", &limit.hard, AsRlimValue));
      if (limit.soft > limit.hard) return Error(at, "the soft limit exceeds the hard limit");
    } else {
      CUBICLE_ASSIGN_OR_RETURN(limit.soft, AsRlimValue(kv.value(), at));
      limit.hard = limit.soft;
    }
    auto same = std::find_if(spec->rlimits.begin(), spec->rlimits.end(),
                             [&](const runtime::RlimitSpec& r) { return r.resource == limit.resource; });
    if (same != spec->rlimits.end()) {
      *same = limit;
    } else {
      spec->rlimits.push_back(limit);
    }
  }
  return absl::OkStatus();
}

absl::Status ParseBind(const json::value& v, const std::string& path, rootfs::MountPlan* plan) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, path, {"source", "dest", "readonly", "optional"}));
  rootfs::MountOp op;
  op.kind = rootfs::MountKind::kBind;
  op.readonly = true;
  if (o.Find("source") == nullptr) return Error(path, "a bind needs a source");
  CUBICLE_RETURN_IF_ERROR(o.Read("source", &op.source, AsString));
  if (op.source.empty() || op.source.front() != '/') {
    return Error(o.PathOf("source"), absl::StrCat("'", op.source, "' must be an absolute host path"));
  }
  std::string dest = op.source;  // like bwrap's --ro-bind SRC SRC, the usual case
  CUBICLE_RETURN_IF_ERROR(o.Read("dest", &dest, AsString));
  CUBICLE_ASSIGN_OR_RETURN(op.dest, rootfs::NormalizeSandboxPath(dest, o.PathOf("dest")));
  if (op.dest == "/") return Error(o.PathOf("dest"), "'/' is the sandbox root, which cannot be replaced");
  CUBICLE_RETURN_IF_ERROR(o.Read("readonly", &op.readonly, AsBool));
  CUBICLE_RETURN_IF_ERROR(o.Read("optional", &op.optional, AsBool));
  struct stat st;
  if (!op.optional && ::stat(op.source.c_str(), &st) != 0) {
    // A config error, whatever the errno: InvalidArgument like every other.
    return absl::InvalidArgumentError(
        ErrnoStatus(errno, absl::StrCat(o.PathOf("source"), ": ", op.source)).message());
  }
  plan->push_back(std::move(op));
  return absl::OkStatus();
}

absl::Status ParseTmpfs(const json::value& v, const std::string& path, rootfs::MountPlan* plan) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, path, {"dest", "size", "mode"}));
  rootfs::MountOp op;
  op.kind = rootfs::MountKind::kTmpfs;
  op.size_bytes = runtime::kDefaultTmpSize;
  op.mode = 01777;  // like /tmp: the sandbox user must be able to write it
  if (o.Find("dest") == nullptr) return Error(path, "a tmpfs needs a dest");
  std::string dest;
  CUBICLE_RETURN_IF_ERROR(o.Read("dest", &dest, AsString));
  CUBICLE_ASSIGN_OR_RETURN(op.dest, rootfs::NormalizeSandboxPath(dest, o.PathOf("dest")));
  if (op.dest == "/") return Error(o.PathOf("dest"), "'/' is the sandbox root, which cannot be replaced");
  CUBICLE_RETURN_IF_ERROR(o.Read("size", &op.size_bytes, AsPositiveSize));
  CUBICLE_RETURN_IF_ERROR(o.Read("mode", &op.mode,
                                 [](const json::value& m, absl::string_view p) { return AsMode(m, p, 07777); }));
  plan->push_back(std::move(op));
  return absl::OkStatus();
}

// {"NAME": "value"}: replaces the default's NAME, or is added, in order.
absl::Status ParseEnv(const json::value& v, absl::string_view path, std::vector<std::string>* env) {
  if (!v.is_object()) return Expected(v, path, "an object of NAME: value strings");
  for (const json::key_value_pair& kv : v.get_object()) {
    absl::string_view name = AsView(kv.key());
    std::string at = Member(path, name);
    if (name.empty() || name.find_first_of(absl::string_view("=\0", 2)) != absl::string_view::npos) {
      return Error(at, "an environment name is not empty and has no '=' or NUL");
    }
    CUBICLE_ASSIGN_OR_RETURN(std::string value, AsString(kv.value(), at));
    std::string entry = absl::StrCat(name, "=", value);
    auto same = std::find_if(env->begin(), env->end(), [&](const std::string& e) {
      return absl::StartsWith(e, name) && e.size() > name.size() && e[name.size()] == '=';
    });
    if (same != env->end()) {
      *same = std::move(entry);
    } else {
      env->push_back(std::move(entry));
    }
  }
  return absl::OkStatus();
}

// Checks each profile limit against its ceiling under the config's own names;
// cgroups::ValidateLimits then checks the rest (floors, host CPUs, high <= max).
absl::Status CheckAgainstCeiling(const Object& o, const cgroups::Limits& l, const cgroups::Limits& c) {
  auto bytes = [&](absl::string_view key, const std::optional<uint64_t>& v) -> absl::Status {
    if (v && c.memory_max && *v > *c.memory_max) {
      return Error(o.PathOf(key), absl::StrCat(cgroups::DescribeBytes(*v), " exceeds the ceiling ",
                                               cgroups::DescribeBytes(*c.memory_max), " (ceilings.memory)"));
    }
    return absl::OkStatus();
  };
  CUBICLE_RETURN_IF_ERROR(bytes("memory", l.memory_max));
  CUBICLE_RETURN_IF_ERROR(bytes("memory_high", l.memory_high));
  if (l.pids_max && c.pids_max && *l.pids_max > *c.pids_max) {
    return Error(o.PathOf("pids"),
                 absl::StrCat(*l.pids_max, " exceeds the ceiling ", *c.pids_max, " (ceilings.pids)"));
  }
  if (l.cpus && c.cpus && *l.cpus > *c.cpus) {
    return Error(o.PathOf("cpus"), absl::StrCat(*l.cpus, " exceeds the ceiling ", *c.cpus, " (ceilings.cpus)"));
  }
  return absl::OkStatus();
}

absl::Status ParseLimits(const json::value& v, absl::string_view path, const cgroups::Limits& ceiling,
                         cgroups::Limits* limits) {
  CUBICLE_ASSIGN_OR_RETURN(
      Object o, Object::Open(v, std::string(path), {"memory", "memory_high", "pids", "cpus", "cpu_weight"}));
  CUBICLE_RETURN_IF_ERROR(o.Read("memory", &limits->memory_max, AsPositiveSize));
  CUBICLE_RETURN_IF_ERROR(o.Read("memory_high", &limits->memory_high, AsPositiveSize));
  CUBICLE_RETURN_IF_ERROR(o.Read("pids", &limits->pids_max, CountIn(1, cgroups::kMaxPids)));
  CUBICLE_RETURN_IF_ERROR(o.Read("cpus", &limits->cpus, AsPositiveNumber));
  std::optional<uint64_t> weight;
  CUBICLE_RETURN_IF_ERROR(o.Read("cpu_weight", &weight, CountIn(cgroups::kMinCpuWeight, cgroups::kMaxCpuWeight)));
  if (weight) limits->cpu_weight = static_cast<uint32_t>(*weight);
  return CheckAgainstCeiling(o, *limits, ceiling);
}

absl::Status ParseBreakers(const json::value& v, absl::string_view path, runtime::BreakerSpec* b) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, std::string(path),
                                                  {"cpu", "cpu_window_ms", "cpu_grace_ms", "memory",
                                                   "memory_grace_ms", "io", "io_window_ms"}));
  CUBICLE_RETURN_IF_ERROR(o.Read("cpu", &b->cpu_share, AsPositiveNumber));
  CUBICLE_RETURN_IF_ERROR(o.Read("cpu_window_ms", &b->cpu_window, AsMillis));
  CUBICLE_RETURN_IF_ERROR(o.Read("cpu_grace_ms", &b->cpu_grace, AsMillis));
  CUBICLE_RETURN_IF_ERROR(o.Read("memory", &b->memory_mark, AsPositiveSize));
  CUBICLE_RETURN_IF_ERROR(o.Read("memory_grace_ms", &b->memory_grace, AsMillis));
  CUBICLE_RETURN_IF_ERROR(o.Read("io", &b->io_bytes_per_sec, AsPositiveSize));
  return o.Read("io_window_ms", &b->io_window, AsMillis);
}

absl::Status ParsePool(const json::value& v, absl::string_view path, runtime::PoolConfig* pool) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, std::string(path),
                                                  {"min_idle", "max_idle", "max_total", "refill_parallelism",
                                                   "max_age_s"}));
  CUBICLE_RETURN_IF_ERROR(ReadCount(o, "min_idle", &pool->min_idle, 0, 1 << 16));
  CUBICLE_RETURN_IF_ERROR(ReadCount(o, "max_idle", &pool->max_idle, 0, 1 << 16));
  CUBICLE_RETURN_IF_ERROR(ReadCount(o, "max_total", &pool->max_total, 1, 1 << 16));
  CUBICLE_RETURN_IF_ERROR(ReadCount(o, "refill_parallelism", &pool->refill_parallelism, 1, 64));
  std::optional<double> age;
  CUBICLE_RETURN_IF_ERROR(o.Read("max_age_s", &age, AsPositiveNumber));
  if (age) pool->max_age = absl::Seconds(*age);
  absl::Status valid = runtime::ValidatePoolConfig(*pool);
  if (!valid.ok()) {
    absl::string_view message = valid.message();
    absl::ConsumePrefix(&message, "pool ");  // the path already says so
    return Error(path, message);
  }
  return absl::OkStatus();
}

absl::Status ParseInterpreter(const json::value& v, absl::string_view path, Interpreter* interpreter) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, std::string(path), {"argv", "preload"}));
  if (o.Find("argv") == nullptr) return Error(path, "an interpreter needs an argv");
  CUBICLE_RETURN_IF_ERROR(o.Read("argv", &interpreter->argv, AsStringArray));
  if (interpreter->argv.empty() || interpreter->argv[0].empty()) {
    return Error(o.PathOf("argv"), "must name the interpreter first, e.g. [\"python3\", \"-I\"]");
  }
  CUBICLE_RETURN_IF_ERROR(o.Read("preload", &interpreter->preload, AsStringArray));
  for (size_t i = 0; i < interpreter->preload.size(); ++i) {
    // The bootstrap imports these by name: a module path, never code.
    if (!runtime::IsPythonModuleName(interpreter->preload[i])) {
      return Error(Element(o.PathOf("preload"), i),
                   absl::StrCat("'", interpreter->preload[i], "' is not a module name like json or os.path"));
    }
  }
  absl::Status valid = runtime::ValidateWarmInterpreter(*interpreter);
  if (!valid.ok()) return Error(o.PathOf("argv"), valid.message());
  return absl::OkStatus();
}

bool IsProfileName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
}

absl::StatusOr<Profile> ParseProfile(const std::string& name, const json::value& v, const DaemonConfig& config) {
  std::string path = Member("profiles", name);
  CUBICLE_ASSIGN_OR_RETURN(
      Object o, Object::Open(v, path,
                             {"hostname", "uid", "gid", "seccomp", "tmp_size", "binds", "tmpfs", "env", "rlimits",
                              "limits", "breakers", "timeout_ms", "max_timeout_ms", "output_bytes", "pool",
                              "interpreter", "npu", "gpu", "network"}));
  runtime::DefaultsOptions defaults;
  CUBICLE_RETURN_IF_ERROR(o.Read("hostname", &defaults.hostname, AsString));
  CUBICLE_RETURN_IF_ERROR(ReadCount(o, "uid", &defaults.uid, 0, kMaxId));
  CUBICLE_RETURN_IF_ERROR(ReadCount(o, "gid", &defaults.gid, 0, kMaxId));
  CUBICLE_RETURN_IF_ERROR(o.Read("tmp_size", &defaults.tmp_size, AsPositiveSize));

  Profile profile;
  profile.name = name;
  absl::StatusOr<runtime::SandboxSpec> spec = runtime::DefaultSpec(defaults);
  if (!spec.ok()) return Error(path, spec.status().message());
  profile.spec = *std::move(spec);

  if (const json::value* s = o.Find("seccomp")) {
    CUBICLE_ASSIGN_OR_RETURN(std::string policy, AsString(*s, o.PathOf("seccomp")));
    absl::StatusOr<seccomp::Policy> parsed = seccomp::ParsePolicy(policy);
    if (!parsed.ok()) {
      return Error(o.PathOf("seccomp"),
                   absl::StrCat("'", policy, "' is not a seccomp policy (expected none, default or no-network)"));
    }
    profile.spec.seccomp = *parsed;
  }
  if (const json::value* network = o.Find("network")) {
    CUBICLE_ASSIGN_OR_RETURN(profile.spec.egress, egress::PolicyFromJson(*network, o.PathOf("network"), {}));
    // The bridge needs AF_INET inside: unless the profile names a seccomp
    // policy, an allowlist gets "default" (ValidateSpec refuses no-network).
    if (profile.spec.egress.mode == egress::NetMode::kAllowlist && o.Find("seccomp") == nullptr) {
      profile.spec.seccomp = seccomp::Policy::kDefault;
    }
  }
  if (const json::value* binds = o.Find("binds")) {
    CUBICLE_RETURN_IF_ERROR(ForEachElement(*binds, o.PathOf("binds"), [&](const json::value& b, std::string at) {
      return ParseBind(b, at, &profile.spec.mounts);
    }));
  }
  if (const json::value* tmpfs = o.Find("tmpfs")) {
    CUBICLE_RETURN_IF_ERROR(ForEachElement(*tmpfs, o.PathOf("tmpfs"), [&](const json::value& t, std::string at) {
      return ParseTmpfs(t, at, &profile.spec.mounts);
    }));
  }
  if (const json::value* env = o.Find("env")) {
    CUBICLE_RETURN_IF_ERROR(ParseEnv(*env, o.PathOf("env"), &profile.spec.env));
  }
  if (const json::value* rlimits = o.Find("rlimits")) {
    CUBICLE_RETURN_IF_ERROR(ParseRlimits(*rlimits, o.PathOf("rlimits"), &profile.spec));
  }
  if (const json::value* limits = o.Find("limits")) {
    CUBICLE_RETURN_IF_ERROR(ParseLimits(*limits, o.PathOf("limits"), config.ceiling, &profile.spec.limits));
  }
  // What the profile leaves unset, the ceiling sets: a ceiling is the most
  // any sandbox gets, so a sandbox never runs without it. CPUs are held to
  // this host's, which a ceiling (a bound, not an allocation) may exceed.
  cgroups::Limits fill = config.ceiling;
  if (fill.cpus && *fill.cpus > HostCpus()) fill.cpus = static_cast<double>(HostCpus());
  cgroups::FillFromCeiling(&profile.spec.limits, fill);
  absl::Status limits_ok = cgroups::ValidateLimits(profile.spec.limits, &config.ceiling);
  if (!limits_ok.ok()) return Error(o.PathOf("limits"), limits_ok.message());

  if (const json::value* breakers = o.Find("breakers")) {
    CUBICLE_RETURN_IF_ERROR(ParseBreakers(*breakers, o.PathOf("breakers"), &profile.spec.breakers));
    const runtime::BreakerSpec& b = profile.spec.breakers;
    const std::optional<uint64_t>& memory = profile.spec.limits.memory_max;
    if (b.memory_mark && memory && *b.memory_mark >= *memory) {
      return Error(Member(o.PathOf("breakers"), "memory"),
                   absl::StrCat(cgroups::DescribeBytes(*b.memory_mark), " must be below the memory limit ",
                                cgroups::DescribeBytes(*memory)));
    }
  }

  profile.max_timeout = config.max_timeout;
  CUBICLE_RETURN_IF_ERROR(o.Read("max_timeout_ms", &profile.max_timeout, AsMillis));
  if (profile.max_timeout > config.max_timeout) {
    return Error(o.PathOf("max_timeout_ms"),
                 absl::StrCat(absl::ToInt64Milliseconds(profile.max_timeout), " exceeds the ceiling ",
                              absl::ToInt64Milliseconds(config.max_timeout), " (ceilings.timeout_ms)"));
  }
  profile.default_timeout = std::min(absl::Seconds(30), profile.max_timeout);
  CUBICLE_RETURN_IF_ERROR(o.Read("timeout_ms", &profile.default_timeout, AsMillis));
  if (profile.default_timeout > profile.max_timeout) {
    return Error(o.PathOf("timeout_ms"), absl::StrCat(absl::ToInt64Milliseconds(profile.default_timeout),
                                                      " exceeds max_timeout_ms ",
                                                      absl::ToInt64Milliseconds(profile.max_timeout)));
  }
  profile.spec.timeout = profile.default_timeout;

  profile.output_bytes = std::min<uint64_t>(1 << 20, config.max_output_bytes);
  CUBICLE_RETURN_IF_ERROR(o.Read("output_bytes", &profile.output_bytes, AsPositiveSize));
  if (profile.output_bytes > config.max_output_bytes) {
    return Error(o.PathOf("output_bytes"),
                 absl::StrCat(cgroups::DescribeBytes(profile.output_bytes), " exceeds the ceiling ",
                              cgroups::DescribeBytes(config.max_output_bytes), " (ceilings.output_bytes)"));
  }

  if (const json::value* pool = o.Find("pool")) {
    CUBICLE_RETURN_IF_ERROR(ParsePool(*pool, o.PathOf("pool"), &profile.pool));
  }
  if (const json::value* interpreter = o.Find("interpreter")) {
    profile.interpreter.emplace();
    CUBICLE_RETURN_IF_ERROR(ParseInterpreter(*interpreter, o.PathOf("interpreter"), &*profile.interpreter));
    profile.pool.zygote.interpreter = profile.interpreter;
  }

  for (auto [key, ids] : {std::pair{"npu", &profile.npus}, {"gpu", &profile.gpus}}) {
    const json::value* chips = o.Find(key);
    if (chips == nullptr) continue;
    CUBICLE_ASSIGN_OR_RETURN(std::string text, AsString(*chips, o.PathOf(key)));
    absl::StatusOr<std::vector<int>> parsed = npu::ParseChipList(text, o.PathOf(key));
    if (!parsed.ok()) return Error(o.PathOf(key), parsed.status().message());
    *ids = *std::move(parsed);
  }
  if (!profile.npus.empty() || !profile.gpus.empty()) {
    // Its executions run cold, after their probe: keep no zygotes warm.
    profile.pool.min_idle = 0;
    profile.pool.max_idle = 0;
  }

  // Everything together, as a launch would see it; argv comes per request.
  runtime::SandboxSpec check = profile.spec;
  check.argv = {"/bin/true"};
  absl::Status valid = runtime::ValidateSpec(check);
  if (!valid.ok()) return Error(path, valid.message());
  return profile;
}

absl::Status ParseBrokerJob(const std::string& id, const json::value& v, const std::string& path, npu::BrokerJob* job) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, path, {"argv", "env", "timeout_ms", "output_bytes"}));
  job->id = id;
  const json::value* argv = o.Find("argv");
  if (argv == nullptr) return Error(path, "argv is required");
  CUBICLE_RETURN_IF_ERROR(ForEachElement(*argv, o.PathOf("argv"), [&](const json::value& a, std::string at) {
    CUBICLE_ASSIGN_OR_RETURN(std::string s, AsString(a, at));
    job->argv.push_back(std::move(s));
    return absl::OkStatus();
  }));
  if (const json::value* env = o.Find("env")) CUBICLE_RETURN_IF_ERROR(ParseEnv(*env, o.PathOf("env"), &job->env));
  CUBICLE_RETURN_IF_ERROR(o.Read("timeout_ms", &job->timeout, AsMillis));
  CUBICLE_RETURN_IF_ERROR(o.Read("output_bytes", &job->output_budget, AsPositiveSize));
  return absl::OkStatus();
}

// "npu": {"root": "/", "cache_window_ms": 30000,
//         "broker": {"enabled": false, "jobs": {"ID": {"argv": [...], ...}}}}
absl::Status ParseNpu(const json::value& v, NpuConfig* npu_config) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, "npu", {"root", "cache_window_ms", "broker"}));
  CUBICLE_RETURN_IF_ERROR(o.Read("root", &npu_config->root, AsString));
  if (absl::StatusOr<npu::HostLayout> host = npu::HostLayout::Open(npu_config->root); !host.ok()) {
    return Error(o.PathOf("root"), host.status().message());
  }
  CUBICLE_RETURN_IF_ERROR(o.Read("cache_window_ms", &npu_config->cache_window, AsMillis));
  if (const json::value* broker = o.Find("broker")) {
    CUBICLE_ASSIGN_OR_RETURN(Object b, Object::Open(*broker, o.PathOf("broker"), {"enabled", "jobs"}));
    CUBICLE_RETURN_IF_ERROR(b.Read("enabled", &npu_config->broker.enabled, AsBool));
    if (const json::value* jobs = b.Find("jobs")) {
      if (!jobs->is_object()) return Expected(*jobs, b.PathOf("jobs"), "an object of ID: job");
      for (const json::key_value_pair& kv : jobs->get_object()) {
        npu::BrokerJob job;
        std::string id(AsView(kv.key()));
        CUBICLE_RETURN_IF_ERROR(ParseBrokerJob(id, kv.value(), Member(b.PathOf("jobs"), id), &job));
        npu_config->broker.jobs.push_back(std::move(job));
      }
    }
    absl::Status valid = npu::ValidateBrokerConfig(npu_config->broker);
    if (!valid.ok()) return Error(o.PathOf("broker"), valid.message());
  }
  return absl::OkStatus();
}

absl::Status ParseProfiles(const json::value& v, DaemonConfig* config) {
  if (!v.is_object()) return Expected(v, "profiles", "an object of NAME: profile");
  if (v.get_object().empty()) return Error("profiles", "at least one profile is needed");
  for (const json::key_value_pair& kv : v.get_object()) {
    std::string name(AsView(kv.key()));
    if (!IsProfileName(name)) {
      return Error(Member("profiles", name), "a profile name is 1 to 64 letters, digits, '-' or '_'");
    }
    CUBICLE_ASSIGN_OR_RETURN(Profile profile, ParseProfile(name, kv.value(), *config));
    config->profiles.emplace(name, std::move(profile));
  }
  return absl::OkStatus();
}

// The built-in configuration (docs/config.md describes each key). Plain
// JSON, without comments, so that any tool can read what `DefaultConfigJson`
// hands out.
constexpr char kDefaultConfig[] = R"json({
  "socket": {"mode": "0600"},
  "concurrency": {"max_concurrent": 8, "max_queue": 64},
  "ceilings": {"memory": "2G", "pids": 4096, "timeout_ms": 600000, "output_bytes": "16M"},
  "profiles": {
    "shell": {
      "seccomp": "no-network",
      "limits": {"memory": "256M", "pids": 64},
      "timeout_ms": 30000,
      "max_timeout_ms": 300000,
      "output_bytes": "1M",
      "pool": {"min_idle": 2, "max_idle": 4, "max_total": 16}
    },
    "python": {
      "seccomp": "no-network",
      "limits": {"memory": "512M", "pids": 128},
      "timeout_ms": 30000,
      "max_timeout_ms": 300000,
      "output_bytes": "1M",
      "pool": {"min_idle": 2, "max_idle": 4, "max_total": 16},
      "interpreter": {"argv": ["python3", "-I"], "preload": ["json"]}
    }
  }
}
)json";

}  // namespace

absl::StatusOr<DaemonConfig> ParseConfig(absl::string_view json_text) {
  // Boost.JSON throws on allocation failure and on a few misuses; none may
  // cross this API.
  try {
    CUBICLE_ASSIGN_OR_RETURN(json::value root, ParseJson(json_text));
    CUBICLE_ASSIGN_OR_RETURN(Object top, Object::Open(root, "", {"socket", "concurrency", "ceilings", "profiles",
                                                                 "workspace_roots", "npu"}));
    DaemonConfig config;
    if (const json::value* v = top.Find("socket")) CUBICLE_RETURN_IF_ERROR(ParseSocket(*v, &config));
    if (const json::value* v = top.Find("concurrency")) CUBICLE_RETURN_IF_ERROR(ParseConcurrency(*v, &config));
    if (const json::value* v = top.Find("ceilings")) CUBICLE_RETURN_IF_ERROR(ParseCeilings(*v, &config));
    CUBICLE_RETURN_IF_ERROR(top.Read("workspace_roots", &config.workspace_roots, AsStringArray));
    for (size_t i = 0; i < config.workspace_roots.size(); ++i) {
      std::string& root_dir = config.workspace_roots[i];
      char real[PATH_MAX];
      if (root_dir.empty() || root_dir[0] != '/' || ::realpath(root_dir.c_str(), real) == nullptr) {
        return Error(Element("workspace_roots", i), absl::StrCat("'", root_dir, "' is not an existing absolute directory"));
      }
      root_dir = real;
    }
    if (const json::value* v = top.Find("npu")) CUBICLE_RETURN_IF_ERROR(ParseNpu(*v, &config.npu));
    const json::value* profiles = top.Find("profiles");
    if (profiles == nullptr) return Error("profiles", "missing: at least one profile is needed");
    CUBICLE_RETURN_IF_ERROR(ParseProfiles(*profiles, &config));
    return config;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("reading the configuration: ", e.what()));
  }
}

absl::StatusOr<DaemonConfig> LoadConfig(const std::string& path) {
  std::string step = absl::StrCat("config ", path);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, step);
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return ErrnoStatus(err, step);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxConfigBytes) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(step, ": larger than ", kMaxConfigBytes, " bytes"));
    }
  }
  ::close(fd);
  absl::StatusOr<DaemonConfig> config = ParseConfig(text);
  if (!config.ok()) {
    return absl::Status(config.status().code(), absl::StrCat(step, ": ", config.status().message()));
  }
  return config;
}

const char* DefaultConfigJson() { return kDefaultConfig; }

DaemonConfig DefaultConfig() {
  absl::StatusOr<DaemonConfig> config = ParseConfig(kDefaultConfig);
  if (!config.ok()) {
    // Only a host without /usr can get here; the unit tests parse it on every build.
    std::fprintf(stderr, "cubicle: the built-in configuration does not hold on this host: %s\n",
                 std::string(config.status().message()).c_str());
    std::abort();
  }
  return *std::move(config);
}

absl::StatusOr<cgroups::Limits> ParseRequestLimits(const json::value& v, absl::string_view path) {
  try {
    cgroups::Limits limits;
    CUBICLE_RETURN_IF_ERROR(ParseLimits(v, path, cgroups::Limits{}, &limits));
    return limits;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(path, ": ", e.what()));
  }
}

absl::StatusOr<cgroups::Limits> TightenLimits(const cgroups::Limits& profile, const cgroups::Limits& requested) {
  std::vector<std::string> problems;
  cgroups::Limits out = profile;
  auto tighten = [&](absl::string_view field, const auto& have, const auto& want, auto* result, auto describe) {
    if (!want.has_value()) return;
    if (have.has_value() && *want > *have) {
      problems.push_back(absl::StrCat(field, ": ", describe(*want), " exceeds the profile's ", describe(*have)));
      return;
    }
    *result = want;  // at most the profile's, or the profile sets none
  };
  auto bytes = [](uint64_t b) { return cgroups::DescribeBytes(b); };
  auto plain = [](auto n) { return absl::StrCat(n); };
  tighten("memory", profile.memory_max, requested.memory_max, &out.memory_max, bytes);
  tighten("memory_high", profile.memory_high, requested.memory_high, &out.memory_high, bytes);
  tighten("pids", profile.pids_max, requested.pids_max, &out.pids_max, plain);
  tighten("cpus", profile.cpus, requested.cpus, &out.cpus, plain);
  tighten("cpu_weight", profile.cpu_weight, requested.cpu_weight, &out.cpu_weight, plain);
  for (const cgroups::IoLimit& want : requested.io) {
    auto have = std::find_if(out.io.begin(), out.io.end(), [&](const cgroups::IoLimit& io) {
      return io.major == want.major && io.minor == want.minor;
    });
    if (have == out.io.end()) {
      out.io.push_back(want);
      continue;
    }
    std::string device = absl::StrCat("io ", want.major, ":", want.minor, " ");
    cgroups::IoLimit cap = *have;  // the profile's, before this device is tightened
    tighten(device + "rbps", cap.read_bps, want.read_bps, &have->read_bps, plain);
    tighten(device + "wbps", cap.write_bps, want.write_bps, &have->write_bps, plain);
    tighten(device + "riops", cap.read_iops, want.read_iops, &have->read_iops, plain);
    tighten(device + "wiops", cap.write_iops, want.write_iops, &have->write_iops, plain);
  }
  if (!problems.empty()) return absl::InvalidArgumentError(absl::StrJoin(problems, "; "));
  // A lower memory_max makes the profile's high mark meaningless above it.
  if (out.memory_high && out.memory_max && *out.memory_high > *out.memory_max) out.memory_high = out.memory_max;
  CUBICLE_RETURN_IF_ERROR(cgroups::ValidateLimits(out, nullptr));
  return out;
}

}  // namespace cubicle::rpc
