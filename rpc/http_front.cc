#include "rpc/http_front.h"

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <sstream>
#include <utility>
#include <variant>

#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "rpc/http_auth.h"
#include "rpc/http_routes.h"
#include "rpc/jsonrpc.h"

namespace cubicle::rpc {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;

absl::StatusOr<tcp::endpoint> ParseListenAddress(const std::string& spec) {
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--listen ", spec, ": ADDR:PORT expected"));
  }
  std::string host = spec.substr(0, colon);
  uint32_t port = 0;
  if (!absl::SimpleAtoi(spec.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--listen ", spec, ": the port is not a number 0-65535"));
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  boost::system::error_code ec;
  asio::ip::address address = asio::ip::make_address(host, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen ", spec, ": '", host, "' is not an IPv4 or IPv6 address (nor localhost)"));
  }
  return tcp::endpoint(address, static_cast<uint16_t>(port));
}

absl::StatusOr<tcp::endpoint> LocalEndpoint(int listening_fd) {
  struct sockaddr_storage address {};
  socklen_t length = sizeof(address);
  if (::getsockname(listening_fd, reinterpret_cast<struct sockaddr*>(&address), &length) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the activated HTTP socket (fd ", listening_fd, "): getsockname: ",
                                                   std::strerror(errno)));
  }
  tcp::endpoint endpoint;
  if (length > endpoint.capacity()) return absl::InvalidArgumentError("the activated HTTP socket: not TCP");
  std::memcpy(endpoint.data(), &address, length);
  endpoint.resize(length);
  return endpoint;
}

struct HttpFront::Shared {
  HttpLimits limits;
  std::shared_ptr<const ApiKeys> keys;
  HttpBackend backend;
  std::function<void(const std::string&)> warn;
  std::atomic<uint64_t> open{0};
  RequestVerifier verifier;
};

namespace {

using HttpRequest = http::request<http::string_body>;
using Response = http::response<http::string_body>;

Response MakeResponse(const HttpRequest& req, http::status status, std::string body, const char* type) {
  Response res(status, req.version());
  res.set(http::field::content_type, type);
  res.keep_alive(req.keep_alive());
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

Response JsonResponse(const HttpRequest& req, http::status status, const json::value& body) {
  return MakeResponse(req, status, json::serialize(body), "application/json");
}

Response ErrorResponse(const HttpRequest& req, http::status status, const std::string& why) {
  return JsonResponse(req, status, json::object{{"error", why}});
}

// The REST routes' errors carry a code, as the daemon's do.
Response RestError(const HttpRequest& req, int status, int64_t code, const std::string& why) {
  return JsonResponse(req, static_cast<http::status>(status),
                      json::object{{"error", json::object{{"code", code}, {"message", why}}}});
}

absl::string_view Field(const HttpRequest& req, absl::string_view name) {
  auto it = req.find(beast::string_view(name.data(), name.size()));
  return it == req.end() ? absl::string_view() : absl::string_view(it->value().data(), it->value().size());
}

bool WantsNdjson(const HttpRequest& req) {
  return req.version() >= 11 && absl::StrContains(Field(req, "Accept"), "application/x-ndjson");
}

std::string JsonRpcLine(const std::string& method, json::object params) {
  return json::serialize(
      json::object{{"jsonrpc", "2.0"}, {"id", 1}, {"method", method}, {"params", std::move(params)}});
}

// One client: a request read (bounded in size and time), answered, and
// the next one read if the connection is kept alive. Requests on one
// connection are answered in order, one at a time. While one is answered
// the socket is watched for the client's hang-up, which stops it
// (HttpLimits::on_disconnect).
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, std::shared_ptr<HttpFront::Shared> shared)
      : stream_(std::move(socket)),
        shared_(std::move(shared)),
        connection_(std::make_shared<Connection>(shared_->limits.on_disconnect)),
        deadline_timer_(stream_.get_executor()) {}
  ~HttpSession() { shared_->open.fetch_sub(1); }

