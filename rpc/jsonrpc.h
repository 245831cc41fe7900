// JSON-RPC 2.0 codec for cubicle's daemon and for the skill protocol: one JSON
// value per line, UTF-8, the MCP stdio convention (DESIGN §6). Pure functions
// over strings, no I/O; nothing here throws (Boost.JSON's exceptions, and
// bad_alloc, become JSON-RPC errors).
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cubicle::rpc {

// Error codes. The standard ones are JSON-RPC 2.0 §5.1; the server ones use
// its reserved range -32000..-32099 and are listed in docs/protocol.md.
inline constexpr int kParseError = -32700;      // the line is not JSON (or not UTF-8, or too deep)
inline constexpr int kInvalidRequest = -32600;  // JSON, but not a valid Request object
inline constexpr int kMethodNotFound = -32601;  // no such method (or a reserved "rpc." name)
inline constexpr int kInvalidParams = -32602;   // params do not fit the method; message names the field
inline constexpr int kInternalError = -32603;   // a bug or resource exhaustion in the daemon
// Server codes.
// The concurrency limit is reached and the request queue is full; retry later.
inline constexpr int kBusy = -32000;
// The sandbox for the request could not be set up (namespaces, mounts,
// cgroup, seccomp...); the message names the failing step and errno.
inline constexpr int kSetupFailed = -32001;
// A requested limit (memory, time, pids, output...) is above the ceiling in
// the daemon's configuration; requests may only tighten limits.
inline constexpr int kLimitExceeded = -32002;
// The idempotency key of an exec.start was already used within the last 60 s;
// no second execution was started.
inline constexpr int kDuplicateKey = -32003;
// The execution id or pool (profile) named in the request is unknown.
inline constexpr int kNotFound = -32004;
// The daemon is draining after SIGTERM and accepts no new work.
inline constexpr int kShuttingDown = -32005;
// The request line is longer than the configured maximum; it was not parsed.
inline constexpr int kLineTooLong = -32006;
// skill.call: the skill ended, timed out or wrote an over-long line without
// answering; data holds reason, status and the tails of stderr and stdout.
inline constexpr int kSkillFailed = -32007;
// The caller's key or uid entry does not allow this method or profile
// (rpc/api_keys.h); nothing ran.
inline constexpr int kForbidden = -32008;
// A skill's `requires` are not met by the packages of the environment (or
// the host's interpreter) it would run with; data lists each unmet one.
// Nothing ran.
inline constexpr int kRequirementsNotMet = -32009;
// skill.call: the skill is denied by its profile's static policy
// (docs/skills.md, "Static policy"); data holds the violations. Nothing ran.
inline constexpr int kStaticPolicyDenied = -32010;

// Nesting deeper than this is a parse error: a hostile `[[[[...` must cost a
// bounded amount of memory and never recurse deeply anywhere downstream.
inline constexpr std::size_t kMaxDepth = 64;
// A larger batch is one kInvalidRequest (id null): each element of `[1,1,...]`
// costs 2 bytes in and ~90 bytes of error reply out, so the batch size, not
// just the line length, bounds what one line can make the daemon hold.
inline constexpr std::size_t kMaxBatch = 1024;

struct Error {
  int code = kInternalError;
  std::string message;
  boost::json::value data;  // null when absent; then the reply has no "data"
};

// One request, validated per JSON-RPC 2.0 §4.
struct Call {
  boost::json::value id;      // a string, an integer or null; null for a notification
  bool notification = false;  // the request had no "id" member: never answer it
  std::string method;
  boost::json::value params;  // an object or an array; null when absent
};

// One element of a request line. Without `error`, `call` is valid: dispatch
// it. With `error`, answer `ErrorReply(call.id, *error)` unless
// `call.notification` (a well-formed notification to a reserved "rpc."
// method, or one whose params hold a duplicate key, is both); `call.id` is
// then the request's id if it could be read, else null, and the other
// fields of `call` are whatever could be read.
struct Entry {
  Call call;
  std::optional<Error> error;

  // Whether this entry produces a reply: every call and every invalid
  // request, never a well-formed notification.
  bool NeedsReply() const { return !call.notification; }
};

// The requests of one line. `batch` is true for a non-empty JSON array: the
// replies then go out together as one array (see Batch). A line that is not
// JSON, is too long, or is an empty or oversized (kMaxBatch) array is a single
// error entry with id null and `batch` false. A blank line (only whitespace) has no entries: send
// nothing.
struct Incoming {
  bool batch = false;
  std::vector<Entry> entries;
};

// Parses one line (without or with its '\n'). Tolerates a UTF-8 BOM at its
// start, a trailing '\r' and surrounding whitespace. A line longer than
// `max_bytes` is answered with kLineTooLong without being parsed. A key
// given twice in one object is refused, as in the config: inside params
// with kInvalidParams naming it ("params.limits: duplicate key 'memory'"),
// elsewhere in a request with kInvalidRequest.
Incoming ParseLine(absl::string_view line, std::size_t max_bytes);

// The error for a line the reader had to cut off at `max_bytes`.
Error LineTooLongError(std::size_t max_bytes);

// Replies: one compact JSON object each, no newline. Strings that are not
// valid UTF-8 are repaired (U+FFFD) so every reply is a valid line.
std::string Result(const boost::json::value& id, const boost::json::value& result);
std::string ErrorReply(const boost::json::value& id, const Error& error);
// A request to send (skill.call writes one to the skill's stdin). `params`
// must be an object, an array or null (then omitted).
std::string Request(const boost::json::value& id, absl::string_view method, const boost::json::value& params);
// The replies to a batch as one array; the empty string for no replies
// (a batch of notifications): send nothing.
std::string Batch(const std::vector<std::string>& replies);
// A notification (no id) to send: the MCP server's progress, for one.
std::string Notification(absl::string_view method, const boost::json::value& params);

// Whether `s` is valid UTF-8 (what the replies above repair when not).
bool IsValidUtf8(absl::string_view s);

// The skill protocol: a skill's stdout carries log lines and, eventually, its
// response. Returns the response object (with "jsonrpc":"2.0", "id" equal to
// `id`, and exactly one of "result" and "error") when `line` is that response,
// and nullopt for anything else: non-JSON text, other ids, requests and
// notifications, malformed responses. Tolerates a BOM, CRLF and whitespace.
std::optional<boost::json::object> MatchResponse(absl::string_view line, const boost::json::value& id);

// A message a skill wrote that is not a response: a notification (an
// object with "jsonrpc": "2.0" and a string "method", and no "id") or a
// request ("method" and an "id"). Anything else (log lines, responses):
// nullopt.
struct SkillMessage {
  bool request = false;  // else a notification
  boost::json::object object;
};
std::optional<SkillMessage> ParseSkillMessage(absl::string_view line);

// A value or the Error that prevented it; what the params helpers and method
// handlers return.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(Error error) : v_(std::in_place_index<1>, std::move(error)) {}
  template <typename U = T>
    requires(std::is_constructible_v<T, U &&> && !std::is_same_v<std::remove_cvref_t<U>, Error> &&
             !std::is_same_v<std::remove_cvref_t<U>, Expected>)
  Expected(U&& value) : v_(std::in_place_index<0>, std::forward<U>(value)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

// The reply line to `call`: its result or its error; "" for a
// notification, which gets none.
std::string ReplyTo(const Call& call, const Expected<boost::json::value>& result);

// Runs `f` (which returns an Expected), turning what it throws (Boost.JSON
// throws on allocation failure and a few misuses) into kInternalError:
// nothing may cross a method's edge.
template <typename F>
auto Guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return Error{kInternalError, e.what(), nullptr};
  }
}

