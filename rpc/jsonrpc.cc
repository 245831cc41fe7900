#include "rpc/jsonrpc.h"

#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>

#include <cmath>
#include <exception>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/json_reader.h"

namespace cubicle::rpc {
namespace {

constexpr absl::string_view kBom = "\xEF\xBB\xBF";
constexpr absl::string_view kWhitespace = " \t\r\n";  // JSON's whitespace (RFC 8259 §2)
// Keys and method names echoed in messages are cut to this: a reply must not
// grow with what a client chose to send.
constexpr std::size_t kMaxEcho = json_read::kMaxEcho;

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

// Parses one JSON text with the depth limit, recording duplicate keys for
// ToEntry to refuse. On failure sets `*error` to a kParseError whose
// message gives the byte offset in the line.
std::optional<json_read::Parsed> ParseJson(absl::string_view text, std::size_t offset, bool allow_invalid_utf8,
                                           Error* error) {
  json_read::Parsed parsed = json_read::Parse(text, {.invalid_utf8 = allow_invalid_utf8,
                                                     .max_depth = kMaxDepth,
                                                     .duplicates = json_read::DuplicateKeys::kRecord});
  if (!parsed.ok()) {
    *error = Error{kParseError, absl::StrCat("parse error at offset ", offset + parsed.offset, ": ", parsed.error),
                   nullptr};
    return std::nullopt;
  }
  return parsed;
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

// The duplicate key recorded inside request `index` of a batch (the whole
// line when nullopt), or nullptr. At most one is recorded per request.
const json_read::DuplicateKey* DuplicateIn(const std::vector<json_read::DuplicateKey>& duplicates,
                                           std::optional<std::size_t> index) {
  for (const json_read::DuplicateKey& d : duplicates) {
    if (!index.has_value()) return &d;
    if (!d.object.empty() && d.object[0].is_index && d.object[0].index == *index) return &d;
  }
  return nullptr;
}

// Whether a duplicate key lies inside the request's params (steps from
// `from` on are the request's own), or in the request object itself.
bool InParams(const json_read::DuplicateKey& d, std::size_t from) {
  return d.object.size() > from && !d.object[from].is_index && d.object[from].key == "params";
}

// Validates one Request object (JSON-RPC 2.0 §4), consuming `v`.
// `duplicate` is a key that was given twice in it (the value kept the
// last), and `from` the number of steps of its path outside the request.
Entry ToEntry(boost::json::value&& v, const json_read::DuplicateKey* duplicate, std::size_t from) {
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
  if (duplicate != nullptr && !InParams(*duplicate, from)) {
    // Which of two ids, methods... was meant is unknowable: not a request.
    if (duplicate->object.size() == from && duplicate->key == "id") entry.call.id = nullptr;
    fail(absl::StrCat("duplicate member ", Quoted(duplicate->key)));
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
  } else if (duplicate != nullptr) {
    // The same strictness as the config's: a params object is read by
    // json_read, which would see only the last of the two values.
    entry.error = InvalidParam(json_read::FormatPath(duplicate->object, from), "",
                               absl::StrCat("duplicate key '", duplicate->key.substr(0, kMaxEcho), "'"));
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
  std::optional<json_read::Parsed> parsed = ParseJson(text, offset, /*allow_invalid_utf8=*/false, &error);
  if (!parsed) return SingleError(std::move(error));
  boost::json::value& value = parsed->value;
  const std::vector<json_read::DuplicateKey>& duplicates = parsed->duplicates;

  if (!value.is_array()) {
    Incoming in;
    in.entries.push_back(ToEntry(std::move(value), DuplicateIn(duplicates, std::nullopt), 0));
    return in;
  }
  boost::json::array& requests = value.get_array();
  if (requests.empty()) return SingleError(InvalidRequest("empty batch"));
  if (requests.size() > kMaxBatch) {
    return SingleError(InvalidRequest(absl::StrCat("batch of ", requests.size(), " requests; at most ", kMaxBatch)));
  }
  Incoming in;
  in.batch = true;
  in.entries.reserve(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    in.entries.push_back(ToEntry(std::move(requests[i]), DuplicateIn(duplicates, i), 1));
  }
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

// A params value read by json_read, its error as kInvalidParams; absent
// (or null: "not given") is nullopt, or an error when `required`.
template <typename Read>
auto Param(const boost::json::object& obj, absl::string_view key, bool required, absl::string_view path, Read read)
    -> Expected<std::optional<typename decltype(read(std::declval<const boost::json::value&>(), path))::value_type>> {
  using T = typename decltype(read(std::declval<const boost::json::value&>(), path))::value_type;
  const boost::json::value* v = FindParam(obj, key);
  if (v == nullptr) {
    if (required) return InvalidParam(path, key, "required field is missing");
    return std::optional<T>();
  }
  auto read_value = read(*v, json_read::Member(path, key));
  if (!read_value.ok()) return InvalidParams(read_value.status());
  return std::optional<T>(*std::move(read_value));
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

std::string Notification(absl::string_view method, const boost::json::value& params) {
  try {
    std::string out = absl::StrCat("{\"jsonrpc\":\"2.0\",\"method\":", boost::json::serialize(Bjv(method)));
    if (!params.is_null()) absl::StrAppend(&out, ",\"params\":", Serialize(params));
    out += '}';
    RepairUtf8(out);
    return out;
  } catch (const std::exception&) {
    return {};  // only bad_alloc gets here: nothing to send
  }
}

bool IsValidUtf8(absl::string_view s) { return FirstInvalidUtf8(s) == absl::string_view::npos; }

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

namespace {

// `line` as a JSON-RPC 2.0 object a skill wrote (a BOM, CRLF and
// whitespace tolerated; bad UTF-8 repaired later, by the replies), or
// nullopt for anything else. Log lines, the common case, are not parsed.
std::optional<boost::json::object> SkillJsonRpcObject(absl::string_view line) {
  std::size_t offset = 0;
  const absl::string_view text = JsonText(line, &offset);
  if (text.empty() || text.front() != '{') return std::nullopt;
  Error error;
  std::optional<json_read::Parsed> parsed = ParseJson(text, offset, /*allow_invalid_utf8=*/true, &error);
  if (!parsed || !parsed->value.is_object()) return std::nullopt;
  boost::json::object& obj = parsed->value.get_object();
  const boost::json::value* version = obj.if_contains("jsonrpc");
  if (version == nullptr || !version->is_string() || version->get_string() != "2.0") return std::nullopt;
  return std::move(obj);
}

}  // namespace

std::optional<boost::json::object> MatchResponse(absl::string_view line, const boost::json::value& id) {
  try {
    std::optional<boost::json::object> parsed = SkillJsonRpcObject(line);
    if (!parsed.has_value()) return std::nullopt;
    boost::json::object& obj = *parsed;
    if (obj.contains("method")) return std::nullopt;  // a request or notification from the skill
    const bool has_result = obj.contains("result"), has_error = obj.contains("error");
    if (has_result == has_error) return std::nullopt;
    const boost::json::value* got = obj.if_contains("id");
    if (got == nullptr) return std::nullopt;
    // §5: a server that could not read the request's id answers with null;
    // the skill has only our request in hand, so that error is its answer.
    const bool unidentified_error = got->is_null() && has_error;
    if (*got != id && !unidentified_error) return std::nullopt;
    return parsed;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<SkillMessage> ParseSkillMessage(absl::string_view line) {
  try {
    std::optional<boost::json::object> obj = SkillJsonRpcObject(line);
    if (!obj.has_value()) return std::nullopt;
    const boost::json::value* method = obj->if_contains("method");
    if (method == nullptr || !method->is_string()) return std::nullopt;
    const bool request = obj->contains("id");
    return SkillMessage{request, *std::move(obj)};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

Error InvalidParam(absl::string_view path, absl::string_view key, absl::string_view problem) {
  const std::string where = key.empty() ? std::string(path) : json_read::Member(path, key);
  return Error{kInvalidParams, absl::StrCat(where, ": ", problem), nullptr};
}

std::string ReplyTo(const Call& call, const Expected<boost::json::value>& result) {
  if (call.notification) return "";
  return result.ok() ? Result(call.id, result.value()) : ErrorReply(call.id, result.error());
}

Error InvalidParams(const absl::Status& status) {
  return Error{kInvalidParams, std::string(status.message()), nullptr};
}

Error OutOfResources(const absl::Status& status) {
  static constexpr std::pair<const char*, const char*> kResources[] = {
      {"EMFILE", "file descriptors"}, {"ENFILE", "file descriptors on this host"},
      {"ENOMEM", "memory"},           {"EAGAIN", "processes or threads"},
      {"ENOSPC", "space"},            {"EUSERS", "user namespaces"}};
  const std::string message(status.message());
  for (const auto& [name, what] : kResources) {
    if (message.find(absl::StrCat(": ", name)) == std::string::npos) continue;
    return Error{kInternalError, absl::StrCat("out of ", what, " (", name, "): ", message),
                 boost::json::object{{"resource", name}}};
  }
  return Error{kInternalError, absl::StrCat("out of resources: ", message), nullptr};
}

const boost::json::value* FindParam(const boost::json::object& obj, absl::string_view key) {
  const boost::json::value* v = obj.if_contains(Bjv(key));
  return v == nullptr || v->is_null() ? nullptr : v;
}

Expected<const boost::json::object*> ParamsObject(const boost::json::value& params) {
  static const boost::json::object* const kEmpty = new boost::json::object();
  if (params.is_null()) return kEmpty;
  if (params.is_object()) return &params.get_object();
  return InvalidParam("params", "", "expected an object (named params)");
}

Expected<std::optional<std::string>> GetString(const boost::json::object& obj, absl::string_view key, bool required,
                                               absl::string_view path) {
  return Param(obj, key, required, path, json_read::String);
}

Expected<std::optional<int64_t>> GetInt64(const boost::json::object& obj, absl::string_view key, bool required,
                                          int64_t min, int64_t max, absl::string_view path) {
  return Param(obj, key, required, path, [&](const boost::json::value& v, absl::string_view at) {
    return json_read::Integer(v, at, min, max);
  });
}

Expected<std::optional<double>> GetDouble(const boost::json::object& obj, absl::string_view key, bool required,
                                          double min, double max, absl::string_view path) {
  return Param(obj, key, required, path, [&](const boost::json::value& v, absl::string_view at) {
    return json_read::Number(v, at, min, max);
  });
}

Expected<std::optional<bool>> GetBool(const boost::json::object& obj, absl::string_view key, bool required,
                                      absl::string_view path) {
  return Param(obj, key, required, path, json_read::Bool);
}

Expected<std::optional<std::vector<std::string>>> GetStringArray(const boost::json::object& obj, absl::string_view key,
                                                                 bool required, absl::string_view path) {
  return Param(obj, key, required, path, json_read::StringArray);
}

Expected<std::optional<std::vector<std::pair<std::string, std::string>>>> GetStringMap(
    const boost::json::object& obj, absl::string_view key, bool required, absl::string_view path) {
  return Param(obj, key, required, path, json_read::StringMap);
}

Expected<const boost::json::object*> GetObject(const boost::json::object& obj, absl::string_view key, bool required,
                                               absl::string_view path) {
  const boost::json::value* v = FindParam(obj, key);
  if (v == nullptr) {
    if (required) return InvalidParam(path, key, "required field is missing");
    return static_cast<const boost::json::object*>(nullptr);
  }
  if (!v->is_object()) return InvalidParams(json_read::WrongType(*v, json_read::Member(path, key), "an object"));
  return &v->get_object();
}

std::optional<Error> RejectUnknown(const boost::json::object& obj, std::initializer_list<absl::string_view> allowed,
                                   absl::string_view path) {
  absl::Status known = json_read::CheckKeys(obj, path, allowed);
  if (known.ok()) return std::nullopt;
  return InvalidParams(known);
}

}  // namespace cubicle::rpc