  void Read() {
    ++generation_;  // a hang-up watch of the request before is stale
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(shared_->limits.max_header_bytes));
    parser_->body_limit(shared_->limits.max_body_bytes);
    SetDeadline(Clock::now() + absl::ToChronoNanoseconds(shared_->limits.read_timeout));
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->OnRead(ec);
    });
  }

  // Sends `res` (on the io thread), then reads on or closes.
  void Send(Response res) {
    res_ = std::move(res);
    SetDeadline(Clock::now() + absl::ToChronoNanoseconds(shared_->limits.read_timeout));
    http::async_write(stream_, res_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec || !self->res_.keep_alive()) return self->Close();
      self->Read();
    });
  }

  // A streamed answer (chunked NDJSON), on the io thread: lines as they
  // come, then the end.
  void StreamLine(const std::string& line) { StreamBytes(absl::StrCat(line, "\n")); }
  void StreamBytes(const std::string& bytes) {
    if (!streaming_) StartStream();
    if (bytes.empty()) return;  // an empty chunk would end the stream
    Queue(absl::StrCat(absl::Hex(bytes.size()), "\r\n", bytes, "\r\n"));
  }
  // The next stream's head: its content type and fields beyond the usual.
  void set_stream_head(std::string content_type, HttpRouteAnswer::Headers headers) {
    stream_type_ = std::move(content_type);
    stream_headers_ = std::move(headers);
  }
  void EndStream() {
    if (!streaming_) StartStream();
    stream_done_ = true;
    Queue("0\r\n\r\n");
  }

  void set_stream_keep_alive(bool keep_alive) { stream_keep_alive_ = keep_alive; }

 private:
  void OnRead(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout) return Close();
    if (ec == http::error::header_limit || ec == http::error::body_limit) {
      // The rest of the request cannot be told from the next one: answered,
      // then closed.
      HttpRequest req = parser_->get();
      req.keep_alive(false);
      const bool head = ec == http::error::header_limit;
      Response res = ErrorResponse(
          req, head ? http::status::request_header_fields_too_large : http::status::payload_too_large,
          head ? absl::StrCat("request head over ", shared_->limits.max_header_bytes, " bytes")
               : absl::StrCat("request body over ", shared_->limits.max_body_bytes, " bytes"));
      res.keep_alive(false);
      return Send(std::move(res));
    }
    if (ec) {
      if (ec.category() == http::make_error_code(http::error::bad_target).category() || ec == http::error::partial_message) {
        HttpRequest req;
        Response res = ErrorResponse(req, http::status::bad_request, absl::StrCat("bad request: ", ec.message()));
        res.keep_alive(false);
        return Send(std::move(res));
      }
      return Close();
    }
    SetDeadline(Clock::time_point::max());  // the daemon's answer may take as long as the run
    Route(parser_->release());
  }

  void Route(HttpRequest req) {
    absl::string_view target(req.target().data(), req.target().size());
    target = target.substr(0, target.find('?'));
    const bool get = req.method() == http::verb::get;
    if (target == "/healthz") {
      // Answered here and now, whatever runs: a liveness probe must never
      // wait behind executions.
      if (!get) return Send(NotAllowed(req, "GET"));
      return Send(JsonResponse(req, http::status::ok, json::object{{"status", "ok"}}));
    }
    const bool rest = IsRestPath(target);
    const bool mcp = target == "/mcp" && shared_->backend.mcp != nullptr;
    if (!rest && !mcp && target != "/rpc" && target != "/readyz" && target != "/metrics") {
      return Send(ErrorResponse(req, http::status::not_found, absl::StrCat("no endpoint ", target)));
    }
    const bool post = req.method() == http::verb::post;
    if (!rest && !mcp && (target == "/rpc" ? !post : !get)) {
      return Send(NotAllowed(req, target == "/rpc" ? "POST" : "GET"));
    }
    absl::StatusOr<const ApiKey*> key = Authenticate(req);
    if (!key.ok()) {
      const bool unknown = absl::IsUnauthenticated(key.status());
      if (unknown) Rejected("unauthenticated");
      Response res = ErrorResponse(req, unknown ? http::status::unauthorized : http::status::service_unavailable,
                                   std::string(key.status().message()));
      if (unknown) res.set(http::field::www_authenticate, "Bearer");
      return Send(std::move(res));
    }
    if (target == "/metrics") {
      return Send(MakeResponse(req, http::status::ok, shared_->backend.metrics(), "text/plain; version=0.0.4"));
    }
    if (target == "/readyz") {
      json::object readiness = shared_->backend.readiness();
      const json::value* ready = readiness.if_contains("ready");
      const bool ok = ready != nullptr && ready->is_bool() && ready->as_bool();
      return Send(JsonResponse(req, ok ? http::status::ok : http::status::service_unavailable, readiness));
    }
    if (rest) return Rest(std::move(req), *key);
    if (mcp) return Mcp(std::move(req), *key);
    Rpc(std::move(req), *key);
  }

  // /mcp: handed over whole to rpc/mcp_http.h. A hang-up is not watched:
  // MCP does not read a disconnect as a cancel.
  void Mcp(HttpRequest req, const ApiKey* key) {
    HttpRouteRequest route;
    route.verb = std::string(req.method_string().data(), req.method_string().size());
    for (const auto& field : req) {
      route.headers[absl::AsciiStrToLower(absl::string_view(field.name_string().data(), field.name_string().size()))] =
          std::string(field.value().data(), field.value().size());
    }
    route.body = std::move(req.body());
    // The key lives as long as the keys it is one of.
    if (key != nullptr) route.key = std::shared_ptr<const ApiKey>(shared_->keys, key);
    stream_keep_alive_ = req.keep_alive();
    shared_->backend.mcp(std::move(route), std::make_shared<RouteAnswer>(shared_from_this(), req.version(),
                                                                          req.keep_alive()));
  }

  void Rejected(absl::string_view reason) {
    if (shared_->backend.rejected) shared_->backend.rejected(reason);
  }

  // The key the request proves; null without keys (no authentication).
  absl::StatusOr<const ApiKey*> Authenticate(const HttpRequest& req) {
    if (shared_->keys == nullptr) return nullptr;
    HttpCredentials c;
    c.authorization = Field(req, "Authorization");
    c.key_name = Field(req, "X-Cubicle-Key-Name");
    c.timestamp = Field(req, "X-Cubicle-Timestamp");
    c.signature = Field(req, "X-Cubicle-Signature");
    c.method = absl::string_view(req.method_string().data(), req.method_string().size());
    c.target = absl::string_view(req.target().data(), req.target().size());
    c.body = req.body();
    return shared_->verifier.Verify(*shared_->keys, c, absl::Now());
  }

  Response NotAllowed(const HttpRequest& req, const char* allow) {
    Response res = ErrorResponse(req, http::status::method_not_allowed, absl::StrCat("only ", allow, " here"));
    res.set(http::field::allow, allow);
    return res;
  }

  void Rpc(HttpRequest req, const ApiKey* key) {
    if (absl::StripAsciiWhitespace(req.body()).empty()) {
      return Send(ErrorResponse(req, http::status::bad_request, "an empty body: a JSON-RPC request is expected"));
    }
    if (key != nullptr) {
      if (std::optional<std::string> refused = ApiKeys::Refusal(*key, req.body(), shared_->backend.profile_of)) {
        Rejected("forbidden");
        return Send(ErrorResponse(req, http::status::forbidden, *refused));
      }
    }
    stream_keep_alive_ = req.keep_alive();
    auto pending = std::make_shared<PendingAnswer>(shared_from_this(), req.version(), req.keep_alive(),
                                                   WantsNdjson(req));
    HttpCall call{std::move(req.body()), [pending](std::string reply) { pending->Answer(std::move(reply)); }, nullptr,
                  connection_, key != nullptr ? key->name : ""};
    if (pending->streamed()) call.notify = [pending](std::string line) { pending->Notify(std::move(line)); };
    WatchHangup();
    shared_->backend.rpc(std::move(call));
  }

  void Rest(HttpRequest req, const ApiKey* key) {
    const bool stream = WantsNdjson(req);
    std::variant<RestCall, RestRefusal> matched =
        MatchRest(absl::string_view(req.method_string().data(), req.method_string().size()),
                  absl::string_view(req.target().data(), req.target().size()), req.body(), stream);
    if (auto* refused = std::get_if<RestRefusal>(&matched)) {
      Response res = RestError(req, refused->status, refused->status == 400 ? kInvalidParams : kMethodNotFound,
                               refused->message);
      if (!refused->allow.empty()) res.set(http::field::allow, refused->allow);
      return Send(std::move(res));
    }
    RestCall call = std::get<RestCall>(std::move(matched));
    if (key != nullptr) {
      if (std::optional<std::string> refused =
              ApiKeys::Refusal(*key, call.scope_method, json::value(call.params), shared_->backend.profile_of)) {
        Rejected("forbidden");
        return Send(RestError(req, 403, kForbidden, *refused));
      }
    }
    WatchHangup();
    stream_keep_alive_ = req.keep_alive();
    if (call.shape == RestShape::kStream) return StartFollowed(req, std::move(call));
    auto self = shared_from_this();
    const unsigned version = req.version();
    const bool keep_alive = req.keep_alive();
    shared_->backend.rpc(HttpCall{JsonRpcLine(call.method, std::move(call.params)),
                                  [self, shape = call.shape, version, keep_alive](std::string reply) {
                                    self->Post(RestResponse(AnswerOf(shape, reply), version, keep_alive));
                                  },
                                  nullptr, connection_, key != nullptr ? key->name : ""});
  }

  // POST /sessions/ID/exec streamed: exec.start, then exec.follow's
  // output as NDJSON lines. The execution is the request's: the client's
  // disconnect cancels it (with on_disconnect "cancel").
  void StartFollowed(const HttpRequest& req, RestCall call) {
    auto self = shared_from_this();
    const unsigned version = req.version();
    const bool keep_alive = req.keep_alive();
    auto started = [self, version, keep_alive](std::string reply) {
      boost::system::error_code ec;
      json::value v = json::parse(reply, ec);
      const json::value* id = nullptr;
      if (!ec && v.is_object() && v.as_object().contains("result") && v.at("result").is_object()) {
        id = v.at("result").as_object().if_contains("exec_id");
      }
      if (id == nullptr || !id->is_string()) {
        return self->Post(RestResponse(AnswerOf(RestShape::kJson, reply), version, keep_alive));
      }
      self->Follow(std::string(id->as_string()), keep_alive);
    };
    shared_->backend.rpc(HttpCall{JsonRpcLine(call.method, std::move(call.params)), started, nullptr, nullptr});
  }

  void Follow(const std::string& exec_id, bool keep_alive) {
    auto stop = std::make_shared<Cancellation>();
    HttpBackend* backend = &shared_->backend;
    (void)stop->SetStop([shared = shared_, exec_id] {
      shared->backend.rpc(HttpCall{JsonRpcLine("exec.cancel", json::object{{"exec_id", exec_id}}), [](std::string) {},
                                   nullptr, nullptr});
    });
    connection_->Track(stop);
    auto self = shared_from_this();
    auto line = [self](std::string raw) {
      if (std::optional<std::string> out = StreamLineOf(raw)) self->PostLine(*std::move(out));
    };
    backend->rpc(HttpCall{JsonRpcLine("exec.follow", json::object{{"exec_id", exec_id}}),
                          [self, line, stop, keep_alive](std::string reply) {
                            self->connection_->Forget(stop.get());
                            stop->Clear();
                            line(std::move(reply));
                            self->PostEnd(keep_alive);
                          },
                          line, connection_});
  }

  static Response RestResponse(RestAnswer answer, unsigned version, bool keep_alive) {
    Response res(static_cast<http::status>(answer.status), version);
    res.set(http::field::content_type, answer.content_type);
    res.keep_alive(keep_alive);
    res.body() = std::move(answer.body);
    res.prepare_payload();
    return res;
  }

  void Post(Response res) {
    asio::post(stream_.get_executor(),
               [self = shared_from_this(), res = std::move(res)]() mutable { self->Send(std::move(res)); });
  }
  void PostLine(std::string line) {
    asio::post(stream_.get_executor(), [self = shared_from_this(), line = std::move(line)] { self->StreamLine(line); });
  }
  void PostEnd(bool keep_alive) {
    asio::post(stream_.get_executor(), [self = shared_from_this(), keep_alive] {
      self->set_stream_keep_alive(keep_alive);
      self->EndStream();
    });
  }

  // The answer to one /rpc request: the daemon's reply as one JSON body,
  // or, streamed, each notification then the reply as NDJSON; 204 once
  // the daemon has dropped its reply function unanswered (notifications).
  class PendingAnswer {
   public:
    PendingAnswer(std::shared_ptr<HttpSession> session, unsigned version, bool keep_alive, bool streamed)
        : session_(std::move(session)), version_(version), keep_alive_(keep_alive), streamed_(streamed) {}
    ~PendingAnswer() {
      if (answered_.load()) return;
      if (notified_.load()) {
        session_->PostEnd(keep_alive_);
      } else {
        Post(http::status::no_content, "");
      }
    }
    bool streamed() const { return streamed_; }
    void Notify(std::string line) {
      if (answered_.load()) return;
      notified_ = true;
      session_->PostLine(std::move(line));
    }
    void Answer(std::string reply) {
      if (answered_.exchange(true)) return;
      if (!streamed_) return Post(http::status::ok, std::move(reply));
      session_->PostLine(std::move(reply));
      session_->PostEnd(keep_alive_);
    }

   private:
    void Post(http::status status, std::string body) {
      Response res(status, version_);
      if (status == http::status::ok) res.set(http::field::content_type, "application/json");
      res.keep_alive(keep_alive_);
      res.body() = std::move(body);
      res.prepare_payload();
      session_->Post(std::move(res));
    }
    std::shared_ptr<HttpSession> session_;
    unsigned version_;
    bool keep_alive_;
    bool streamed_;
    std::atomic<bool> answered_{false};
    std::atomic<bool> notified_{false};
  };

  // The answer of a route served elsewhere (/mcp).
  class RouteAnswer : public HttpRouteAnswer {
   public:
    RouteAnswer(std::shared_ptr<HttpSession> session, unsigned version, bool keep_alive)
        : session_(std::move(session)), version_(version), keep_alive_(keep_alive) {}
    ~RouteAnswer() override {
      if (streamed_) {
        if (!ended_) session_->PostEnd(keep_alive_);
      } else if (!answered_) {
        Respond(500, "application/json", R"({"error":"no answer"})", {});
      }
    }
    void Respond(int status, const std::string& content_type, std::string body, Headers headers) override {
      if (answered_ || streamed_) return;
      answered_ = true;
      Response res(static_cast<http::status>(status), version_);
      if (!content_type.empty()) res.set(http::field::content_type, content_type);
      for (const auto& [name, value] : headers) res.set(name, value);
      res.keep_alive(keep_alive_);
      res.body() = std::move(body);
      res.prepare_payload();
      session_->Post(std::move(res));
    }
    void StartStream(const std::string& content_type, Headers headers) override {
      if (answered_ || streamed_) return;
      streamed_ = true;
      asio::post(session_->stream_.get_executor(),
                 [session = session_, type = content_type, headers = std::move(headers)]() mutable {
                   session->set_stream_head(std::move(type), std::move(headers));
                   session->StreamBytes("");  // the head now: the client knows a stream has begun
                 });
    }
    void StreamPiece(std::string bytes) override {
      if (!streamed_ || ended_) return;
      asio::post(session_->stream_.get_executor(),
                 [session = session_, bytes = std::move(bytes)] { session->StreamBytes(bytes); });
    }
    void EndStream() override {
      if (!streamed_ || ended_) return;
      ended_ = true;
      session_->PostEnd(keep_alive_);
    }

   private:
    std::shared_ptr<HttpSession> session_;
    unsigned version_;
    bool keep_alive_;
    // Its user calls one at a time (rpc/mcp_http.cc holds a lock).
    bool answered_ = false;
    bool streamed_ = false;
    bool ended_ = false;
  };

  void StartStream() {
    streaming_ = true;
    stream_done_ = false;
    http::response<http::empty_body> head(http::status::ok, 11);
    head.set(http::field::content_type, stream_type_);
    head.set(http::field::cache_control, "no-store");
    for (const auto& [name, value] : stream_headers_) head.set(name, value);
    stream_type_ = "application/x-ndjson";
    stream_headers_.clear();
    head.chunked(true);
    head.keep_alive(stream_keep_alive_);
    std::ostringstream text;
    text << head.base();
    Queue(text.str());
  }

  void Queue(std::string bytes) {
    out_.push_back(std::move(bytes));
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    if (out_.empty()) {
      writing_ = false;
      if (!stream_done_) return SetDeadline(Clock::time_point::max());  // the daemon's next line may take long
      streaming_ = false;
      stream_done_ = false;
      if (!stream_keep_alive_) return Close();
      return Read();
    }
    writing_ = true;
    // A client that stops reading a stream is cut off like a slow sender.
    SetDeadline(Clock::now() + absl::ToChronoNanoseconds(shared_->limits.read_timeout));
    asio::async_write(stream_, asio::buffer(out_.front()), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) {
        self->out_.clear();
        self->writing_ = false;
        self->connection_->Disconnect();
        return self->Close();
      }
      self->out_.pop_front();
      self->WriteNext();
    });
  }

  // While a request is answered nothing is read, so a client that goes
  // away would only be noticed at the first write: its hang-up (EOF, or a
  // reset) is watched for instead. Bytes of a pipelined request end the
  // watch; they are read after the answer.
  void WatchHangup() {
    const uint64_t generation = generation_;
    stream_.socket().async_wait(tcp::socket::wait_read,
                                [self = shared_from_this(), generation](boost::system::error_code ec) {
                                  if (ec || generation != self->generation_) return;
                                  char byte;
                                  const ssize_t n = ::recv(self->stream_.socket().native_handle(), &byte, 1,
                                                           MSG_PEEK | MSG_DONTWAIT);
                                  if (n > 0) return;
                                  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
                                    return self->WatchHangup();
                                  }
                                  self->connection_->Disconnect();
                                });
  }

  // The read or write under way must end by `when` (max: no bound), or the
  // connection is closed and the operation ends in error. One timer, armed
  // lazily: a kept-alive connection moves its deadline on every request
  // without a syscall (Beast's per-operation timeouts re-armed the
  // reactor's timerfd twice per request), and the timer, when it fires,
  // either closes or waits on for the deadline as it now stands. Every
  // deadline set is now + the same timeout, so none comes before the one
  // the timer waits for.
  using Clock = std::chrono::steady_clock;
  void SetDeadline(Clock::time_point when) {
    deadline_ = when;
    if (deadline_armed_ || when == Clock::time_point::max()) return;
    deadline_armed_ = true;
    deadline_timer_.expires_at(when);
    deadline_timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
      if (std::shared_ptr<HttpSession> self = weak.lock()) self->OnDeadline(ec);
    });
  }

  void OnDeadline(boost::system::error_code ec) {
    deadline_armed_ = false;
    if (ec) return;  // cancelled: closed
    if (Clock::now() >= deadline_) return Close();
    SetDeadline(deadline_);
  }

  void Close() {
    deadline_timer_.cancel();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    connection_->Disconnect();
  }

  beast::tcp_stream stream_;
  std::shared_ptr<HttpFront::Shared> shared_;
  std::shared_ptr<Connection> connection_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Response res_;  // the response being written
  uint64_t generation_ = 0;  // requests read: tells a stale hang-up watch
  std::deque<std::string> out_;  // a stream's bytes not yet written
  bool writing_ = false;
  bool streaming_ = false;
  bool stream_done_ = false;
  bool stream_keep_alive_ = true;
  std::string stream_type_ = "application/x-ndjson";
  HttpRouteAnswer::Headers stream_headers_;
  asio::steady_timer deadline_timer_;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool deadline_armed_ = false;
};

}  // namespace