// Params helpers for method handlers. Each reads `key` of `obj`, whose path in
// messages is `path` ("params", or "params.limits" for a nested object), by
// the rules of base/json_reader.h — the config's. Absent (or null) optional
// fields are nullopt; absent required ones and values of the wrong type are
// kInvalidParams errors whose message names the field:
// "params.timeout_ms: expected a whole number, got '5'".

// The params of a method that takes named params: an object (null counts as
// an empty one); an array is kInvalidParams. The pointer lives as long as
// `params` (or forever, for the empty object).
Expected<const boost::json::object*> ParamsObject(const boost::json::value& params);

// The member `key` of `obj`, or nullptr if absent or null (null means "not
// given" for every field of params).
const boost::json::value* FindParam(const boost::json::object& obj, absl::string_view key);

Expected<std::optional<std::string>> GetString(const boost::json::object& obj, absl::string_view key, bool required,
                                               absl::string_view path = "params");
// A whole number in [min, max], however spelt (1e3 and 1000.0 are 1000).
Expected<std::optional<int64_t>> GetInt64(const boost::json::object& obj, absl::string_view key, bool required,
                                          int64_t min = std::numeric_limits<int64_t>::min(),
                                          int64_t max = std::numeric_limits<int64_t>::max(),
                                          absl::string_view path = "params");
