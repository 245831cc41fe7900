#include "skills/manifest.h"

#include <algorithm>
#include <map>
#include <set>

#include <boost/json/object.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/json_reader.h"
#include "base/status.h"
#include "egress/policy_json.h"

namespace cubicle::skills {
namespace json = boost::json;

namespace {

using json_read::Error;
using json_read::Object;

constexpr size_t kMaxNameBytes = 64;
constexpr size_t kMaxDescriptionBytes = 4096;
constexpr size_t kMaxRequirements = 256;
constexpr size_t kMaxCalls = 64;
constexpr uint64_t kMaxPids = 4194304;  // the kernel's PID_MAX_LIMIT
constexpr uint64_t kMaxCpuWeight = 10000;

absl::Status Required(const Object& o, absl::string_view key, absl::string_view what) {
  if (o.Find(key) != nullptr) return absl::OkStatus();
  return Error(o.PathOf(key), absl::StrCat("missing: ", what, " is required"));
}

absl::Status ReadName(const Object& o, Manifest* m) {
  CUBICLE_RETURN_IF_ERROR(Required(o, "name", "the skill's name (e.g. word-stats)"));
  CUBICLE_RETURN_IF_ERROR(o.Read("name", &m->name, json_read::String));
  if (!IsSkillName(m->name)) {
    return Error(o.PathOf("name"), absl::StrCat("'", m->name.substr(0, json_read::kMaxEcho),
                                                "' is not a skill name (1 to 64 of a-z, 0-9, '.', '_', '-', "
                                                "beginning with a letter or digit)"));
  }
  return absl::OkStatus();
}

absl::Status ReadVersion(const Object& o, Manifest* m) {
  CUBICLE_RETURN_IF_ERROR(Required(o, "version", "a semantic version (e.g. 1.2.0)"));
  const json::value& v = *o.Find("version");
  if (!v.is_string()) {
    // 1.2 in YAML is a number: say what to write instead.
    return json_read::WrongType(v, o.PathOf("version"), "a string like \"1.2.0\" (quote it in YAML)");
  }
  CUBICLE_ASSIGN_OR_RETURN(std::string text, json_read::String(v, o.PathOf("version")));
  absl::StatusOr<Version> version = ParseVersion(text);
  if (!version.ok()) return Error(o.PathOf("version"), version.status().message());
  m->version = *std::move(version);
  return absl::OkStatus();
}

absl::Status ReadEntry(const Object& o, Manifest* m) {
  CUBICLE_RETURN_IF_ERROR(Required(o, "entry", "the script's file, relative to the skill's folder (e.g. main.py)"));
  CUBICLE_RETURN_IF_ERROR(o.Read("entry", &m->entry, json_read::String));
  // Its form is checked where it is opened (skills/skill.h): beneath the
  // folder, never through a symlink.
  if (m->entry.empty()) return Error(o.PathOf("entry"), "is empty");
  return absl::OkStatus();
}

// "interpreter", else by the entry's extension; "profile", else the
// built-in profile of that interpreter.
absl::Status ReadInterpreter(const Object& o, Manifest* m) {
  if (const json::value* v = o.Find("interpreter")) {
    CUBICLE_ASSIGN_OR_RETURN(std::string name, json_read::String(*v, o.PathOf("interpreter")));
    if (name == "python") {
      m->interpreter = Interpreter::kPython;
    } else if (name == "shell") {
      m->interpreter = Interpreter::kShell;
    } else if (name == "r") {
      m->interpreter = Interpreter::kR;
    } else {
      return Error(o.PathOf("interpreter"), absl::StrCat("'", name.substr(0, json_read::kMaxEcho),
                                                         "' is not an interpreter (expected \"python\", \"shell\" "
                                                         "or \"r\")"));
    }
  } else if (absl::EndsWith(m->entry, ".py")) {
    m->interpreter = Interpreter::kPython;
  } else if (absl::EndsWith(m->entry, ".sh")) {
    m->interpreter = Interpreter::kShell;
  } else if (absl::EndsWith(m->entry, ".R") || absl::EndsWith(m->entry, ".r")) {
    m->interpreter = Interpreter::kR;
  } else {
    return Error(o.PathOf("interpreter"),
                 absl::StrCat("missing: the entry '", m->entry.substr(0, json_read::kMaxEcho),
                              "' ends in none of .py, .sh and .R, so the interpreter must be named (\"python\", "
                              "\"shell\" or \"r\")"));
  }
  m->profile = std::string(InterpreterName(m->interpreter));
  CUBICLE_RETURN_IF_ERROR(o.Read("profile", &m->profile, json_read::String));
  if (m->profile.empty()) return Error(o.PathOf("profile"), "is empty");
  return absl::OkStatus();
}

absl::Status ReadRequires(const json::value& v, const std::string& path, Manifest* m) {
  std::map<std::string, size_t> seen;  // name -> index
  if (v.is_array() && v.get_array().size() > kMaxRequirements) {
    return Error(path, absl::StrCat("more than ", kMaxRequirements, " requirements"));
  }
  // An R skill's requirements are R packages (docs/skills.md, "R"); the
  // interpreter is read before them.
  const PackageKind kind = m->interpreter == Interpreter::kR ? PackageKind::kR : PackageKind::kPython;
  size_t index = 0;
  return json_read::ForEachElement(v, path, [&](const json::value& item, const std::string& at) -> absl::Status {
    CUBICLE_ASSIGN_OR_RETURN(std::string text, json_read::String(item, at));
    absl::StatusOr<Requirement> r = ParseRequirement(text, kind);
    if (!r.ok()) return Error(at, r.status().message());
    auto [it, fresh] = seen.emplace(r->name, index++);
    if (!fresh) {
      return Error(at, absl::StrCat("'", r->name, "' is required already by ", json_read::Element(path, it->second),
                                    " (join constraints with ',': 'numpy>=1.10,<2')"));
    }
    m->requirements.push_back(*std::move(r));
    return absl::OkStatus();
  });
}

// "auto", or an object whose memory may be "auto": sized by the daemon.
absl::Status ReadLimits(const json::value& v, const std::string& path, SkillLimits* limits) {
  constexpr char kAuto[] = "auto";
  if (v.is_string()) {
    if (v.as_string() != kAuto) {
      return Error(path, absl::StrCat("'", std::string(v.as_string()).substr(0, json_read::kMaxEcho),
                                      "' is not limits (expected \"auto\" or an object)"));
    }
    limits->memory_auto = true;
    limits->all_auto = true;
    return absl::OkStatus();
  }
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, path, {"memory", "memory_high", "pids", "cpus", "cpu_weight"}));
  if (const json::value* memory = o.Find("memory"); memory != nullptr && memory->is_string() &&
                                                    memory->as_string() == kAuto) {
    limits->memory_auto = true;
  } else {
    CUBICLE_RETURN_IF_ERROR(o.Read("memory", &limits->memory, json_read::PositiveSize));
  }
  CUBICLE_RETURN_IF_ERROR(o.Read("memory_high", &limits->memory_high, json_read::PositiveSize));
  CUBICLE_RETURN_IF_ERROR(o.ReadCount("pids", &limits->pids, 1, kMaxPids));
  CUBICLE_RETURN_IF_ERROR(o.Read("cpus", &limits->cpus, json_read::PositiveNumber));
  return o.ReadCount("cpu_weight", &limits->cpu_weight, 1, kMaxCpuWeight);
}