namespace {

std::shared_ptr<HttpFront::Shared> MakeShared(const HttpLimits& limits, std::shared_ptr<const ApiKeys> keys,
                                              HttpBackend backend, std::function<void(const std::string&)> warn) {
  auto shared = std::make_shared<HttpFront::Shared>();
  shared->limits = limits;
  shared->keys = std::move(keys);
  shared->backend = std::move(backend);
  shared->warn = std::move(warn);
  return shared;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpFront>> HttpFront::Start(asio::io_context& io, const tcp::endpoint& endpoint,
                                                            const HttpLimits& limits,
                                                            std::shared_ptr<const ApiKeys> keys, HttpBackend backend,
                                                            std::function<void(const std::string&)> warn) {
  std::unique_ptr<HttpFront> front(
      new HttpFront(io, MakeShared(limits, std::move(keys), std::move(backend), std::move(warn))));
  boost::system::error_code ec;
  const std::string where = absl::StrCat("listen on ", endpoint.address().to_string(), ":", endpoint.port());
  front->acceptor_.open(endpoint.protocol(), ec);
  if (!ec) front->acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec && endpoint.address().is_v6()) front->acceptor_.set_option(asio::ip::v6_only(true), ec);
  if (!ec) front->acceptor_.bind(endpoint, ec);
  if (!ec) front->acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return absl::UnavailableError(absl::StrCat(where, ": ", ec.message()));
  front->port_ = front->acceptor_.local_endpoint(ec).port();
  if (ec) return absl::InternalError(absl::StrCat(where, ": getsockname: ", ec.message()));
  front->Accept();
  return front;
}

absl::StatusOr<std::unique_ptr<HttpFront>> HttpFront::Adopt(asio::io_context& io, int listening_fd,
                                                            const HttpLimits& limits,
                                                            std::shared_ptr<const ApiKeys> keys, HttpBackend backend,
                                                            std::function<void(const std::string&)> warn) {
  std::unique_ptr<HttpFront> front(
      new HttpFront(io, MakeShared(limits, std::move(keys), std::move(backend), std::move(warn))));
  CUBICLE_ASSIGN_OR_RETURN(const tcp::endpoint bound, LocalEndpoint(listening_fd));
  boost::system::error_code ec;
  front->acceptor_.assign(bound.protocol(), listening_fd, ec);
  if (ec) return absl::InternalError(absl::StrCat("the activated HTTP socket (fd ", listening_fd, "): ", ec.message()));
  front->port_ = bound.port();
  front->Accept();
  return front;
}

HttpFront::HttpFront(asio::io_context& io, std::shared_ptr<Shared> shared)
    : shared_(std::move(shared)), acceptor_(io), retry_(io) {}

HttpFront::~HttpFront() { Close(); }

void HttpFront::Close() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  retry_.cancel();
}

