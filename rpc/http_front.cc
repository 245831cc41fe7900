#include "rpc/http_front.h"

#include <atomic>
#include <chrono>
#include <optional>
#include <utility>

#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

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

struct HttpFront::Shared {
  HttpLimits limits;
  std::shared_ptr<const ApiKeys> keys;
  HttpBackend backend;
  std::function<void(const std::string&)> warn;
  std::atomic<uint64_t> open{0};
};

namespace {

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

Response MakeResponse(const Request& req, http::status status, std::string body, const char* type) {
  Response res(status, req.version());
  res.set(http::field::content_type, type);
  res.keep_alive(req.keep_alive());
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

Response JsonResponse(const Request& req, http::status status, const json::value& body) {
  return MakeResponse(req, status, json::serialize(body), "application/json");
}

Response ErrorResponse(const Request& req, http::status status, const std::string& why) {
  return JsonResponse(req, status, json::object{{"error", why}});
}

// One client: a request read (bounded in size and time), answered, and
// the next one read if the connection is kept alive. Requests on one
// connection are answered in order, one at a time.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, std::shared_ptr<HttpFront::Shared> shared)
      : stream_(std::move(socket)), shared_(std::move(shared)) {}
  ~HttpSession() { shared_->open.fetch_sub(1); }

  void Read() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(shared_->limits.max_header_bytes));
    parser_->body_limit(shared_->limits.max_body_bytes);
    // A timeout closes the socket: the read ends with beast::error::timeout.
    stream_.expires_after(absl::ToChronoNanoseconds(shared_->limits.read_timeout));
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->OnRead(ec);
    });
  }

  // Sends `res` (on the io thread), then reads on or closes.
  void Send(Response res) {
    res_ = std::move(res);
    stream_.expires_after(absl::ToChronoNanoseconds(shared_->limits.read_timeout));
    http::async_write(stream_, res_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec || !self->res_.keep_alive()) return self->Close();
      self->Read();
    });
  }

 private:
  void OnRead(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout) return Close();
    if (ec == http::error::header_limit || ec == http::error::body_limit) {
      // The rest of the request cannot be told from the next one: answered,
      // then closed.
      Request req = parser_->get();
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
        Request req;
        Response res = ErrorResponse(req, http::status::bad_request, absl::StrCat("bad request: ", ec.message()));
        res.keep_alive(false);
        return Send(std::move(res));
      }
      return Close();
    }
    stream_.expires_never();  // the daemon's answer may take as long as the run
    Route(parser_->release());
  }

  void Route(Request req) {
    std::string_view target(req.target().data(), req.target().size());
    target = target.substr(0, target.find('?'));
    const bool get = req.method() == http::verb::get;
    if (target == "/healthz") {
      // Answered here and now, whatever runs: a liveness probe must never
      // wait behind executions.
      if (!get) return Send(NotAllowed(req, "GET"));
      return Send(JsonResponse(req, http::status::ok, json::object{{"status", "ok"}}));
    }
    if (target != "/rpc" && target != "/readyz" && target != "/metrics") {
      return Send(ErrorResponse(req, http::status::not_found, absl::StrCat("no endpoint ", absl::string_view(target.data(), target.size()))));
    }
    const bool post = req.method() == http::verb::post;
    if (target == "/rpc" ? !post : !get) return Send(NotAllowed(req, target == "/rpc" ? "POST" : "GET"));
    const ApiKey* key = nullptr;
    if (shared_->keys != nullptr) {
      std::optional<absl::string_view> token = BearerToken(
          absl::string_view(req[http::field::authorization].data(), req[http::field::authorization].size()));
      key = token.has_value() ? shared_->keys->Find(*token) : nullptr;
      if (key == nullptr) {
        Response res = ErrorResponse(req, http::status::unauthorized,
                                     token.has_value() ? "the bearer key is not known" : "a bearer key is required");
        res.set(http::field::www_authenticate, "Bearer");
        return Send(std::move(res));
      }
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
    Rpc(std::move(req), key);
  }

  Response NotAllowed(const Request& req, const char* allow) {
    Response res = ErrorResponse(req, http::status::method_not_allowed, absl::StrCat("only ", allow, " here"));
    res.set(http::field::allow, allow);
    return res;
  }

  void Rpc(Request req, const ApiKey* key) {
    if (absl::StripAsciiWhitespace(req.body()).empty()) {
      return Send(ErrorResponse(req, http::status::bad_request, "an empty body: a JSON-RPC request is expected"));
    }
    if (key != nullptr) {
      if (std::optional<std::string> refused = ApiKeys::Refusal(*key, req.body())) {
        return Send(ErrorResponse(req, http::status::forbidden, *refused));
      }
    }
    auto pending = std::make_shared<PendingAnswer>(shared_from_this(), req.version(), req.keep_alive());
    shared_->backend.rpc(req.body(), [pending](std::string reply) { pending->Answer(std::move(reply)); });
  }

  // The answer to one /rpc request: the daemon's reply, or 204 once the
  // daemon has dropped its reply function unanswered (notifications).
  class PendingAnswer {
   public:
    PendingAnswer(std::shared_ptr<HttpSession> session, unsigned version, bool keep_alive)
        : session_(std::move(session)), version_(version), keep_alive_(keep_alive) {}
    ~PendingAnswer() {
      if (!answered_.load()) Post(http::status::no_content, "");
    }
    void Answer(std::string reply) {
      if (answered_.exchange(true)) return;
      Post(http::status::ok, std::move(reply));
    }

   private:
    void Post(http::status status, std::string body) {
      Response res(status, version_);
      if (status == http::status::ok) res.set(http::field::content_type, "application/json");
      res.keep_alive(keep_alive_);
      res.body() = std::move(body);
      res.prepare_payload();
      asio::post(session_->stream_.get_executor(),
                 [session = session_, res = std::move(res)]() mutable { session->Send(std::move(res)); });
    }
    std::shared_ptr<HttpSession> session_;
    unsigned version_;
    bool keep_alive_;
    std::atomic<bool> answered_{false};
  };

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  std::shared_ptr<HttpFront::Shared> shared_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Response res_;  // the response being written
};

}  // namespace

absl::StatusOr<std::unique_ptr<HttpFront>> HttpFront::Start(asio::io_context& io, const tcp::endpoint& endpoint,
                                                            const HttpLimits& limits,
                                                            std::shared_ptr<const ApiKeys> keys, HttpBackend backend,
                                                            std::function<void(const std::string&)> warn) {
  auto shared = std::make_shared<Shared>();
  shared->limits = limits;
  shared->keys = std::move(keys);
  shared->backend = std::move(backend);
  shared->warn = std::move(warn);
  std::unique_ptr<HttpFront> front(new HttpFront(io, std::move(shared)));
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
      Request req;
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
