#include "rpc/jsonrpc.h"

#include <boost/json/array.hpp>
#include <boost/json/parse_options.hpp>
#include <boost/json/parser.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>

#include <cmath>
#include <exception>
#include <limits>

#include "absl/strings/str_cat.h"

namespace cubicle::rpc {
namespace {

constexpr absl::string_view kBom = "\xEF\xBB\xBF";
constexpr absl::string_view kWhitespace = " \t\r\n";  // JSON's whitespace (RFC 8259 §2)
// Keys and method names echoed in messages are cut to this: a reply must not
// grow with what a client chose to send.
constexpr std::size_t kMaxEcho = 64;

boost::json::string_view Bjv(absl::string_view s) { return boost::json::string_view(s.data(), s.size()); }
absl::string_view Asv(boost::json::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string Quoted(absl::string_view s) {
  if (s.size() > kMaxEcho) return absl::StrCat("\"", s.substr(0, kMaxEcho), "\"...");
  return absl::StrCat("\"", s, "\"");
}

// Length of the valid UTF-8 sequence at s[i], or 0 if there is none (RFC 3629:
// no overlong forms, no surrogates, nothing above U+10FFFF).
std::size_t Utf8SequenceLength(absl::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  std::size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (s.size() - i < len) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  return len;
}

// The offset of the first byte that is not valid UTF-8, or npos.
std::size_t FirstInvalidUtf8(absl::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = Utf8SequenceLength(s, i);
    if (n == 0) return i;
    i += n;
  }
  return absl::string_view::npos;
}

// Replaces each byte that does not start a valid sequence with U+FFFD. On
// serialized JSON this keeps the JSON valid: such bytes can only be inside
// strings, since everything else Boost.JSON writes is ASCII.
void RepairUtf8(std::string& s) {
  std::size_t bad = FirstInvalidUtf8(s);
  if (bad == absl::string_view::npos) return;
  std::string out(s, 0, bad);
  for (std::size_t i = bad; i < s.size();) {
    const std::size_t n = Utf8SequenceLength(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  s = std::move(out);
}

// boost::json::serialize, except that non-finite numbers become null:
// Boost.JSON 1.81 writes them as Infinity and NaN, which are not JSON, and a
// handler's 0.0/0.0 must not make its reply unreadable.
std::string Serialize(const boost::json::value& v) {
  std::string out = boost::json::serialize(v);
  if (out.find("NaN") == std::string::npos && out.find("Infinity") == std::string::npos) return out;
  boost::json::value copy = v;
  std::vector<boost::json::value*> pending = {&copy};  // no recursion: depth is the caller's choice
  while (!pending.empty()) {
    boost::json::value* x = pending.back();
    pending.pop_back();
    if (x->is_double() && !std::isfinite(x->get_double())) {
      *x = nullptr;
    } else if (x->is_array()) {
      for (boost::json::value& e : x->get_array()) pending.push_back(&e);
    } else if (x->is_object()) {
      for (boost::json::key_value_pair& m : x->get_object()) pending.push_back(&m.value());
    }
  }
  return boost::json::serialize(copy);
}

// The JSON text of a line: without its terminator, a leading BOM and the
// whitespace around it. `offset` is where it starts in `line`.
absl::string_view JsonText(absl::string_view line, std::size_t* offset) {
  std::size_t start = 0;
  if (line.substr(0, kBom.size()) == kBom) start = kBom.size();
  absl::string_view text = line.substr(start);
  const std::size_t first = text.find_first_not_of(kWhitespace);
  if (first == absl::string_view::npos) {
    *offset = line.size();
    return {};
  }
  const std::size_t last = text.find_last_not_of(kWhitespace);
  *offset = start + first;
  return text.substr(first, last - first + 1);
}

// Parses one JSON text with the depth limit. On failure sets `*error` to a
// kParseError whose message gives the byte offset in the line.
std::optional<boost::json::value> ParseJson(absl::string_view text, std::size_t offset, bool allow_invalid_utf8,
                                            Error* error) {
  boost::json::parse_options options;
  options.max_depth = kMaxDepth;
  options.allow_invalid_utf8 = allow_invalid_utf8;
  boost::json::parser parser(boost::json::storage_ptr(), options);
  boost::system::error_code ec;
  const std::size_t consumed = parser.write(text.data(), text.size(), ec);
  if (ec) {
    const std::string what = ec == boost::json::error::too_deep
                                 ? absl::StrCat("nesting deeper than ", kMaxDepth, " levels")
                                 : ec.message();
    *error = Error{kParseError, absl::StrCat("parse error at offset ", offset + consumed, ": ", what), nullptr};
    return std::nullopt;
  }
  return parser.release();
}

Entry Single(Error error) {
  Entry entry;
  entry.call.id = nullptr;
  entry.error = std::move(error);
  return entry;
}

Incoming SingleError(Error error) {
  Incoming in;
  in.entries.push_back(Single(std::move(error)));
  return in;
}

Error InvalidRequest(std::string message) { return Error{kInvalidRequest, std::move(message), nullptr}; }

bool IsValidId(const boost::json::value& id) {
  return id.is_string() || id.is_int64() || id.is_uint64() || id.is_null();
}

// Validates one Request object (JSON-RPC 2.0 §4), consuming `v`.
Entry ToEntry(boost::json::value&& v) {
  Entry entry;
  if (!v.is_object()) {
    entry.error = InvalidRequest("request: expected an object");
    return entry;
  }
  boost::json::object& obj = v.get_object();
  std::optional<Error> error;
  const auto fail = [&](std::string message) {
    if (!error) error = InvalidRequest(std::move(message));
  };

  // The id first: an invalid request is still answered with it if it is valid.
  bool has_id = false;
  if (boost::json::value* id = obj.if_contains("id")) {
    has_id = true;
    if (IsValidId(*id)) {
      entry.call.id = std::move(*id);
    } else {
      fail("id: expected a string, an integer or null");
    }
  }
  const boost::json::value* version = obj.if_contains("jsonrpc");
  if (version == nullptr || !version->is_string() || version->get_string() != "2.0") {
    fail("jsonrpc: expected \"2.0\"");
  }
  boost::json::value* method = obj.if_contains("method");
  if (method != nullptr && method->is_string()) {
    entry.call.method = std::string(Asv(method->get_string()));
  } else {
    fail("method: expected a string");
  }
  if (boost::json::value* params = obj.if_contains("params")) {
    if (params->is_object() || params->is_array()) {
      entry.call.params = std::move(*params);
    } else {
      fail("params: expected an object or an array");
    }
  }
  for (const boost::json::key_value_pair& member : obj) {
    const boost::json::string_view key = member.key();
    if (key != "jsonrpc" && key != "method" && key != "params" && key != "id") {
      fail(absl::StrCat("unexpected member ", Quoted(Asv(key))));
      break;
    }
  }
  if (error) {
    // Invalid requests are answered even without an id (§5: id null).
    entry.error = std::move(error);
    return entry;
  }
  entry.call.notification = !has_id;
  if (absl::string_view(entry.call.method).substr(0, 4) == "rpc.") {
    // §4: reserved for rpc-internal methods and extensions; we have none.
    entry.error = Error{kMethodNotFound, absl::StrCat("method ", Quoted(entry.call.method), " is reserved"), nullptr};
  }
  return entry;
}

Incoming ParseLineOrThrow(absl::string_view line, std::size_t max_bytes) {
  absl::string_view content = line;
  if (!content.empty() && content.back() == '\n') content.remove_suffix(1);
  if (!content.empty() && content.back() == '\r') content.remove_suffix(1);
  if (content.size() > max_bytes) return SingleError(LineTooLongError(max_bytes));

  std::size_t offset = 0;
  const absl::string_view text = JsonText(content, &offset);
  if (text.empty()) return {};
  // Boost.JSON checks UTF-8 only inside strings; check the whole text so any
  // stray byte is reported the same way.
  if (const std::size_t bad = FirstInvalidUtf8(text); bad != absl::string_view::npos) {
    return SingleError(Error{kParseError, absl::StrCat("invalid UTF-8 at offset ", offset + bad), nullptr});
  }
  Error error;
  std::optional<boost::json::value> value = ParseJson(text, offset, /*allow_invalid_utf8=*/false, &error);
  if (!value) return SingleError(std::move(error));

  if (!value->is_array()) {
    Incoming in;
    in.entries.push_back(ToEntry(std::move(*value)));
    return in;
  }
  boost::json::array& requests = value->get_array();
  if (requests.empty()) return SingleError(InvalidRequest("empty batch"));
  if (requests.size() > kMaxBatch) {
    return SingleError(InvalidRequest(absl::StrCat("batch of ", requests.size(), " requests; at most ", kMaxBatch)));
  }
  Incoming in;
  in.batch = true;
  in.entries.reserve(requests.size());
  for (boost::json::value& request : requests) in.entries.push_back(ToEntry(std::move(request)));
  return in;
}

// What a reply that could not be built says instead (the id, too, may be
// what failed to serialize).
std::string FallbackReply() {
  return absl::StrCat("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":", kInternalError,
                      ",\"message\":\"reply could not be serialized\"}}");
}

std::string ReplyOrThrow(const boost::json::value& id, absl::string_view member, const std::string& payload) {
  std::string out = absl::StrCat("{\"jsonrpc\":\"2.0\",\"id\":", Serialize(id), ",\"", member,
                                 "\":", payload, "}");
  RepairUtf8(out);
  return out;
}

std::string Path(absl::string_view path, absl::string_view key) {
  if (key.size() > kMaxEcho) return absl::StrCat(path, ".", key.substr(0, kMaxEcho), "...");
  return absl::StrCat(path, ".", key);
}

Error Missing(absl::string_view path, absl::string_view key, absl::string_view expectation = "") {
  if (expectation.empty()) return InvalidParam(path, key, "required field is missing");
  return InvalidParam(path, key, absl::StrCat("required field is missing (", expectation, ")"));
}

// The member `key` of `obj`, or nullptr if absent or null (null means "not
// given" for every optional field).
const boost::json::value* Find(const boost::json::object& obj, absl::string_view key) {
  const boost::json::value* v = obj.if_contains(Bjv(key));
  return v == nullptr || v->is_null() ? nullptr : v;
}

// Every string the daemon takes ends up in argv, env or a path, where a NUL
// would silently cut it short.
bool HasNul(boost::json::string_view s) { return s.find('\0') != boost::json::string_view::npos; }

std::string IntegerExpectation(int64_t min, int64_t max) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (max == kMax) {
    if (min == kMin) return "expected an integer";
    if (min == 1) return "expected a positive integer";
    if (min == 0) return "expected a non-negative integer";
    return absl::StrCat("expected an integer >= ", min);
  }
  if (min == kMin) return absl::StrCat("expected an integer <= ", max);
  return absl::StrCat("expected an integer between ", min, " and ", max);
}

std::string NumberExpectation(double min, double max) {
  const bool low = std::isfinite(min), high = std::isfinite(max);
  if (low && high) return absl::StrCat("expected a number between ", min, " and ", max);
  if (low) return absl::StrCat("expected a number >= ", min);
  if (high) return absl::StrCat("expected a number <= ", max);
  return "expected a number";
}

}  // namespace

Error LineTooLongError(std::size_t max_bytes) {
  return Error{kLineTooLong, absl::StrCat("line longer than ", max_bytes, " bytes"), nullptr};
}

Incoming ParseLine(absl::string_view line, std::size_t max_bytes) {
  try {
    return ParseLineOrThrow(line, max_bytes);
  } catch (const std::exception& e) {
    // bad_alloc, or a Boost.JSON limit (string or array size) hit.
    return SingleError(Error{kInternalError, absl::StrCat("request could not be parsed: ", e.what()), nullptr});
  }
}

std::string Result(const boost::json::value& id, const boost::json::value& result) {
  try {
    return ReplyOrThrow(id, "result", Serialize(result));
  } catch (const std::exception&) {
    return FallbackReply();
  }
}

std::string ErrorReply(const boost::json::value& id, const Error& error) {
  try {
    std::string body = absl::StrCat("{\"code\":", error.code,
                                    ",\"message\":", boost::json::serialize(Bjv(error.message)));
    if (!error.data.is_null()) absl::StrAppend(&body, ",\"data\":", Serialize(error.data));
    body += '}';
    return ReplyOrThrow(id, "error", body);
  } catch (const std::exception&) {
    return FallbackReply();
  }
}

std::string Request(const boost::json::value& id, absl::string_view method, const boost::json::value& params) {
  try {
    std::string out = absl::StrCat("{\"jsonrpc\":\"2.0\",\"id\":", Serialize(id),
                                   ",\"method\":", boost::json::serialize(Bjv(method)));
    if (!params.is_null()) absl::StrAppend(&out, ",\"params\":", Serialize(params));
    out += '}';
    RepairUtf8(out);
    return out;
  } catch (const std::exception&) {
    return {};  // only bad_alloc gets here; the caller sees an empty line to send
  }
}

std::string Batch(const std::vector<std::string>& replies) {
  if (replies.empty()) return {};
  std::size_t size = replies.size() + 1;
  for (const std::string& r : replies) size += r.size();
  std::string out;
  out.reserve(size);
  out += '[';
  for (std::size_t i = 0; i < replies.size(); ++i) {
    if (i > 0) out += ',';
    out += replies[i];
  }
  out += ']';
  return out;
}

std::optional<boost::json::object> MatchResponse(absl::string_view line, const boost::json::value& id) {
  try {
    std::size_t offset = 0;
    const absl::string_view text = JsonText(line, &offset);
    // Log lines are the common case: skip the parse unless it can be an object.
    if (text.empty() || text.front() != '{') return std::nullopt;
    Error error;
    // A skill's bad bytes are not worth losing its answer over; replies repair
    // them (RepairUtf8).
    std::optional<boost::json::value> value = ParseJson(text, offset, /*allow_invalid_utf8=*/true, &error);
    if (!value || !value->is_object()) return std::nullopt;
    boost::json::object& obj = value->get_object();
    const boost::json::value* version = obj.if_contains("jsonrpc");
    if (version == nullptr || !version->is_string() || version->get_string() != "2.0") return std::nullopt;
    if (obj.contains("method")) return std::nullopt;  // a request or notification from the skill
    const bool has_result = obj.contains("result"), has_error = obj.contains("error");
    if (has_result == has_error) return std::nullopt;
    const boost::json::value* got = obj.if_contains("id");
    if (got == nullptr) return std::nullopt;
    // §5: a server that could not read the request's id answers with null;
    // the skill has only our request in hand, so that error is its answer.
    const bool unidentified_error = got->is_null() && has_error;
    if (*got != id && !unidentified_error) return std::nullopt;
    return std::move(obj);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

Error InvalidParam(absl::string_view path, absl::string_view key, absl::string_view problem) {
  const std::string where = key.empty() ? std::string(path) : Path(path, key);
  return Error{kInvalidParams, absl::StrCat(where, ": ", problem), nullptr};
}

Expected<const boost::json::object*> ParamsObject(const boost::json::value& params) {
  static const boost::json::object* const kEmpty = new boost::json::object();
  if (params.is_null()) return kEmpty;
  if (params.is_object()) return &params.get_object();
  return InvalidParam("params", "", "expected an object (named params)");
}

Expected<std::optional<std::string>> GetString(const boost::json::object& obj, absl::string_view key, bool required,
                                               absl::string_view path) {
  const boost::json::value* v = Find(obj, key);
  if (v == nullptr) {
    if (required) return Missing(path, key);
    return std::nullopt;
  }
  if (!v->is_string()) return InvalidParam(path, key, "expected a string");
  if (HasNul(v->get_string())) return InvalidParam(path, key, "must not contain NUL characters");
  return std::optional<std::string>(std::string(Asv(v->get_string())));
}

Expected<std::optional<int64_t>> GetInt64(const boost::json::object& obj, absl::string_view key, bool required,
                                          int64_t min, int64_t max, absl::string_view path) {
  const boost::json::value* v = Find(obj, key);
  if (v == nullptr) {
    if (required) return Missing(path, key, IntegerExpectation(min, max));
    return std::nullopt;
  }
  std::optional<int64_t> n;
  if (v->is_int64()) {
    n = v->get_int64();
  } else if (v->is_uint64()) {
    // Above INT64_MAX: out of any range we accept.
  } else if (v->is_double()) {
    // 1e3 is an integer a JSON encoder may well write; 2^63 does not fit.
    const double d = v->get_double();
    if (std::isfinite(d) && d == std::trunc(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0) {
      n = static_cast<int64_t>(d);
    }
  }
  if (!n || *n < min || *n > max) return InvalidParam(path, key, IntegerExpectation(min, max));
  return std::optional<int64_t>(*n);
}

Expected<std::optional<double>> GetDouble(const boost::json::object& obj, absl::string_view key, bool required,
                                          double min, double max, absl::string_view path) {
  const boost::json::value* v = Find(obj, key);
  if (v == nullptr) {
    if (required) return Missing(path, key, NumberExpectation(min, max));
    return std::nullopt;
  }
  if (!v->is_number()) return InvalidParam(path, key, NumberExpectation(min, max));
  const double d = v->to_number<double>();
  if (!std::isfinite(d) || d < min || d > max) return InvalidParam(path, key, NumberExpectation(min, max));
  return std::optional<double>(d);
}

Expected<std::optional<bool>> GetBool(const boost::json::object& obj, absl::string_view key, bool required,
                                      absl::string_view path) {
  const boost::json::value* v = Find(obj, key);
  if (v == nullptr) {
    if (required) return Missing(path, key);
    return std::nullopt;
  }
  if (!v->is_bool()) return InvalidParam(path, key, "expected true or false");
  return std::optional<bool>(v->get_bool());
}

Expected<std::optional<std::vector<std::string>>> GetStringArray(const boost::json::object& obj, absl::string_view key,
                                                                 bool required, absl::string_view path) {
  const boost::json::value* v = Find(obj, key);
  if (v == nullptr) {
    if (required) return Missing(path, key);
    return std::nullopt;
  }
  if (!v->is_array()) return InvalidParam(path, key, "expected an array of strings");
  const boost::json::array& array = v->get_array();
  std::vector<std::string> out;
  out.reserve(array.size());
  for (std::size_t i = 0; i < array.size(); ++i) {
    const boost::json::value& element = array[i];
    const std::string where = absl::StrCat(Path(path, key), "[", i, "]");
    if (!element.is_string()) return InvalidParam(where, "", "expected a string");
    if (HasNul(element.get_string())) return InvalidParam(where, "", "must not contain NUL characters");
    out.emplace_back(Asv(element.get_string()));
  }
  return std::optional<std::vector<std::string>>(std::move(out));
}

Expected<std::optional<std::vector<std::pair<std::string, std::string>>>> GetStringMap(
    const boost::json::object& obj, absl::string_view key, bool required, absl::string_view path) {
  const boost::json::value* v = Find(obj, key);
  if (v == nullptr) {
    if (required) return Missing(path, key);
    return std::nullopt;
  }
  if (!v->is_object()) return InvalidParam(path, key, "expected an object of strings");
  const std::string where = Path(path, key);
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(v->get_object().size());
  for (const boost::json::key_value_pair& member : v->get_object()) {
    const absl::string_view name = Asv(member.key());
    if (name.find('\0') != absl::string_view::npos) {
      return InvalidParam(where, "", "keys must not contain NUL characters");
    }
    if (!member.value().is_string()) return InvalidParam(where, name, "expected a string");
    if (HasNul(member.value().get_string())) return InvalidParam(where, name, "must not contain NUL characters");
    out.emplace_back(std::string(name), std::string(Asv(member.value().get_string())));
  }
  return std::optional<std::vector<std::pair<std::string, std::string>>>(std::move(out));
}

Expected<const boost::json::object*> GetObject(const boost::json::object& obj, absl::string_view key, bool required,
                                               absl::string_view path) {
  const boost::json::value* v = Find(obj, key);
  if (v == nullptr) {
    if (required) return Missing(path, key);
    return static_cast<const boost::json::object*>(nullptr);
  }
  if (!v->is_object()) return InvalidParam(path, key, "expected an object");
  return &v->get_object();
}

std::optional<Error> RejectUnknown(const boost::json::object& obj, std::initializer_list<absl::string_view> allowed,
                                   absl::string_view path) {
  for (const boost::json::key_value_pair& member : obj) {
    const absl::string_view key = Asv(member.key());
    bool known = false;
    for (absl::string_view a : allowed) known |= a == key;
    if (!known) return InvalidParam(path, key, "unknown field");
  }
  return std::nullopt;
}

}  // namespace cubicle::rpc