// Any finite number in [min, max].
Expected<std::optional<double>> GetDouble(const boost::json::object& obj, absl::string_view key, bool required,
                                          double min = -std::numeric_limits<double>::infinity(),
                                          double max = std::numeric_limits<double>::infinity(),
                                          absl::string_view path = "params");
Expected<std::optional<bool>> GetBool(const boost::json::object& obj, absl::string_view key, bool required,
                                      absl::string_view path = "params");
Expected<std::optional<std::vector<std::string>>> GetStringArray(const boost::json::object& obj, absl::string_view key,
                                                                 bool required, absl::string_view path = "params");
// An object of string values ({"NAME": "value"}), in document order.
Expected<std::optional<std::vector<std::pair<std::string, std::string>>>> GetStringMap(
    const boost::json::object& obj, absl::string_view key, bool required, absl::string_view path = "params");
// A nested object; nullptr when absent and optional. Lives as long as `obj`.
Expected<const boost::json::object*> GetObject(const boost::json::object& obj, absl::string_view key, bool required,
                                               absl::string_view path = "params");
// kInvalidParams naming the first key of `obj` not in `allowed`.
std::optional<Error> RejectUnknown(const boost::json::object& obj, std::initializer_list<absl::string_view> allowed,
                                   absl::string_view path = "params");
// A kInvalidParams error about `path`.`key`, for checks the helpers do not do.
Error InvalidParam(absl::string_view path, absl::string_view key, absl::string_view problem);
// A json_read error (its message names the path) as kInvalidParams.
Error InvalidParams(const absl::Status& status);
// The daemon ran out of something — file descriptors, memory, processes —
// (`status` from ErrnoStatus: "pipe2(stdout): EMFILE: ..."): kInternalError
// naming the resource ("out of file descriptors (EMFILE): ..."), with
// data {"resource": "EMFILE"}. Never kBusy, which is the queue's cap alone.
Error OutOfResources(const absl::Status& status);

}  // namespace cubicle::rpc

// `lhs = value` of an Expected, or return its Error from the enclosing
// function (which returns an Expected or an Error).
#define CUBICLE_RPC_CONCAT_INNER_(a, b) a##b
#define CUBICLE_RPC_CONCAT_(a, b) CUBICLE_RPC_CONCAT_INNER_(a, b)
#define CUBICLE_RPC_ASSIGN_OR_RETURN(lhs, expr) \
  CUBICLE_RPC_ASSIGN_OR_RETURN_IMPL_(CUBICLE_RPC_CONCAT_(_rpc_expected_, __LINE__), lhs, expr)
#define CUBICLE_RPC_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                       \
  if (!tmp.ok()) return std::move(tmp).error();            \
  lhs = std::move(tmp).value()
