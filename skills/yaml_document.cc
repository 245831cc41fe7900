#include "skills/yaml_document.h"

#include <yaml.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/json_reader.h"

namespace cubicle::skills {
namespace json = boost::json;

namespace {

constexpr size_t kMaxDepth = 64;

// One libyaml event, copied out so that libyaml's is freed at once.
struct Event {
  yaml_event_type_t type = YAML_NO_EVENT;
  std::string value;    // a scalar's text, an alias's anchor
  bool plain = false;   // a plain (unquoted, not block) scalar
  bool anchor = false;  // it defines an anchor
  bool tag = false;     // it has an explicit tag
  size_t line = 0, column = 0;  // 1-based, where it starts
};

std::string Where(size_t line, size_t column) { return absl::StrCat("line ", line, ", column ", column); }

absl::Status Refuse(const Event& e, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("invalid YAML at ", Where(e.line, e.column), ": ", what));
}

// [-+]?[0-9]+
bool IsInteger(absl::string_view s) {
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(c); });
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsFloat(absl::string_view s) {
  auto digits = [&s] {
    size_t n = 0;
    while (n < s.size() && absl::ascii_isdigit(s[n])) ++n;
    s.remove_prefix(n);
    return n;
  };
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  const size_t whole = digits();
  size_t fraction = 0;
  if (!s.empty() && s[0] == '.') {
    s.remove_prefix(1);
    fraction = digits();
  }
  if (whole == 0 && fraction == 0) return false;
  if (!s.empty() && (s[0] == 'e' || s[0] == 'E')) {
    s.remove_prefix(1);
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
    if (digits() == 0) return false;
  }
  return s.empty();
}

// A plain scalar by YAML 1.2's core schema (see the header).
json::value PlainScalar(const std::string& text) {
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") return nullptr;
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  absl::string_view digits = text;
  if (!digits.empty() && digits[0] == '+') digits.remove_prefix(1);
  const char* begin = digits.data();
  const char* end = digits.data() + digits.size();
  if (IsInteger(text)) {
    int64_t i = 0;
    if (auto [p, ec] = std::from_chars(begin, end, i); ec == std::errc() && p == end) return i;
    uint64_t u = 0;
    if (auto [p, ec] = std::from_chars(begin, end, u); ec == std::errc() && p == end) return u;
  }
  if (IsInteger(text) || IsFloat(text)) {
    double d = 0;
    if (auto [p, ec] = std::from_chars(begin, end, d); ec == std::errc() && p == end) return d;
  }
  return json::string(text);
}

