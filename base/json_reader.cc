#include "base/json_reader.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <unordered_set>

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/value_stack.hpp>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/units.h"

namespace cubicle::json_read {
namespace json = boost::json;

namespace {

absl::string_view View(json::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string Cut(absl::string_view s) {
  if (s.size() <= kMaxEcho) return std::string(s);
  return absl::StrCat(s.substr(0, kMaxEcho), "...");
}

// ---------------------------------------------------------------------------
// The parse: one pass that builds the value as boost::json::parser does
// (a value_stack) and also remembers each object's keys, since parse()
// itself keeps the last of duplicate keys without a word.

// The keys of one object so far: a scan of a few, a hash set once there
// are many, so that a hostile object of many keys costs linear time.
class KeySet {
 public:
  void Clear() {
    few_.clear();
    many_.clear();
  }
  bool Insert(const std::string& key) {  // false: already there
    if (many_.empty()) {
      if (std::find(few_.begin(), few_.end(), key) != few_.end()) return false;
      if (few_.size() < 16) {
        few_.push_back(key);
        return true;
      }
      many_.insert(few_.begin(), few_.end());
      few_.clear();
    }
    return many_.insert(key).second;
  }

 private:
  std::vector<std::string> few_;
  std::unordered_set<std::string> many_;
};

class Builder {
 public:
  static constexpr size_t max_object_size = json::object::max_size();
  static constexpr size_t max_array_size = json::array::max_size();
  static constexpr size_t max_key_size = json::string::max_size();
  static constexpr size_t max_string_size = json::string::max_size();

  explicit Builder(DuplicateKeys mode) : mode_(mode) { stack_.reset(); }

  bool on_document_begin(boost::system::error_code&) { return true; }
  bool on_document_end(boost::system::error_code&) { return true; }
  bool on_object_begin(boost::system::error_code&) { return Begin(true); }
  bool on_object_end(size_t n, boost::system::error_code&) {
    stack_.push_object(n);
    return End();
  }
  bool on_array_begin(boost::system::error_code&) { return Begin(false); }
  bool on_array_end(size_t n, boost::system::error_code&) {
    stack_.push_array(n);
    return End();
  }
  bool on_key_part(json::string_view s, size_t, boost::system::error_code&) {
    stack_.push_chars(s);
    key_.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, size_t, boost::system::error_code& ec) {
    stack_.push_key(s);
    key_.append(s.data(), s.size());
    Frame& top = frames_[depth_ - 1];
    top.key.swap(key_);
    key_.clear();
    if (top.keys.Insert(top.key)) return true;
    if (mode_ == DuplicateKeys::kRecord) {
      // One per item is all a caller refuses it by; more would only cost
      // memory and time for a hostile document.
      const size_t item = frames_[0].object ? 0 : frames_[0].index;
      if (last_item_ == item) return true;
      last_item_ = item;
      duplicates_.push_back(DuplicateKey{PathOfTop(), top.key});
      return true;
    }
    duplicates_.push_back(DuplicateKey{PathOfTop(), top.key});
    ec = json::error::syntax;  // any error stops the parser; duplicates_ says which
    return false;
  }
  bool on_string_part(json::string_view s, size_t, boost::system::error_code&) {
    stack_.push_chars(s);
    return true;
  }
  bool on_string(json::string_view s, size_t, boost::system::error_code&) {
    stack_.push_string(s);
    return Scalar();
  }
  bool on_number_part(json::string_view, boost::system::error_code&) { return true; }
  bool on_int64(int64_t i, json::string_view, boost::system::error_code&) {
    stack_.push_int64(i);
    return Scalar();
  }
  bool on_uint64(uint64_t u, json::string_view, boost::system::error_code&) {
    stack_.push_uint64(u);
    return Scalar();
  }
  bool on_double(double d, json::string_view, boost::system::error_code&) {
    stack_.push_double(d);
    return Scalar();
  }
  bool on_bool(bool b, boost::system::error_code&) {
    stack_.push_bool(b);
    return Scalar();
  }
  bool on_null(boost::system::error_code&) {
    stack_.push_null();
    return Scalar();
  }
  bool on_comment_part(json::string_view, boost::system::error_code&) { return true; }
  bool on_comment(json::string_view, boost::system::error_code&) { return true; }

  json::value Release() { return stack_.release(); }
  std::vector<DuplicateKey>& duplicates() { return duplicates_; }

 private:
  struct Frame {
    bool object = true;
    KeySet keys;
    std::string key;  // the member being read
    size_t index = 0;  // the element being read
  };

  // Frames are kept for reuse: a sibling object costs no allocation.
  bool Begin(bool object) {
    if (depth_ == frames_.size()) frames_.emplace_back();
    Frame& f = frames_[depth_++];
    f.object = object;
    f.keys.Clear();
    f.index = 0;
    return true;
  }
  bool End() {
    --depth_;
    return Scalar();
  }
  bool Scalar() {
    if (depth_ > 0 && !frames_[depth_ - 1].object) ++frames_[depth_ - 1].index;
    return true;
  }
  // The path of the innermost container.
  Path PathOfTop() const {
    Path path;
    for (size_t i = 0; i + 1 < depth_; ++i) {
      const Frame& f = frames_[i];
      path.push_back(f.object ? PathStep{.key = f.key} : PathStep{.is_index = true, .index = f.index});
    }
    return path;
  }

  const DuplicateKeys mode_;
  json::value_stack stack_;
  std::vector<Frame> frames_;
  size_t depth_ = 0;
  std::string key_;  // the parts of a key split across buffers
  std::vector<DuplicateKey> duplicates_;
  std::optional<size_t> last_item_;  // kRecord: the item of the last one recorded
};

// ---------------------------------------------------------------------------
// Whole numbers, whatever their spelling.

struct Whole {
  absl::int128 value = 0;
  bool beyond_exact = false;  // a double above 2^53: not every whole number there is one
};

std::optional<Whole> WholeOf(const json::value& v) {
  if (v.is_int64()) return Whole{v.get_int64()};
  if (v.is_uint64()) return Whole{v.get_uint64()};
  if (!v.is_double()) return std::nullopt;
  const double d = v.get_double();
  if (!std::isfinite(d) || std::trunc(d) != d) return std::nullopt;
  // Beyond +-2^100 every bound is far away: clamp, keeping the sign.
  const double clamped = std::clamp(d, -0x1p100, 0x1p100);
  return Whole{absl::int128(clamped), std::fabs(d) > 0x1p53};
}

// A bound (always within int64 or uint64) as text.
std::string Text(absl::int128 n) {
  return n < 0 ? absl::StrCat(static_cast<int64_t>(n)) : absl::StrCat(static_cast<uint64_t>(n));
}

// A whole number in [min, max]; `unbounded_min` and `unbounded_max` say
// which bounds are only the type's, which the message then leaves out.
absl::StatusOr<absl::int128> WholeIn(const json::value& v, absl::string_view path, absl::int128 min,
                                     absl::int128 max, bool unbounded_min, bool unbounded_max) {
  std::optional<Whole> w = WholeOf(v);
  if (!w.has_value()) return WrongType(v, path, "a whole number");
  if (w->value < 0 && min >= 0) return Error(path, absl::StrCat(Describe(v), " is negative"));
  if (w->value < min && unbounded_max) return Error(path, absl::StrCat(Describe(v), " is less than ", Text(min)));
  if (w->value > max && unbounded_min) return Error(path, absl::StrCat(Describe(v), " is more than ", Text(max)));
  if (w->value < min || w->value > max) {
    return Error(path, absl::StrCat(Describe(v), " is outside [", Text(min), ", ", Text(max), "]"));
  }
  if (w->beyond_exact) {
    return Error(path, absl::StrCat(Describe(v), " is not exact: write a whole number above 2^53 "
                                                 "without a fraction or an exponent"));
  }
  return w->value;
}

}  // namespace

std::string Member(absl::string_view path, absl::string_view key) {
  return path.empty() ? Cut(key) : absl::StrCat(path, ".", Cut(key));
}

std::string Element(absl::string_view path, size_t index) { return absl::StrCat(path, "[", index, "]"); }

absl::Status Error(absl::string_view path, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(path.empty() ? "(top level)" : path, ": ", problem));
}

std::string Describe(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: return "null";
    case json::kind::bool_: return v.get_bool() ? "true" : "false";
    case json::kind::int64: return absl::StrCat(v.get_int64());
    case json::kind::uint64: return absl::StrCat(v.get_uint64());
    case json::kind::double_: return absl::StrCat(v.get_double());
    case json::kind::string: {
      const absl::string_view s = View(v.get_string());
      return s.size() <= kMaxEcho ? absl::StrCat("'", s, "'") : absl::StrCat("'", s.substr(0, kMaxEcho), "'...");
    }
    case json::kind::array: return "an array";
    case json::kind::object: return "an object";
  }
  return "a value";
}