// "timeout_ms": whole ms, or "auto" (sized by the daemon); `limits: auto`
// makes it auto when it is not given.
absl::Status ReadTimeout(const Object& o, Manifest* m) {
  const json::value* v = o.Find("timeout_ms");
  if (v != nullptr && v->is_string() && v->as_string() == "auto") {
    m->timeout_auto = true;
    return absl::OkStatus();
  }
  CUBICLE_RETURN_IF_ERROR(o.Read("timeout_ms", &m->timeout, json_read::MillisIn(1, json_read::kYearMs)));
  m->timeout_auto = v == nullptr && m->limits.all_auto;
  return absl::OkStatus();
}

absl::Status ReadCalls(const json::value& v, const std::string& path, Manifest* m) {
  if (v.is_array() && v.get_array().size() > kMaxCalls) {
    return Error(path, absl::StrCat("more than ", kMaxCalls, " skills"));
  }
  std::set<std::string> seen;
  return json_read::ForEachElement(v, path, [&](const json::value& item, const std::string& at) -> absl::Status {
    CUBICLE_ASSIGN_OR_RETURN(std::string text, json_read::String(item, at));
    absl::StatusOr<SkillReference> r = ParseSkillReference(text);
    if (!r.ok()) return Error(at, r.status().message());
    if (!seen.insert(r->name).second) return Error(at, absl::StrCat("'", r->name, "' is listed already"));
    m->calls.push_back(*std::move(r));
    return absl::OkStatus();
  });
}

