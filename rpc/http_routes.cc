#include "rpc/http_routes.h"

#include <map>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "rpc/jsonrpc.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

RestRefusal NotAllowed(const char* allow) {
  return RestRefusal{405, absl::StrCat("only ", allow, " here"), allow};
}

RestRefusal BadRequest(std::string why) { return RestRefusal{400, std::move(why), ""}; }

struct Target {
  std::vector<std::string> segments;  // decoded, after "sessions"
  std::map<std::string, std::string> query;
};

std::optional<Target> ParseTarget(absl::string_view target, std::string* why) {
  const size_t q = target.find('?');
  absl::string_view path = target.substr(0, q);
  Target out;
  std::vector<absl::string_view> raw = absl::StrSplit(path.substr(1), '/');  // path starts with "/sessions"
  for (size_t i = 1; i < raw.size(); ++i) {
    std::optional<std::string> segment = PercentDecode(raw[i]);
    if (!segment.has_value() || segment->find('/') != std::string::npos) {
      *why = absl::StrCat("the path segment '", raw[i], "' is not a valid escape (or hides a '/')");
      return std::nullopt;
    }
    out.segments.push_back(*std::move(segment));
  }
  if (q != absl::string_view::npos) {
    for (absl::string_view pair : absl::StrSplit(target.substr(q + 1), '&', absl::SkipEmpty())) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
      std::optional<std::string> k = PercentDecode(kv.first), v = PercentDecode(kv.second);
      if (!k.has_value() || !v.has_value()) {
        *why = absl::StrCat("the query '", pair, "' is not a valid escape");
        return std::nullopt;
      }
      out.query[*k] = *v;
    }
  }
  return out;
}

// A query flag: "true"/"1" or "false"/"0"; nullopt when absent; a refusal
// for anything else.
std::variant<std::optional<bool>, RestRefusal> Flag(const Target& t, const char* name) {
  auto it = t.query.find(name);
  if (it == t.query.end()) return std::optional<bool>();
  if (it->second == "true" || it->second == "1") return std::optional<bool>(true);
  if (it->second == "false" || it->second == "0") return std::optional<bool>(false);
  return BadRequest(absl::StrCat("query ", name, ": true or false expected"));
}

std::variant<json::object, RestRefusal> BodyObject(absl::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == absl::string_view::npos) return json::object();
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec || !v.is_object()) return BadRequest("the body must be a JSON object (the method's params)");
  return std::move(v.as_object());
}

// Adds the query's flags named in `names` to `params`.
std::optional<RestRefusal> AddFlags(const Target& t, std::initializer_list<const char*> names, json::object* params) {
  for (const char* name : names) {
    auto flag = Flag(t, name);
    if (auto* refused = std::get_if<RestRefusal>(&flag)) return *refused;
    if (auto value = std::get<std::optional<bool>>(flag)) (*params)[name] = *value;
  }
  return std::nullopt;
}

std::variant<RestCall, RestRefusal> SessionsRoot(absl::string_view verb, absl::string_view body) {
  if (verb == "GET") return RestCall{"session.list", {}, RestShape::kJson, "session.list"};
  if (verb != "POST") return NotAllowed("GET, POST");
  auto params = BodyObject(body);
  if (auto* refused = std::get_if<RestRefusal>(&params)) return *refused;
  return RestCall{"session.create", std::get<json::object>(std::move(params)), RestShape::kCreated, "session.create"};
}

std::variant<RestCall, RestRefusal> OneSession(absl::string_view verb, const Target& t) {
  json::object params{{"session", t.segments[0]}};
  if (verb == "GET") return RestCall{"session.get", params, RestShape::kJson, "session.get"};
  if (verb != "DELETE") return NotAllowed("GET, DELETE");
  if (auto refused = AddFlags(t, {"archive"}, &params)) return *refused;
  return RestCall{"session.destroy", params, RestShape::kJson, "session.destroy"};
}

