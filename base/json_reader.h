// Reading JSON that people write — the daemon's config file, JSON-RPC
// params, a network policy — by one set of rules, so that a value means
// the same wherever it is written:
//
//  - Every value has one type. A wrong one is an error naming the JSON path
//    and what was expected: "profiles.x.uid: expected a whole number, got
//    '1000'".
//  - A whole number (a count, an integer, milliseconds) may be spelt any way
//    JSON allows — 1000, 1e3, 1000.0 — but must be exactly a whole number in
//    range: 1.5 is refused, and so is a fraction or exponent spelling beyond
//    2^53, where a double no longer holds every whole number.
//  - A size is a "512M"-style string (K, M, G, T: binary multiples) or a
//    whole number of bytes.
//  - A string holds no NUL byte: each ends up in argv, env or a path, where
//    a NUL would silently cut it short.
//  - Unknown keys are errors, and so are duplicate keys (which
//    boost::json::parse would silently collapse to the last).
//  - null is a value like any other, refused where it does not fit, except
//    where a document says it means "not given" (JSON-RPC params).
//
// Echoed keys and values are cut to kMaxEcho bytes: an error never grows
// with what the writer chose to send. Nothing here throws; Boost.JSON's
// exceptions (bad_alloc) become errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cubicle::json_read {

inline constexpr size_t kMaxEcho = 64;

// ---------------------------------------------------------------------------
// Paths, as errors show them: "profiles.shell.binds[2].dest".

std::string Member(absl::string_view path, absl::string_view key);  // "key" at the top
std::string Element(absl::string_view path, size_t index);
// InvalidArgument "PATH: PROBLEM" ("(top level)" for the empty path).
absl::Status Error(absl::string_view path, absl::string_view problem);
// The value as an error shows it: 5, 1.5, true, null, 'text' (cut), an array.
std::string Describe(const boost::json::value& v);
// "PATH: expected WHAT, got DESCRIPTION".
absl::Status WrongType(const boost::json::value& v, absl::string_view path, absl::string_view what);

// One step from the top of a document: an object's key or an array's index.
struct PathStep {
  bool is_index = false;
  size_t index = 0;
  std::string key;
};
using Path = std::vector<PathStep>;
// The steps from `from` on as a path string ("" when there are none).
std::string FormatPath(const Path& path, size_t from = 0);

// ---------------------------------------------------------------------------
// Parsing.

enum class DuplicateKeys {
  kStop,    // the first duplicate key ends the parse as an error
  kRecord,  // the first one in each item — each element of a top-level
            // array, or else the whole document — is recorded (the value
            // keeps the last), for the caller to refuse where it knows the
            // context (JSON-RPC: the request of a batch it belongs to)
};

struct Syntax {
  bool comments = false;      // // and /* */ (files people annotate)
  bool invalid_utf8 = false;  // bytes that are not UTF-8, kept inside strings
  size_t max_depth = 64;      // deeper nesting is an error
  DuplicateKeys duplicates = DuplicateKeys::kStop;
};

struct DuplicateKey {
  Path object;  // the object that holds `key` twice
  std::string key;
};

struct Parsed {
  bool ok() const { return error.empty(); }
  boost::json::value value;  // when ok()
  // kRecord: the first of each item, in document order. kStop: the one
  // that ended the parse (error is then "PATH: duplicate key 'KEY'").
  std::vector<DuplicateKey> duplicates;
  std::string error;  // empty: the text is exactly one JSON value
  size_t offset = 0;  // on error, the byte where parsing stopped
};

Parsed Parse(absl::string_view text, const Syntax& syntax = {});

// "line 3, column 11" of a byte offset.
std::string LineColumn(absl::string_view text, size_t offset);

// A whole document by the strict rules (duplicates stop the parse):
// InvalidArgument "invalid JSON at line 3, column 11: syntax error" or
// "profiles.x.limits: duplicate key 'memory' (line 12, column 17)".
absl::StatusOr<boost::json::value> ParseDocument(absl::string_view text, bool comments);

// ---------------------------------------------------------------------------
// Typed values. Each takes the value and its path, and says precisely what
// was expected.

absl::StatusOr<std::string> String(const boost::json::value& v, absl::string_view path);
absl::StatusOr<bool> Bool(const boost::json::value& v, absl::string_view path);
// A whole number in [min, max] (see the rule above).
absl::StatusOr<uint64_t> Count(const boost::json::value& v, absl::string_view path, uint64_t min = 0,
                               uint64_t max = std::numeric_limits<uint64_t>::max());
absl::StatusOr<int64_t> Integer(const boost::json::value& v, absl::string_view path,
                                int64_t min = std::numeric_limits<int64_t>::min(),
                                int64_t max = std::numeric_limits<int64_t>::max());
