// A profile's static policy for the Python skills that run in it
// (docs/skills.md, "Static policy"): the imports, calls and attribute
// names it denies, checked once per skill when the skills directory is
// loaded — never per call — by skills/static_checker.py, which parses the
// script with Python's own `ast` module and never runs it. The checker is
// run in a sandbox of the skill's profile (rpc/skill_static_policy.h);
// what is here is the policy's reading, the checker's program and its
// input and output.
//
// Defence in depth beside seccomp, never a replacement: what a script
// computes at run time (a name read from data, code in a string, a C
// extension) is beyond any reading of its text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubicle::skills {

// Per list, and per pattern: a policy is a few dozen names, and every
// load sends it to the checker once per batch.
inline constexpr size_t kMaxStaticPatterns = 256;
inline constexpr size_t kMaxStaticPatternBytes = 128;
// A script's violations reported, at most (the first, by position).
inline constexpr size_t kMaxStaticViolations = 16;

struct StaticPolicy {
  // Dotted module names: "a.b" denies a.b and its submodules, "a.*" the
  // submodules of a (not a itself).
  std::vector<std::string> deny_imports;
  // Dotted names of callables, matched as deny_imports' are: "eval",
  // "os.system", "subprocess.*".
  std::vector<std::string> deny_calls;
  // Attribute names: "__subclasses__".
  std::vector<std::string> deny_attributes;
  // SHA-256 of the canonical text of the three lists (ParseStaticPolicy
  // sets it): which policy a verdict was reached under.
  std::string digest;

  bool operator==(const StaticPolicy&) const = default;
};

// "static_policy" at `path` ("profiles.python.static_policy"): an object
// of the three lists, each optional. Every error names the element:
// "profiles.python.static_policy.deny_calls[2]: 'os.' is not a dotted name
// (...)".
absl::StatusOr<StaticPolicy> ParseStaticPolicy(const boost::json::value& v, absl::string_view path);

// The three lists, as the configuration spells them.
boost::json::object StaticPolicyToJson(const StaticPolicy& policy);

struct StaticViolation {
  // The kind and the pattern that matched ("deny_imports: subprocess",
  // "deny_calls: os.system", "deny_attributes: __globals__"), or "syntax"
  // for a script that does not parse.
  std::string rule;
  std::string what;  // the code at fault, cut to 120 characters: "import subprocess"
  int64_t line = 0;  // 1-based; 0 for the script as a whole
  int64_t col = 0;   // 1-based, in characters; 0 with line 0
};

// A script's verdict under one policy.
struct StaticVerdict {
  std::string policy_digest;
  std::vector<StaticViolation> violations;  // by position, at most kMaxStaticViolations
  bool truncated = false;                   // there were more

  bool ok() const { return violations.empty(); }
};

// "deny_imports: subprocess (line 3: import subprocess)".
std::string DescribeViolation(const StaticViolation& v);
// {"ok": true} or {"ok": false, "violations": [{rule, what, line, col}],
// "truncated": false}.
boost::json::object StaticVerdictToJson(const StaticVerdict& verdict);
boost::json::array ViolationsToJson(const std::vector<StaticViolation>& violations);

// skills/static_checker.py, embedded at build time: run it as
// `python3 -I -c PROGRAM` with StaticCheckInput on its stdin.
absl::string_view StaticCheckerProgram();

// The checker's stdin: the policy and the scripts (base64: a script's
// bytes reach the checker exactly, UTF-8 or not).
std::string StaticCheckInput(const StaticPolicy& policy, const std::vector<absl::string_view>& scripts);

// The checker's stdout for `scripts` scripts: a verdict for each, in
// order, under `policy`. InvalidArgument for output that is not the
// checker's answer (a script cannot shape it: it is parsed, never run,
// but the checker's sandbox is still not trusted to be well-formed).
absl::StatusOr<std::vector<StaticVerdict>> ParseStaticCheckOutput(absl::string_view out, size_t scripts,
                                                                  const StaticPolicy& policy);

}  // namespace cubicle::skills