std::variant<RestCall, RestRefusal> Exec(absl::string_view verb, const Target& t, absl::string_view body,
                                         bool stream) {
  if (verb != "POST") return NotAllowed("POST");
  auto parsed = BodyObject(body);
  if (auto* refused = std::get_if<RestRefusal>(&parsed)) return *refused;
  json::object params = std::get<json::object>(std::move(parsed));
  if (const json::value* s = params.if_contains("session"); s != nullptr && *s != json::value(t.segments[0])) {
    return BadRequest("the body names another session than the path");
  }
  params["session"] = t.segments[0];
  if (!stream) return RestCall{"session.exec", std::move(params), RestShape::kJson, "session.exec"};
  // A session.exec to its caller, run as a managed execution so that its
  // output can be followed.
  return RestCall{"exec.start", std::move(params), RestShape::kStream, "session.exec"};
}

std::variant<RestCall, RestRefusal> Files(absl::string_view verb, const Target& t, absl::string_view body) {
  json::object params{{"session", t.segments[0]}};
  // /sessions/ID/files or /sessions/ID/files/: the listing.
  const bool listing = t.segments.size() == 2 || (t.segments.size() == 3 && t.segments[2].empty());
  if (listing) {
    if (verb != "GET") return NotAllowed("GET");
    if (auto it = t.query.find("path"); it != t.query.end()) params["path"] = it->second;
    if (auto refused = AddFlags(t, {"recursive"}, &params)) return *refused;
    return RestCall{"files.list", std::move(params), RestShape::kJson, "files.list"};
  }
  params["path"] = absl::StrJoin(t.segments.begin() + 2, t.segments.end(), "/");
  if (verb == "GET") return RestCall{"files.get", std::move(params), RestShape::kBytes, "files.get"};
  if (verb == "DELETE") {
    if (auto refused = AddFlags(t, {"recursive", "wait"}, &params)) return *refused;
    return RestCall{"files.delete", std::move(params), RestShape::kJson, "files.delete"};
  }
  if (verb != "PUT") return NotAllowed("GET, PUT, DELETE");
  params["data"] = absl::Base64Escape(body);
  if (auto refused = AddFlags(t, {"overwrite", "wait"}, &params)) return *refused;
  if (auto it = t.query.find("mode"); it != t.query.end()) {
    // Octal, as chmod takes it.
    uint32_t mode = 0;
    if (it->second.empty() || it->second.size() > 4 || it->second.find_first_not_of("01234567") != std::string::npos) {
      return BadRequest("query mode: an octal mode such as 0644 expected");
    }
    mode = static_cast<uint32_t>(std::stoul(it->second, nullptr, 8));
    params["mode"] = mode;
  }
  return RestCall{"files.put", std::move(params), RestShape::kJson, "files.put"};
}

json::value ErrorObject(const json::object& error) {
  json::object out{{"code", error.contains("code") ? error.at("code") : json::value(kInternalError)},
                   {"message", error.contains("message") ? error.at("message") : json::value("")}};
  if (const json::value* data = error.if_contains("data")) out["data"] = *data;
  return out;
}

std::string ErrorBody(int64_t code, const std::string& message) {
  return json::serialize(json::object{{"error", json::object{{"code", code}, {"message", message}}}});
}

}  // namespace

bool IsRestPath(absl::string_view path) { return path == "/sessions" || absl::StartsWith(path, "/sessions/"); }

std::variant<RestCall, RestRefusal> MatchRest(absl::string_view verb, absl::string_view target, absl::string_view body,
                                              bool stream) {
  std::string why;
  std::optional<Target> t = ParseTarget(target, &why);
  if (!t.has_value()) return BadRequest(why);
  if (t->segments.empty()) return SessionsRoot(verb, body);
  if (t->segments[0].empty()) return BadRequest("a session key is required: /sessions/KEY");
  if (t->segments.size() == 1) return OneSession(verb, *t);
  if (t->segments[1] == "exec" && t->segments.size() == 2) return Exec(verb, *t, body, stream);
  if (t->segments[1] == "files") return Files(verb, *t, body);
  return RestRefusal{404, absl::StrCat("no endpoint ", target.substr(0, target.find('?'))), ""};
}