// Any finite number in [min, max].
absl::StatusOr<double> Number(const boost::json::value& v, absl::string_view path,
                              double min = -std::numeric_limits<double>::infinity(),
                              double max = std::numeric_limits<double>::infinity());
// A finite number above 0 (a CPU share, seconds with a fraction).
absl::StatusOr<double> PositiveNumber(const boost::json::value& v, absl::string_view path);
absl::StatusOr<uint64_t> Size(const boost::json::value& v, absl::string_view path);
absl::StatusOr<uint64_t> PositiveSize(const boost::json::value& v, absl::string_view path);
// Whole milliseconds in [min_ms, max_ms] (keys ending in _ms).
inline constexpr uint64_t kYearMs = uint64_t{365} * 24 * 3600 * 1000;
absl::StatusOr<absl::Duration> Millis(const boost::json::value& v, absl::string_view path, uint64_t min_ms = 1,
                                      uint64_t max_ms = kYearMs);
// An octal permission string ("0600", "1777") of at most `max`; never a
// JSON number, where 600 would silently mean 01130.
absl::StatusOr<uint32_t> Mode(const boost::json::value& v, absl::string_view path, uint32_t max);
absl::StatusOr<std::vector<std::string>> StringArray(const boost::json::value& v, absl::string_view path);
// {"NAME": "value"}, in document order.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> StringMap(const boost::json::value& v,
                                                                           absl::string_view path);

// The same readers with their bounds bound, for Object::Read.
inline auto CountIn(uint64_t min, uint64_t max) {
  return [min, max](const boost::json::value& v, absl::string_view path) { return Count(v, path, min, max); };
}
inline auto MillisIn(uint64_t min_ms, uint64_t max_ms) {
  return [min_ms, max_ms](const boost::json::value& v, absl::string_view path) {
    return Millis(v, path, min_ms, max_ms);
  };
}

// Each element of an array, with its path.
template <typename Each>
absl::Status ForEachElement(const boost::json::value& v, absl::string_view path, Each each) {
  if (!v.is_array()) return WrongType(v, path, "an array");
  const boost::json::array& a = v.get_array();
  for (size_t i = 0; i < a.size(); ++i) {
    if (absl::Status st = each(a[i], Element(path, i)); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// The first key of `object` not in `known`, as "PATH.KEY: unknown key
// (expected one of: a, b, c)"; OK when there is none.
absl::Status CheckKeys(const boost::json::object& object, absl::string_view path,
                       std::initializer_list<absl::string_view> known);

// What null means in a document.
enum class Null {
  kIsAValue,    // refused where it does not fit (config, network policy)
  kMeansAbsent  // the key counts as not given (JSON-RPC params)
};

// An object whose keys are all known.
class Object {
 public:
  static absl::StatusOr<Object> Open(const boost::json::value& v, std::string path,
                                     std::initializer_list<absl::string_view> known, Null null = Null::kIsAValue);

  // The member, or nullptr when absent (or null, with Null::kMeansAbsent).
  const boost::json::value* Find(absl::string_view key) const;
  std::string PathOf(absl::string_view key) const { return Member(path_, key); }
  const std::string& path() const { return path_; }
  const boost::json::object& object() const { return *object_; }

  // Reads `key`, when present, into `out` (a T or a std::optional<T>).
  template <typename Out, typename Convert>
  absl::Status Read(absl::string_view key, Out* out, Convert convert) const {
    const boost::json::value* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    auto converted = convert(*v, PathOf(key));
    if (!converted.ok()) return converted.status();
    *out = *std::move(converted);
    return absl::OkStatus();
  }

  // Reads a whole number in [min, max], when present, into an integer
  // field of any width (or a std::optional of one).
  template <typename T>
  absl::Status ReadCount(absl::string_view key, T* out, uint64_t min, uint64_t max) const {
    const boost::json::value* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    absl::StatusOr<uint64_t> n = Count(*v, PathOf(key), min, max);
    if (!n.ok()) return n.status();
    *out = static_cast<CountType<T>>(*n);
    return absl::OkStatus();
  }

 private:
  template <typename T>
  struct CountTypeOf {
    using type = T;
  };
  template <typename T>
  struct CountTypeOf<std::optional<T>> {
    using type = T;
  };
  template <typename T>
  using CountType = typename CountTypeOf<T>::type;

  Object(const boost::json::object& object, std::string path, Null null)
      : object_(&object), path_(std::move(path)), null_(null) {}
  const boost::json::object* object_;
  std::string path_;
  Null null_;
};

}  // namespace cubicle::json_read