absl::Status ReadEnv(const json::value& v, const std::string& path, Manifest* m) {
  CUBICLE_ASSIGN_OR_RETURN(m->env, json_read::StringMap(v, path));
  for (const auto& [name, value] : m->env) {
    if (name.empty() || name.find('=') != std::string::npos) {
      return Error(json_read::Member(path, name), "is not a variable name");
    }
  }
  return absl::OkStatus();
}

absl::Status ReadEnvironment(const Object& o, Manifest* m) {
  const json::value* v = o.Find("environment");
  if (v == nullptr) return absl::OkStatus();
  CUBICLE_ASSIGN_OR_RETURN(std::string text, json_read::String(*v, o.PathOf("environment")));
  absl::StatusOr<EnvironmentRef> ref = ParseEnvironmentRef(text);
  if (!ref.ok()) return Error(o.PathOf("environment"), ref.status().message());
  m->environment = *std::move(ref);
  return absl::OkStatus();
}

// "seccomp": "strict" only; the other policies are a profile's to choose.
absl::Status ReadSeccomp(const Object& o, Manifest* m) {
  const json::value* v = o.Find("seccomp");
  if (v == nullptr) return absl::OkStatus();
  CUBICLE_ASSIGN_OR_RETURN(std::string text, json_read::String(*v, o.PathOf("seccomp")));
  if (text != "strict") {
    return Error(o.PathOf("seccomp"), absl::StrCat("'", text,
                                                   "' is not a policy a skill can ask for (only 'strict': "
                                                   "a manifest may tighten its profile's, never loosen it)"));
  }
  m->strict_seccomp = true;
  return absl::OkStatus();
}

}  // namespace

std::string EnvironmentRef::ToString() const {
  return revision.has_value() ? absl::StrCat(name, "@", *revision) : name;
}

absl::StatusOr<EnvironmentRef> ParseEnvironmentRef(absl::string_view text) {
  const size_t at = text.find('@');
  EnvironmentRef ref;
  ref.name = std::string(text.substr(0, at));
  if (!IsSkillName(ref.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text.substr(0, json_read::kMaxEcho),
                     "' is not an environment (a name of 1 to 64 of a-z, 0-9, '.', '_', '-', beginning with a "
                     "letter or digit, optionally followed by '@' and a revision: sci, sci@3)"));
  }
  if (at == absl::string_view::npos) return ref;
  absl::string_view revision = text.substr(at + 1);
  uint64_t n = 0;
  const bool digits = !revision.empty() && revision.size() <= 18 &&
                      std::all_of(revision.begin(), revision.end(), [](char c) { return absl::ascii_isdigit(c); });
  if (!digits || revision[0] == '0' || !absl::SimpleAtoi(revision, &n)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text.substr(0, json_read::kMaxEcho),
                                                   "': the revision after '@' must be a positive whole number, as in ",
                                                   ref.name, "@3"));
  }
  ref.revision = n;
  return ref;
}