class Reader {
 public:
  explicit Reader(absl::string_view text) {
    ready_ = yaml_parser_initialize(&parser_) != 0;
    if (ready_) {
      yaml_parser_set_input_string(&parser_, reinterpret_cast<const unsigned char*>(text.data()), text.size());
    }
  }
  ~Reader() {
    if (ready_) yaml_parser_delete(&parser_);
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  absl::StatusOr<json::value> Document() {
    if (!ready_) return absl::ResourceExhaustedError("yaml_parser_initialize: out of memory");
    if (absl::Status st = Expect(YAML_STREAM_START_EVENT); !st.ok()) return st;
    absl::StatusOr<Event> e = Next();
    if (!e.ok()) return e.status();
    if (e->type == YAML_STREAM_END_EVENT) return nullptr;  // an empty file
    if (e->type != YAML_DOCUMENT_START_EVENT) return Refuse(*e, "expected a document");
    absl::StatusOr<Event> top = Next();
    if (!top.ok()) return top.status();
    absl::StatusOr<json::value> value = Node(*top, "", 0);
    if (!value.ok()) return value.status();
    if (absl::Status st = Expect(YAML_DOCUMENT_END_EVENT); !st.ok()) return st;
    absl::StatusOr<Event> after = Next();
    if (!after.ok()) return after.status();
    if (after->type != YAML_STREAM_END_EVENT) {
      return Refuse(*after, "a manifest is one document; a second one begins here");
    }
    return value;
  }

 private:
  // The next event, or the parser's error with its position.
  absl::StatusOr<Event> Next() {
    yaml_event_t raw;
    if (yaml_parser_parse(&parser_, &raw) == 0) {
      std::string problem = parser_.problem != nullptr ? parser_.problem : "malformed";
      if (parser_.context != nullptr) absl::StrAppend(&problem, ", ", parser_.context);
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid YAML at ", Where(parser_.problem_mark.line + 1, parser_.problem_mark.column + 1), ": ", problem));
    }
    Event e;
    e.type = raw.type;
    e.line = raw.start_mark.line + 1;
    e.column = raw.start_mark.column + 1;
    switch (raw.type) {
      case YAML_SCALAR_EVENT:
        e.value.assign(reinterpret_cast<const char*>(raw.data.scalar.value), raw.data.scalar.length);
        e.plain = raw.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        e.anchor = raw.data.scalar.anchor != nullptr;
        e.tag = raw.data.scalar.tag != nullptr;
        break;
      case YAML_SEQUENCE_START_EVENT:
        e.anchor = raw.data.sequence_start.anchor != nullptr;
        e.tag = raw.data.sequence_start.tag != nullptr;
        break;
      case YAML_MAPPING_START_EVENT:
        e.anchor = raw.data.mapping_start.anchor != nullptr;
        e.tag = raw.data.mapping_start.tag != nullptr;
        break;
      default:
        break;
    }
    yaml_event_delete(&raw);
    return e;
  }

  absl::Status Expect(yaml_event_type_t type) {
    absl::StatusOr<Event> e = Next();
    if (!e.ok()) return e.status();
    if (e->type != type) return Refuse(*e, "unexpected content");
    return absl::OkStatus();
  }

  absl::StatusOr<json::value> Node(const Event& e, const std::string& path, size_t depth) {
    if (depth > kMaxDepth) return Refuse(e, absl::StrCat("nested deeper than ", kMaxDepth, " levels"));
    if (e.type == YAML_ALIAS_EVENT || e.anchor) return Refuse(e, "anchors and aliases (&, *) are not supported");
    if (e.tag) return Refuse(e, "explicit tags (!!str, !name) are not supported");
    switch (e.type) {
      case YAML_SCALAR_EVENT:
        return e.plain ? PlainScalar(e.value) : json::value(json::string(e.value));
      case YAML_SEQUENCE_START_EVENT:
        return Sequence(path, depth);
      case YAML_MAPPING_START_EVENT:
        return Mapping(path, depth);
      default:
        return Refuse(e, "expected a value");
    }
  }

  absl::StatusOr<json::value> Sequence(const std::string& path, size_t depth) {
    json::array items;
    for (;;) {
      absl::StatusOr<Event> e = Next();
      if (!e.ok()) return e.status();
      if (e->type == YAML_SEQUENCE_END_EVENT) return items;
      absl::StatusOr<json::value> item = Node(*e, json_read::Element(path, items.size()), depth + 1);
      if (!item.ok()) return item.status();
      items.push_back(*std::move(item));
    }
  }

  absl::StatusOr<json::value> Mapping(const std::string& path, size_t depth) {
    json::object members;
    for (;;) {
      absl::StatusOr<Event> key = Next();
      if (!key.ok()) return key.status();
      if (key->type == YAML_MAPPING_END_EVENT) return members;
      if (key->type != YAML_SCALAR_EVENT || key->anchor || key->tag) {
        return Refuse(*key, "a key must be a scalar without anchor or tag");
      }
      if (members.contains(key->value)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path.empty() ? "(top level)" : path, ": duplicate key '", key->value.substr(0, 64), "' (",
                         Where(key->line, key->column), ")"));
      }
      absl::StatusOr<Event> e = Next();
      if (!e.ok()) return e.status();
      absl::StatusOr<json::value> value = Node(*e, json_read::Member(path, key->value), depth + 1);
      if (!value.ok()) return value.status();
      members[key->value] = *std::move(value);
    }
  }

  yaml_parser_t parser_;
  bool ready_ = false;
};

}  // namespace

absl::StatusOr<json::value> ParseYamlDocument(absl::string_view text) {
  // Boost.JSON throws on allocation failure; nothing may cross this API.
  try {
    Reader reader(text);
    return reader.Document();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("reading YAML: ", e.what()));
  }
}

}  // namespace cubicle::skills
