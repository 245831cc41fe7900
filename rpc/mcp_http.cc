#include "rpc/mcp_http.h"

#include <sys/random.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>
#include <vector>

#include <boost/json/serialize.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "rpc/mcp_tools.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

constexpr char kSessionHeader[] = "Mcp-Session-Id";
using Headers = HttpRouteAnswer::Headers;

// 32 bytes from the kernel's CSPRNG, in hex: a session id no one guesses.
std::string NewSessionId() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

std::string Header(const HttpRouteRequest& r, const char* lower_name) {
  auto it = r.headers.find(lower_name);
  return it == r.headers.end() ? std::string() : it->second;
}

// The front's own refusals: a JSON-RPC error without an id, as the
// transport allows.
void Refuse(const std::shared_ptr<HttpRouteAnswer>& answer, int status, int code, const std::string& why,
            Headers headers = {}) {
  answer->Respond(status, "application/json", ErrorReply(nullptr, Error{code, why, nullptr}), std::move(headers));
}

// The client must take both kinds of answer (2025-06-18, "Sending
// Messages to the Server"); "*/*" takes them too.
bool AcceptsBoth(const std::string& accept) {
  const std::string a = absl::AsciiStrToLower(accept);
  if (absl::StrContains(a, "*/*")) return true;
  return absl::StrContains(a, "application/json") && absl::StrContains(a, "text/event-stream");
}

bool AsksForAVersion(const Call& initialize) {
  const json::object* params = initialize.params.if_object();
  const json::value* version = params == nullptr ? nullptr : params->if_contains("protocolVersion");
  return version != nullptr && version->is_string();
}

// A browser's request from a page of another site (the spec's DNS
// rebinding warning: such a page may reach a server on loopback) is
// refused; a page served from loopback itself, and any client that is not
// a browser (no Origin), are let through.
bool FromAllowedOrigin(const std::string& origin) {
  if (origin.empty()) return true;
  absl::string_view rest = origin;
  if (!absl::ConsumePrefix(&rest, "http://") && !absl::ConsumePrefix(&rest, "https://")) return false;
  rest = rest.substr(0, rest.find('/'));
  const size_t colon = rest.rfind(':');
  if (colon != absl::string_view::npos && rest.find(']', colon) == absl::string_view::npos) rest = rest.substr(0, colon);
  return rest == "localhost" || rest == "127.0.0.1" || rest == "[::1]";
}

}  // namespace

// One MCP session, and what is going on in it: the requests not answered
// yet, and when it was last used (the idle sweep's clock).
struct McpHttp::Entry {
  std::shared_ptr<McpSession> session;
  std::string key_name;  // the key that made it; "" without keys
  std::atomic<int> active{0};
  std::atomic<int64_t> last_used_ms{absl::ToUnixMillis(absl::Now())};

  void Touch() { last_used_ms = absl::ToUnixMillis(absl::Now()); }
};

namespace {

// Where one POSTed request's answers go: its reply as application/json,
// or — when progress may come first — every message as an SSE event, then
// the end of the stream. A request cancelled unanswered gets 202 (JSON),
// or its stream just ends.
class HttpMcpOutput : public McpOutput {
 public:
  HttpMcpOutput(std::shared_ptr<HttpRouteAnswer> answer, bool sse, Headers headers,
                std::shared_ptr<McpHttp::Entry> entry)
      : answer_(std::move(answer)), sse_(sse), headers_(std::move(headers)), entry_(std::move(entry)) {
    ++entry_->active;
  }
  ~HttpMcpOutput() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!replied_) {
        if (started_) {
          answer_->EndStream();
        } else {
          answer_->Respond(202, "", "", headers_);
        }
      }
    }
    entry_->Touch();
    --entry_->active;
  }
  void Notify(std::string line) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!sse_ || replied_) return;  // a JSON answer carries the reply alone
    Event(line);
  }
  void Reply(std::string line) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (replied_) return;
    replied_ = true;
    if (!sse_) return answer_->Respond(200, "application/json", std::move(line), headers_);
    Event(line);
    answer_->EndStream();
  }

 private:
  void Event(const std::string& line) {
    if (!started_) answer_->StartStream("text/event-stream", headers_);
    started_ = true;
    answer_->StreamPiece(absl::StrCat("event: message\ndata: ", line, "\n\n"));
  }

  std::mutex mu_;
  std::shared_ptr<HttpRouteAnswer> answer_;
  const bool sse_;
  const Headers headers_;
  std::shared_ptr<McpHttp::Entry> entry_;
  bool started_ = false;
  bool replied_ = false;
};