absl::string_view InterpreterName(Interpreter interpreter) {
  switch (interpreter) {
    case Interpreter::kShell:
      return "shell";
    case Interpreter::kR:
      return "r";
    case Interpreter::kPython:
      break;
  }
  return "python";
}

bool IsSkillName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  auto lower_or_digit = [](char c) { return absl::ascii_islower(c) || absl::ascii_isdigit(c); };
  if (!lower_or_digit(name[0])) return false;
  for (char c : name) {
    if (!lower_or_digit(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

absl::StatusOr<SkillReference> ParseSkillReference(absl::string_view text) {
  const size_t at = text.find('@');
  absl::string_view name = text.substr(0, at);
  if (!IsSkillName(name)) {
    return absl::InvalidArgumentError(absl::StrCat("'", name.substr(0, 64), "' is not a skill name"));
  }
  absl::string_view selector_text;
  if (at != absl::string_view::npos) {
    selector_text = text.substr(at + 1);
    if (selector_text.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("'", text.substr(0, 80), "': no version after '@'"));
    }
  }
  absl::StatusOr<VersionSelector> selector = VersionSelector::Parse(selector_text);
  if (!selector.ok()) return selector.status();
  return SkillReference{std::string(name), *std::move(selector), std::string(text)};
}

absl::StatusOr<Manifest> ParseManifest(const json::value& document) {
  // Boost.JSON throws on allocation failure; nothing may cross this API.
  try {
    CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(document, "",
                                                    {"name", "version", "description", "entry", "interpreter",
                                                     "profile", "requires", "limits", "env", "network",
                                                     "timeout_ms", "calls", "environment", "seccomp"}));
    Manifest m;
    CUBICLE_RETURN_IF_ERROR(ReadName(o, &m));
    CUBICLE_RETURN_IF_ERROR(ReadVersion(o, &m));
    CUBICLE_RETURN_IF_ERROR(o.Read("description", &m.description, json_read::String));
    if (m.description.size() > kMaxDescriptionBytes) {
      return Error(o.PathOf("description"), absl::StrCat("is longer than ", kMaxDescriptionBytes, " bytes"));
    }
    CUBICLE_RETURN_IF_ERROR(ReadEntry(o, &m));
    CUBICLE_RETURN_IF_ERROR(ReadInterpreter(o, &m));
    if (const json::value* v = o.Find("requires")) CUBICLE_RETURN_IF_ERROR(ReadRequires(*v, o.PathOf("requires"), &m));
    if (const json::value* v = o.Find("limits")) CUBICLE_RETURN_IF_ERROR(ReadLimits(*v, o.PathOf("limits"), &m.limits));
    if (const json::value* v = o.Find("env")) CUBICLE_RETURN_IF_ERROR(ReadEnv(*v, o.PathOf("env"), &m));
    if (const json::value* v = o.Find("network")) {
      // Its form now; whether it narrows the profile's policy, at load.
      absl::StatusOr<egress::Policy> policy = egress::PolicyFromJson(*v, o.PathOf("network"), egress::Policy{});
      if (!policy.ok()) return policy.status();
      m.network = *v;
    }
    CUBICLE_RETURN_IF_ERROR(ReadTimeout(o, &m));
    if (const json::value* v = o.Find("calls")) CUBICLE_RETURN_IF_ERROR(ReadCalls(*v, o.PathOf("calls"), &m));
    CUBICLE_RETURN_IF_ERROR(ReadEnvironment(o, &m));
    CUBICLE_RETURN_IF_ERROR(ReadSeccomp(o, &m));
    m.document = document;
    return m;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("reading the manifest: ", e.what()));
  }
}

}  // namespace cubicle::skills
