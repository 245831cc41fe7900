// A YAML manifest read into the same value a JSON one is (boost::json), so
// that one reader (base/json_reader.h) checks both by the same rules. The
// text is parsed by libyaml (its event API); what this file adds is how
// YAML's untyped scalars become typed values, and what it refuses:
//
//  - Plain (unquoted) scalars resolve as YAML 1.2's core schema does:
//    null, ~ and nothing are null; true/false (also True, TRUE...) are
//    booleans; decimal integers and floats are numbers; everything else —
//    yes, no, on, off, 0x1F, 1.2.0 — is a string. Quoted and block
//    scalars are always strings.
//  - Anchors, aliases and explicit tags (!!str, !foo) are refused: a
//    manifest needs none, and aliases let a small file expand without
//    bound.
//  - Exactly one document; duplicate keys, non-scalar keys and nesting
//    deeper than 64 are refused.
//
// Errors are InvalidArgument with the line and column (1-based): "invalid
// YAML at line 3, column 7: mapping values are not allowed in this context".
// Nothing here throws.
#pragma once

#include <boost/json/value.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubicle::skills {

absl::StatusOr<boost::json::value> ParseYamlDocument(absl::string_view text);

}  // namespace cubicle::skills
