// The REST face of the HTTP front (docs/protocol.md, "REST"): each route is
// one JSON-RPC method with params made from its path, query and body, and
// each JSON-RPC reply an HTTP answer. Pure functions: the front
// (rpc/http_front.cc) does the I/O.
#pragma once

#include <optional>
#include <string>
#include <variant>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "absl/strings/string_view.h"

namespace cubicle::rpc {

// How a route's reply is shaped.
enum class RestShape {
  kJson,     // the result, 200
  kCreated,  // the result, 201 when it made something ("created": true), else 200
  kBytes,    // files.get: the file's bytes, application/octet-stream
  kStream,   // exec.start, then exec.follow's output as NDJSON lines
};

struct RestCall {
  std::string method;  // the JSON-RPC method (exec.start for kStream)
  boost::json::object params;
  RestShape shape = RestShape::kJson;
  // The method a key's scope is checked against: session.exec for a
  // streamed execution, which is one to its caller.
  std::string scope_method;
};

// A route that matched no call: the HTTP status and why (`allow`: the
// methods the path takes, for 405).
struct RestRefusal {
  int status = 404;
  std::string message;
  std::string allow;
};

// The call for `verb` (an HTTP method name) on `target` (path and query)
// with `body`; `stream` when the client asked for NDJSON.
std::variant<RestCall, RestRefusal> MatchRest(absl::string_view verb, absl::string_view target, absl::string_view body,
                                              bool stream);

// Whether `path` (no query) is the REST tree's.
bool IsRestPath(absl::string_view path);

// The HTTP status for a JSON-RPC error code.
int HttpStatusOf(int64_t code);

// An HTTP answer made from a JSON-RPC reply line.
struct RestAnswer {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
};
RestAnswer AnswerOf(RestShape shape, absl::string_view reply_line);

// One NDJSON line of a streamed execution: an exec.output notification's
// piece as {"stream","offset","data"|"data_base64"}, or the end (exec.follow's
// reply) as {"exec_id","state","result"} or {"error"}. nullopt for a line
// that is neither.
std::optional<std::string> StreamLineOf(absl::string_view line);

// "%41b" -> "Ab"; nullopt for a malformed escape or an escaped NUL.
std::optional<std::string> PercentDecode(absl::string_view text);

}  // namespace cubicle::rpc
