#include "skills/static_policy.h"

#include <algorithm>
#include <set>

#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/json_reader.h"
#include "base/status.h"
#include "sessions/digest.h"

namespace cubicle::skills {
namespace json = boost::json;

namespace {

using json_read::Error;
using json_read::Object;

// skills/static_checker.py, embedded at build time (CMake).
constexpr char kChecker[] =
#include "skills/static_checker.inc"
    ;

bool IsIdentifier(absl::string_view s) {
  if (s.empty() || absl::ascii_isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// "a", "a.b.c", or "a.b.*": identifiers between dots, '*' only as the
// last part of two or more.
bool IsDottedPattern(absl::string_view s) {
  std::vector<absl::string_view> parts = absl::StrSplit(s, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool wildcard = parts[i] == "*" && i + 1 == parts.size() && i > 0;
    if (!wildcard && !IsIdentifier(parts[i])) return false;
  }
  return true;
}

// One list of the policy: at most kMaxStaticPatterns names, each valid
// and listed once.
absl::Status ReadPatterns(const Object& o, absl::string_view key, bool dotted, std::vector<std::string>* out) {
  const json::value* v = o.Find(key);
  if (v == nullptr) return absl::OkStatus();
  const std::string path = o.PathOf(key);
  if (v->is_array() && v->get_array().size() > kMaxStaticPatterns) {
    return Error(path, absl::StrCat(v->get_array().size(), " names; at most ", kMaxStaticPatterns, " are allowed"));
  }
  std::set<std::string> seen;
  return json_read::ForEachElement(*v, path, [&](const json::value& e, std::string at) -> absl::Status {
    CUBICLE_ASSIGN_OR_RETURN(std::string name, json_read::String(e, at));
    const std::string shown = absl::StrCat("'", name.substr(0, json_read::kMaxEcho), "'");
    if (name.size() > kMaxStaticPatternBytes) {
      return Error(at, absl::StrCat(shown, " is longer than ", kMaxStaticPatternBytes, " bytes"));
    }
    if (dotted && !IsDottedPattern(name)) {
      return Error(at, absl::StrCat(shown, " is not a dotted name like os.system or subprocess.* (Python names "
                                           "between dots; '*' only as the last part, after a name)"));
    }
    if (!dotted && !IsIdentifier(name)) {
      return Error(at, absl::StrCat(shown, " is not an attribute name like __subclasses__ (a Python name, "
                                           "without dots or wildcards)"));
    }
    if (!seen.insert(name).second) return Error(at, absl::StrCat(shown, " is listed twice"));
    out->push_back(std::move(name));
    return absl::OkStatus();
  });
}

// What a verdict is reached under: the three lists, in order (the order
// decides which pattern a violation names).
std::string CanonicalText(const StaticPolicy& p) {
  std::string text = "cubicle-static-policy-v1\n";
  for (const auto& [name, list] : {std::pair{"deny_imports", &p.deny_imports},
                                   {"deny_calls", &p.deny_calls},
                                   {"deny_attributes", &p.deny_attributes}}) {
    absl::StrAppend(&text, name, " ", list->size(), "\n");
    for (const std::string& s : *list) absl::StrAppend(&text, s, "\n");
  }
  return text;
}

absl::StatusOr<StaticViolation> ViolationOf(const json::value& v, absl::string_view path) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, std::string(path), {"rule", "what", "line", "col"}));
  StaticViolation out;
  for (const char* key : {"rule", "what", "line", "col"}) {
    if (o.Find(key) == nullptr) return Error(path, absl::StrCat("no ", key));
  }
  CUBICLE_RETURN_IF_ERROR(o.Read("rule", &out.rule, json_read::String));
  CUBICLE_RETURN_IF_ERROR(o.Read("what", &out.what, json_read::String));
  CUBICLE_RETURN_IF_ERROR(o.Read("line", &out.line, [](const json::value& n, absl::string_view p) {
    return json_read::Integer(n, p, 0, int64_t{1} << 31);
  }));
  CUBICLE_RETURN_IF_ERROR(o.Read("col", &out.col, [](const json::value& n, absl::string_view p) {
    return json_read::Integer(n, p, 0, int64_t{1} << 31);
  }));
  // Bounded, whatever the checker's sandbox said.
  if (out.rule.size() > kMaxStaticPatternBytes + 32) out.rule.resize(kMaxStaticPatternBytes + 32);
  if (out.what.size() > 512) out.what.resize(512);
  return out;
}

absl::StatusOr<StaticVerdict> VerdictOf(const json::value& v, absl::string_view path, const std::string& digest) {
  CUBICLE_ASSIGN_OR_RETURN(Object o, Object::Open(v, std::string(path), {"violations", "truncated"}));
  StaticVerdict out;
  out.policy_digest = digest;
  CUBICLE_RETURN_IF_ERROR(o.Read("truncated", &out.truncated, json_read::Bool));
  const json::value* violations = o.Find("violations");
  if (violations == nullptr) return Error(path, "no violations");
  if (violations->is_array() && violations->get_array().size() > kMaxStaticViolations) {
    return Error(o.PathOf("violations"), "more violations than were asked for");
  }
  CUBICLE_RETURN_IF_ERROR(
      json_read::ForEachElement(*violations, o.PathOf("violations"), [&](const json::value& e, std::string at) {
        absl::StatusOr<StaticViolation> one = ViolationOf(e, at);
        if (!one.ok()) return one.status();
        out.violations.push_back(*std::move(one));
        return absl::OkStatus();
      }));
  return out;
}

}  // namespace