void HttpFront::SetKeys(std::shared_ptr<const ApiKeys> keys) { shared_->keys = std::move(keys); }

void HttpFront::Accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;  // closed at shutdown
    if (ec) {
      // Out of descriptors or memory: the client waits in the backlog and
      // accepting resumes shortly, as on the Unix socket.
      if (!retrying_) shared_->warn(absl::StrCat("accept on the HTTP port: ", ec.message(), ": retrying every 100 ms"));
      retrying_ = true;
      retry_.expires_after(std::chrono::milliseconds(100));
      retry_.async_wait([this](boost::system::error_code wait) {
        if (!wait) Accept();
      });
      return;
    }
    retrying_ = false;
    shared_->open.fetch_add(1);
    auto session = std::make_shared<HttpSession>(std::move(socket), shared_);
    if (shared_->open.load() > shared_->limits.max_connections) {
      if (shared_->backend.rejected) shared_->backend.rejected("too_many_connections");
      HttpRequest req;
      req.keep_alive(false);
      Response res = ErrorResponse(req, http::status::service_unavailable,
                                   absl::StrCat(shared_->limits.max_connections, " connections are open already"));
      res.keep_alive(false);
      session->Send(std::move(res));
    } else {
      session->Read();
    }
    Accept();
  });
}

}  // namespace cubicle::rpc