// A notification or a response: nothing goes back (202 is sent at once).
class Discard : public McpOutput {
 public:
  void Notify(std::string) override {}
  void Reply(std::string) override {}
};

}  // namespace

McpHttp::McpHttp(boost::asio::io_context& io, const McpConfig& config, McpOptions options, Daemon* daemon,
                 std::function<void(const std::string&)> warn)
    : sweep_(io),
      config_(config),
      options_(std::move(options)),
      daemon_(InProcessMcpLink(daemon, gate_)),
      profile_of_([daemon](const std::string& method, const json::value& params) {
        return daemon->ProfileOf(method, params);
      }),
      warn_(std::move(warn)) {}

void McpHttp::Start() { Sweep(); }

void McpHttp::Stop() {
  std::map<std::string, std::shared_ptr<Entry>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    dropped.swap(sessions_);
  }
  sweep_.cancel();
  gate_->Close();
}

size_t McpHttp::sessions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

void McpHttp::Serve(HttpRouteRequest request, std::shared_ptr<HttpRouteAnswer> answer) {
  if (!FromAllowedOrigin(Header(request, "origin"))) {
    return Refuse(answer, 403, kInvalidRequest,
                  absl::StrCat("Forbidden: Origin ", Header(request, "origin"), " is not a loopback one"));
  }
  const std::string version = Header(request, "mcp-protocol-version");
  if (!version.empty() && !IsSupportedMcpVersion(version)) {
    return Refuse(answer, 400, kInvalidRequest, absl::StrCat("Bad Request: MCP-Protocol-Version ", version,
                                                             " is not one this server speaks"));
  }
  if (request.verb == "POST") return Post(request, answer);
  if (request.verb == "DELETE") return Delete(request, answer);
  // No stream the server opens by itself: it sends nothing unasked.
  Refuse(answer, 405, kInvalidRequest, absl::StrCat(request.verb, " /mcp: only POST and DELETE here"),
         {{"Allow", "POST, DELETE"}});
}

McpOptions McpHttp::OptionsFor(const std::shared_ptr<const ApiKey>& key) const {
  McpOptions options = options_;
  if (key != nullptr) {
    // The tools may make the daemon calls the key may make, and no others.
    options.authorize = [key, profile_of = profile_of_](const std::string& method, const json::value& params) {
      return ApiKeys::Refusal(*key, method, params, profile_of);
    };
  }
  return options;
}

std::shared_ptr<McpHttp::Entry> McpHttp::Open(const HttpRouteRequest& request,
                                              const std::shared_ptr<HttpRouteAnswer>& answer) {
  if (!Header(request, "mcp-session-id").empty()) {
    Refuse(answer, 400, kInvalidRequest, "Bad Request: initialize starts a new session: send it without Mcp-Session-Id");
    return nullptr;
  }
  auto entry = std::make_shared<Entry>();
  entry->session = McpSession::Create(OptionsFor(request.key), daemon_);
  entry->key_name = request.key != nullptr ? request.key->name : "";
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) {
    Refuse(answer, 503, kShuttingDown, "the MCP server is shutting down");
    return nullptr;
  }
  if (sessions_.size() >= config_.max_sessions) {
    Refuse(answer, 503, kBusy, absl::StrCat(config_.max_sessions, " MCP sessions are open already (mcp.max_sessions)"));
    return nullptr;
  }
  return entry;
}