absl::StatusOr<StaticPolicy> ParseStaticPolicy(const json::value& v, absl::string_view path) {
  CUBICLE_ASSIGN_OR_RETURN(Object o,
                           Object::Open(v, std::string(path), {"deny_imports", "deny_calls", "deny_attributes"}));
  StaticPolicy policy;
  CUBICLE_RETURN_IF_ERROR(ReadPatterns(o, "deny_imports", /*dotted=*/true, &policy.deny_imports));
  CUBICLE_RETURN_IF_ERROR(ReadPatterns(o, "deny_calls", /*dotted=*/true, &policy.deny_calls));
  CUBICLE_RETURN_IF_ERROR(ReadPatterns(o, "deny_attributes", /*dotted=*/false, &policy.deny_attributes));
  const std::string canonical = CanonicalText(policy);
  policy.digest = sessions::Sha256Hex(canonical);
  // Without libcrypto the text itself tells policies apart as well.
  if (policy.digest.empty()) policy.digest = canonical;
  return policy;
}

json::object StaticPolicyToJson(const StaticPolicy& policy) {
  auto strings = [](const std::vector<std::string>& list) {
    json::array out;
    for (const std::string& s : list) out.push_back(json::value(s));
    return out;
  };
  return json::object{{"deny_imports", strings(policy.deny_imports)},
                      {"deny_calls", strings(policy.deny_calls)},
                      {"deny_attributes", strings(policy.deny_attributes)}};
}

std::string DescribeViolation(const StaticViolation& v) {
  if (v.line <= 0) return absl::StrCat(v.rule, " (", v.what, ")");
  return absl::StrCat(v.rule, " (line ", v.line, ": ", v.what, ")");
}

json::array ViolationsToJson(const std::vector<StaticViolation>& violations) {
  json::array out;
  for (const StaticViolation& v : violations) {
    out.push_back(json::object{{"rule", v.rule}, {"what", v.what}, {"line", v.line}, {"col", v.col}});
  }
  return out;
}

json::object StaticVerdictToJson(const StaticVerdict& verdict) {
  if (verdict.ok()) return json::object{{"ok", true}};
  return json::object{
      {"ok", false}, {"violations", ViolationsToJson(verdict.violations)}, {"truncated", verdict.truncated}};
}

absl::string_view StaticCheckerProgram() { return kChecker; }

std::string StaticCheckInput(const StaticPolicy& policy, const std::vector<absl::string_view>& scripts) {
  json::array encoded;
  for (absl::string_view script : scripts) encoded.push_back(json::value(absl::Base64Escape(script)));
  return json::serialize(json::object{{"policy", StaticPolicyToJson(policy)},
                                      {"max_violations", kMaxStaticViolations},
                                      {"scripts", std::move(encoded)}});
}

absl::StatusOr<std::vector<StaticVerdict>> ParseStaticCheckOutput(absl::string_view out, size_t scripts,
                                                                  const StaticPolicy& policy) {
  while (!out.empty() && out.back() == '\n') out.remove_suffix(1);
  absl::StatusOr<json::value> parsed = json_read::ParseDocument(out, /*comments=*/false);
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat("the checker's output: ", parsed.status().message()));
  absl::StatusOr<Object> o = Object::Open(*parsed, "", {"results"});
  if (!o.ok()) return absl::InvalidArgumentError(absl::StrCat("the checker's output: ", o.status().message()));
  const json::value* results = o->Find("results");
  if (results == nullptr || !results->is_array() || results->get_array().size() != scripts) {
    return absl::InvalidArgumentError(absl::StrCat("the checker's output: expected results for ", scripts, " scripts"));
  }
  std::vector<StaticVerdict> verdicts;
  for (size_t i = 0; i < scripts; ++i) {
    absl::StatusOr<StaticVerdict> v = VerdictOf(results->get_array()[i], json_read::Element("results", i), policy.digest);
    if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat("the checker's output: ", v.status().message()));
    verdicts.push_back(*std::move(v));
  }
  return verdicts;
}

}  // namespace cubicle::skills