int HttpStatusOf(int64_t code) {
  switch (code) {
    case kParseError:
    case kInvalidRequest:
    case kInvalidParams:
      return 400;
    case kForbidden:
    case kStaticPolicyDenied:
      return 403;
    case kMethodNotFound:
    case kNotFound:
      return 404;
    case kBusy:
    case kDuplicateKey:
      return 409;
    case kLineTooLong:
      return 413;
    case kLimitExceeded:
    case kRequirementsNotMet:
      return 422;
    case kSkillFailed:
      return 502;
    case kShuttingDown:
      return 503;
    default:
      return 500;
  }
}

RestAnswer AnswerOf(RestShape shape, absl::string_view reply_line) {
  boost::system::error_code ec;
  json::value reply = json::parse(json::string_view(reply_line.data(), reply_line.size()), ec);
  if (ec || !reply.is_object()) return RestAnswer{500, ErrorBody(kInternalError, "the daemon's reply is not JSON")};
  const json::object& r = reply.as_object();
  if (const json::value* error = r.if_contains("error"); error != nullptr && error->is_object()) {
    json::value e = ErrorObject(error->as_object());
    const int status = HttpStatusOf(e.at("code").is_int64() ? e.at("code").as_int64() : kInternalError);
    return RestAnswer{status, json::serialize(json::object{{"error", std::move(e)}})};
  }
  const json::value* result = r.if_contains("result");
  if (result == nullptr) return RestAnswer{500, ErrorBody(kInternalError, "the daemon's reply has no result")};
  if (shape == RestShape::kBytes) {
    const json::value* data = result->is_object() ? result->as_object().if_contains("data") : nullptr;
    std::string bytes;
    if (data == nullptr || !data->is_string() || !absl::Base64Unescape(std::string(data->as_string()), &bytes)) {
      return RestAnswer{500, ErrorBody(kInternalError, "files.get's reply has no data")};
    }
    return RestAnswer{200, std::move(bytes), "application/octet-stream"};
  }
  int status = 200;
  if (shape == RestShape::kCreated && result->is_object()) {
    const json::value* created = result->as_object().if_contains("created");
    if (created != nullptr && created->is_bool() && created->as_bool()) status = 201;
  }
  return RestAnswer{status, json::serialize(*result)};
}

std::optional<std::string> StreamLineOf(absl::string_view line) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(line.data(), line.size()), ec);
  if (ec || !v.is_object()) return std::nullopt;
  const json::object& o = v.as_object();
  if (const json::value* method = o.if_contains("method")) {
    if (*method != json::value("exec.output") || !o.contains("params") || !o.at("params").is_object()) {
      return std::nullopt;
    }
    json::object piece = o.at("params").as_object();
    piece.erase("exec_id");
    return json::serialize(piece);
  }
  if (const json::value* error = o.if_contains("error"); error != nullptr && error->is_object()) {
    return json::serialize(json::object{{"error", ErrorObject(error->as_object())}});
  }
  const json::value* status = o.if_contains("result");
  if (status == nullptr || !status->is_object()) return std::nullopt;
  const json::object& s = status->as_object();
  json::object end{{"exec_id", s.contains("exec_id") ? s.at("exec_id") : nullptr},
                   {"state", s.contains("state") ? s.at("state") : nullptr}};
  const json::value* result = s.if_contains("result");
  if (result != nullptr && result->is_object() && result->as_object().contains("error")) {
    end["error"] = result->as_object().at("error");  // failed as a request would have
  } else if (result != nullptr && !result->is_null()) {
    end["result"] = *result;
  } else {
    end["error"] = json::object{{"code", kShuttingDown}, {"message", "the execution ended without running"}};
  }
  return json::serialize(end);
}

std::optional<std::string> PercentDecode(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    int value = 0;
    for (size_t k = 1; k <= 2; ++k) {
      const char c = text[i + k];
      const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (digit < 0) return std::nullopt;
      value = value * 16 + digit;
    }
    if (value == 0) return std::nullopt;
    out.push_back(static_cast<char>(value));
    i += 2;
  }
  return out;
}

}  // namespace cubicle::rpc