std::shared_ptr<McpHttp::Entry> McpHttp::Find(const HttpRouteRequest& request,
                                              const std::shared_ptr<HttpRouteAnswer>& answer) {
  const std::string id = Header(request, "mcp-session-id");
  if (id.empty()) {
    Refuse(answer, 400, kInvalidRequest, "Bad Request: Mcp-Session-Id is required (initialize first)");
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  // Another key's session is as unknown as one that never was.
  if (it == sessions_.end() || it->second->key_name != (request.key != nullptr ? request.key->name : "")) {
    Refuse(answer, 404, kNotFound, "no such MCP session (it ended, or expired): initialize a new one");
    return nullptr;
  }
  it->second->Touch();
  return it->second;
}

void McpHttp::Post(HttpRouteRequest& request, const std::shared_ptr<HttpRouteAnswer>& answer) {
  if (!AcceptsBoth(Header(request, "accept"))) {
    return Refuse(answer, 406, kInvalidRequest,
                  "Not Acceptable: the client must accept both application/json and text/event-stream");
  }
  if (!absl::StartsWithIgnoreCase(absl::StripLeadingAsciiWhitespace(Header(request, "content-type")),
                                  "application/json")) {
    return Refuse(answer, 415, kInvalidRequest, "Unsupported Media Type: the body must be application/json");
  }
  McpMessage message = ParseMcpMessage(request.body);
  if (message.kind == McpMessage::Kind::kInvalid) {
    return answer->Respond(400, "application/json", ErrorReply(message.call.id, *message.error));
  }
  const bool initialize = message.kind == McpMessage::Kind::kRequest && message.call.method == "initialize";
  if (initialize && !AsksForAVersion(message.call)) {
    // Refused as the session would refuse it, and no session is made.
    return answer->Respond(200, "application/json",
                           ErrorReply(message.call.id, InvalidParam("params", "protocolVersion", "a string is required")));
  }
  std::shared_ptr<Entry> entry = initialize ? Open(request, answer) : Find(request, answer);
  if (entry == nullptr) return;
  if (message.kind != McpMessage::Kind::kRequest) {
    entry->session->Handle(std::move(message), std::make_shared<Discard>());
    return answer->Respond(202, "", "");
  }
  Headers headers;
  std::string id;
  if (initialize) {
    id = NewSessionId();
    headers.emplace_back(kSessionHeader, id);
  }
  const bool sse = WantsProgress(message);
  entry->session->Handle(std::move(message), std::make_shared<HttpMcpOutput>(answer, sse, headers, entry));
  // An initialize is answered at once: kept only if it succeeded.
  if (initialize && !entry->session->version().empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.emplace(id, entry);
  }
}

void McpHttp::Delete(const HttpRouteRequest& request, const std::shared_ptr<HttpRouteAnswer>& answer) {
  std::shared_ptr<Entry> entry = Find(request, answer);
  if (entry == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.erase(Header(request, "mcp-session-id"));
  }
  // Answered once the workspace is gone (archived by the daemon's rules).
  entry->session->Close([answer] { answer->Respond(200, "", ""); }, /*cancel=*/true);
}

void McpHttp::Sweep() {
  std::vector<std::shared_ptr<Entry>> expired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    const int64_t now = absl::ToUnixMillis(absl::Now());
    const int64_t idle = absl::ToInt64Milliseconds(config_.idle_timeout);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (it->second->active == 0 && now - it->second->last_used_ms >= idle) {
        expired.push_back(it->second);
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const std::shared_ptr<Entry>& entry : expired) {
    warn_(absl::StrCat("an MCP session idle past mcp.idle_timeout_ms (", absl::FormatDuration(config_.idle_timeout),
                       ") ended"));
    entry->session->Close({}, /*cancel=*/true);
  }
  // A quarter of the timeout between looks: a session lives at most a
  // quarter longer than it may.
  const absl::Duration every = std::clamp(config_.idle_timeout / 4, absl::Milliseconds(250), absl::Seconds(60));
  sweep_.expires_after(absl::ToChronoMilliseconds(every));
  sweep_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    if (ec) return;
    if (std::shared_ptr<McpHttp> self = weak.lock()) self->Sweep();
  });
}

}  // namespace cubicle::rpc