absl::Status WrongType(const json::value& v, absl::string_view path, absl::string_view what) {
  return Error(path, absl::StrCat("expected ", what, ", got ", Describe(v)));
}

std::string FormatPath(const Path& path, size_t from) {
  std::string out;
  for (size_t i = from; i < path.size(); ++i) {
    out = path[i].is_index ? Element(out, path[i].index) : Member(out, path[i].key);
  }
  return out;
}

Parsed Parse(absl::string_view text, const Syntax& syntax) {
  Parsed out;
  try {
    json::parse_options options;
    options.allow_comments = syntax.comments;
    options.allow_invalid_utf8 = syntax.invalid_utf8;
    options.max_depth = syntax.max_depth;
    json::basic_parser<Builder> parser(options, syntax.duplicates);
    boost::system::error_code ec;
    out.offset = parser.write_some(false, text.data(), text.size(), ec);
    if (!ec && out.offset < text.size()) ec = json::error::extra_data;  // it stops after one value
    out.duplicates = std::move(parser.handler().duplicates());
    if (!ec) {
      out.value = parser.handler().Release();
    } else if (syntax.duplicates == DuplicateKeys::kStop && !out.duplicates.empty()) {
      const DuplicateKey& d = out.duplicates.back();
      out.error = absl::StrCat(FormatPath(d.object).empty() ? "(top level)" : FormatPath(d.object),
                               ": duplicate key '", Cut(d.key), "'");
    } else if (ec == json::error::too_deep) {
      out.error = absl::StrCat("nesting deeper than ", syntax.max_depth, " levels");
    } else {
      out.error = ec.message();
    }
  } catch (const std::exception& e) {  // bad_alloc, or a Boost.JSON size limit
    out.error = e.what();
  }
  return out;
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

absl::StatusOr<json::value> ParseDocument(absl::string_view text, bool comments) {
  Parsed parsed = Parse(text, Syntax{.comments = comments});
  if (parsed.ok()) return std::move(parsed.value);
  if (!parsed.duplicates.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(parsed.error, " (", LineColumn(text, parsed.offset), ")"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid JSON at ", LineColumn(text, parsed.offset), ": ", parsed.error));
}

absl::StatusOr<std::string> String(const json::value& v, absl::string_view path) {
  if (!v.is_string()) return WrongType(v, path, "a string");
  const absl::string_view s = View(v.get_string());
  if (s.find('\0') != absl::string_view::npos) return Error(path, "contains a NUL byte");
  return std::string(s);
}

absl::StatusOr<bool> Bool(const json::value& v, absl::string_view path) {
  if (!v.is_bool()) return WrongType(v, path, "true or false");
  return v.get_bool();
}

absl::StatusOr<uint64_t> Count(const json::value& v, absl::string_view path, uint64_t min, uint64_t max) {
  absl::StatusOr<absl::int128> n = WholeIn(v, path, min, max, /*unbounded_min=*/false,
                                           max == std::numeric_limits<uint64_t>::max());
  if (!n.ok()) return n.status();
  return static_cast<uint64_t>(*n);
}

absl::StatusOr<int64_t> Integer(const json::value& v, absl::string_view path, int64_t min, int64_t max) {
  absl::StatusOr<absl::int128> n = WholeIn(v, path, min, max, min == std::numeric_limits<int64_t>::min(),
                                           max == std::numeric_limits<int64_t>::max());
  if (!n.ok()) return n.status();
  return static_cast<int64_t>(*n);
}

absl::StatusOr<double> Number(const json::value& v, absl::string_view path, double min, double max) {
  if (!v.is_number()) return WrongType(v, path, "a number");
  const double d = v.to_number<double>();
  if (!std::isfinite(d) || d < min || d > max) {
    return Error(path, absl::StrCat(Describe(v), " is outside [", min, ", ", max, "]"));
  }
  return d;
}

absl::StatusOr<double> PositiveNumber(const json::value& v, absl::string_view path) {
  if (!v.is_number()) return WrongType(v, path, "a number");
  const double d = v.to_number<double>();
  if (!std::isfinite(d) || d <= 0) return Error(path, absl::StrCat(Describe(v), " must be positive"));
  return d;
}

absl::StatusOr<uint64_t> Size(const json::value& v, absl::string_view path) {
  if (v.is_string()) {
    absl::StatusOr<uint64_t> n = ParseSize(path, View(v.get_string()));
    if (n.ok()) return *n;
  } else if (v.is_number()) {
    absl::StatusOr<uint64_t> n = Count(v, path);
    if (n.ok()) return *n;
  }
  return Error(path, absl::StrCat(Describe(v), " is not a size (expected 256M or bytes)"));
}

absl::StatusOr<uint64_t> PositiveSize(const json::value& v, absl::string_view path) {
  absl::StatusOr<uint64_t> n = Size(v, path);
  if (n.ok() && *n == 0) return Error(path, "must be positive");
  return n;
}

absl::StatusOr<absl::Duration> Millis(const json::value& v, absl::string_view path, uint64_t min_ms,
                                      uint64_t max_ms) {
  absl::StatusOr<uint64_t> ms = Count(v, path, min_ms, max_ms);
  if (!ms.ok()) return ms.status();
  return absl::Milliseconds(static_cast<int64_t>(*ms));
}

absl::StatusOr<uint32_t> Mode(const json::value& v, absl::string_view path, uint32_t max) {
  if (!v.is_string()) return WrongType(v, path, "an octal mode string like \"0600\"");
  const absl::string_view s = View(v.get_string());
  uint32_t mode = 0;
  bool ok = !s.empty() && s.size() <= 5;
  for (char c : s) {
    if (c < '0' || c > '7') ok = false;
    mode = mode * 8 + static_cast<uint32_t>(c - '0');
  }
  if (!ok || mode > max) {
    return Error(path, absl::StrFormat("'%s' is not an octal mode (expected e.g. \"0600\", at most 0%o)", Cut(s), max));
  }
  return mode;
}

absl::StatusOr<std::vector<std::string>> StringArray(const json::value& v, absl::string_view path) {
  if (!v.is_array()) return WrongType(v, path, "an array of strings");
  std::vector<std::string> out;
  out.reserve(v.get_array().size());
  for (size_t i = 0; i < v.get_array().size(); ++i) {
    absl::StatusOr<std::string> s = String(v.get_array()[i], Element(path, i));
    if (!s.ok()) return s.status();
    out.push_back(*std::move(s));
  }
  return out;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> StringMap(const json::value& v,
                                                                           absl::string_view path) {
  if (!v.is_object()) return WrongType(v, path, "an object of strings");
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(v.get_object().size());
  for (const json::key_value_pair& member : v.get_object()) {
    const absl::string_view key = View(member.key());
    if (key.find('\0') != absl::string_view::npos) return Error(path, "a key contains a NUL byte");
    absl::StatusOr<std::string> s = String(member.value(), Member(path, key));
    if (!s.ok()) return s.status();
    out.emplace_back(std::string(key), *std::move(s));
  }
  return out;
}

absl::Status CheckKeys(const json::object& object, absl::string_view path,
                       std::initializer_list<absl::string_view> known) {
  for (const json::key_value_pair& member : object) {
    const absl::string_view key = View(member.key());
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      return Error(Member(path, key), absl::StrCat("unknown key (expected one of: ", absl::StrJoin(known, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Object> Object::Open(const json::value& v, std::string path,
                                    std::initializer_list<absl::string_view> known, Null null) {
  if (!v.is_object()) return WrongType(v, path, "an object");
  if (absl::Status st = CheckKeys(v.get_object(), path, known); !st.ok()) return st;
  return Object(v.get_object(), std::move(path), null);
}

const json::value* Object::Find(absl::string_view key) const {
  const json::value* v = object_->if_contains(json::string_view(key.data(), key.size()));
  if (v != nullptr && v->is_null() && null_ == Null::kMeansAbsent) return nullptr;
  return v;
}

}  // namespace cubicle::json_read
