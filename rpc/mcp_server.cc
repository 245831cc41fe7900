#include "rpc/mcp_server.h"

#include <utility>

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>

#include "absl/strings/str_cat.h"
#include "rpc/mcp_tool_call.h"
#include "rpc/mcp_tools.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

constexpr char kInstructions[] =
    "Each tool works in one sandboxed workspace, /workspace, kept for this session: files written by run_python or "
    "run_shell (whose cwd it is) or write_file are there for later calls. Every run is a fresh sandbox with no "
    "network.";

// A response the client sent: an object with an id and a result or an
// error, and no method. The server sends no requests, so nothing waits
// for one; it is accepted and dropped.
bool IsResponse(const json::value& v) {
  const json::object* o = v.if_object();
  return o != nullptr && !o->contains("method") && o->contains("id") && (o->contains("result") || o->contains("error"));
}

McpMessage Invalid(Error error) {
  McpMessage m;
  m.error = std::move(error);
  return m;
}

}  // namespace

McpMessage ParseMcpMessage(absl::string_view text) {
  boost::system::error_code ec;
  const json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  if (!ec && v.is_array()) {
    return Invalid(Error{kInvalidRequest, "a batch: MCP 2025-06-18 takes one message at a time", nullptr});
  }
  if (!ec && IsResponse(v)) {
    McpMessage m;
    m.kind = McpMessage::Kind::kResponse;
    return m;
  }
  Incoming in = ParseLine(text, std::string::npos);
  if (in.entries.empty()) return Invalid(Error{kInvalidRequest, "an empty message", nullptr});
  Entry& entry = in.entries.front();
  McpMessage m;
  m.call = std::move(entry.call);
  if (entry.error) {
    m.error = std::move(entry.error);
    return m;
  }
  m.kind = m.call.notification ? McpMessage::Kind::kNotification : McpMessage::Kind::kRequest;
  return m;
}

bool WantsProgress(const McpMessage& message) {
  if (message.kind != McpMessage::Kind::kRequest || message.call.method != "tools/call") return false;
  const json::object* params = message.call.params.if_object();
  const json::value* meta = params == nullptr ? nullptr : params->if_contains("_meta");
  return meta != nullptr && meta->is_object() && meta->as_object().contains("progressToken");
}

std::shared_ptr<McpSession> McpSession::Create(McpOptions options, McpDaemonCall daemon) {
  return std::shared_ptr<McpSession>(new McpSession(std::move(options), std::move(daemon)));
}

McpSession::McpSession(McpOptions options, McpDaemonCall daemon)
    : options_(std::move(options)), daemon_(std::move(daemon)) {}

McpSession::~McpSession() = default;

bool McpSession::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_ == nullptr && queue_.empty();
}

std::string McpSession::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

std::string McpSession::workspace_key() const {
  std::lock_guard<std::mutex> lock(mu_);
  return key_;
}

void McpSession::Handle(McpMessage message, std::shared_ptr<McpOutput> out) {
  switch (message.kind) {
    case McpMessage::Kind::kResponse:
      return;
    case McpMessage::Kind::kInvalid:
      // A malformed notification is ignored, as the spec asks.
      if (!message.call.notification) out->Reply(ErrorReply(message.call.id, *message.error));
      return;
    case McpMessage::Kind::kNotification:
      return Notice(message.call);
    case McpMessage::Kind::kRequest:
      return Answer(message.call, std::move(out));
  }
}

void McpSession::Answer(const Call& call, std::shared_ptr<McpOutput> out) {
  const bool initialized = !version().empty();
  if (call.method == "tools/call" && initialized) return CallTool(call, std::move(out));
  Expected<json::value> result = Guarded([&]() -> Expected<json::value> {
    if (call.method == "ping") return json::value(json::object{});
    if (call.method == "initialize") return Initialize(call.params);
    if (!initialized) {
      return Error{kInvalidRequest, absl::StrCat("the session is not initialized: send initialize before ", call.method),
                   nullptr};
    }
    // One page holds every tool: a cursor is not needed.
    if (call.method == "tools/list") return json::value(json::object{{"tools", McpToolList()}});
    return Error{kMethodNotFound, absl::StrCat("no method named '", call.method, "'"), nullptr};
  });
  out->Reply(ReplyTo(call, result));
}

Expected<json::value> McpSession::Initialize(const json::value& raw) {
  const json::object* params = raw.if_object();
  const json::value* asked = params == nullptr ? nullptr : params->if_contains("protocolVersion");
  if (asked == nullptr || !asked->is_string()) return InvalidParam("params", "protocolVersion", "a string is required");
  std::string version = NegotiateMcpVersion(std::string(asked->as_string()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!version_.empty()) return Error{kInvalidRequest, "the session is initialized already", nullptr};
    version_ = version;
  }
  return json::value(json::object{
      {"protocolVersion", version},
      {"capabilities", json::object{{"tools", json::object{{"listChanged", false}}}}},
      {"serverInfo", json::object{{"name", "cubicle"}, {"version", options_.server_version}}},
      {"instructions", kInstructions}});
}

void McpSession::Notice(const Call& call) {
  if (call.method != "notifications/cancelled") return;  // initialized, progress, roots...: nothing to do
  const json::object* params = call.params.if_object();
  const json::value* id = params == nullptr ? nullptr : params->if_contains("requestId");
  if (id != nullptr) Cancel(*id);
}

void McpSession::CallTool(const Call& call, std::shared_ptr<McpOutput> out) {
  const json::object* params = call.params.if_object();
  const json::value* name = params == nullptr ? nullptr : params->if_contains("name");
  if (name == nullptr || !name->is_string()) {
    return out->Reply(ErrorReply(call.id, InvalidParam("params", "name", "a string is required")));
  }
  std::optional<McpTool> tool = FindMcpTool(std::string(name->as_string()));
  if (!tool.has_value()) {
    // The spec's protocol error for a tool that does not exist.
    return out->Reply(ErrorReply(call.id, Error{kInvalidParams, absl::StrCat("Unknown tool: ", std::string(name->as_string())),
                                                nullptr}));
  }
  const json::value* arguments = params->if_contains("arguments");
  Expected<McpToolArgs> args = ReadMcpToolArgs(*tool, arguments == nullptr ? json::value(nullptr) : *arguments);
  if (!args.ok()) return out->Reply(Result(call.id, McpToolError(args.error().message)));
  auto run = std::make_shared<McpToolCall>(shared_from_this(), call, *std::move(args), out);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closing_) {
      queue_.push_back(std::move(run));
      run = nullptr;
    }
  }
  if (run != nullptr) return out->Reply(Result(call.id, McpToolError("the MCP session is closing")));
  RunNext();
}

void McpSession::RunNext() {
  std::shared_ptr<McpToolCall> next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_ != nullptr || queue_.empty()) return;
    running_ = queue_.front();
    queue_.pop_front();
    next = running_;
  }
  next->Start();
}

void McpSession::Finished(const std::shared_ptr<McpToolCall>& call, std::optional<json::object> result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_ == call) running_.reset();
  }
  if (result.has_value()) call->out()->Reply(Result(call->call().id, *result));
  RunNext();
  DestroyWhenDone();
}

void McpSession::Cancel(const json::value& request_id) {
  std::shared_ptr<McpToolCall> target;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if ((*it)->call().id == request_id) {
        target = *it;
        queue_.erase(it);
        break;
      }
    }
    if (target != nullptr) return;  // dropped unanswered: it never started
    if (running_ != nullptr && running_->call().id == request_id) target = running_;
  }
  if (target != nullptr) target->Cancel();
}

void McpSession::Close(std::function<void()> done, bool cancel) {
  std::deque<std::shared_ptr<McpToolCall>> dropped;
  std::shared_ptr<McpToolCall> running;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (destroyed_) {
      lock.unlock();
      if (done) done();
      return;
    }
    if (done) closers_.push_back(std::move(done));
    closing_ = true;
    if (cancel) {
      dropped.swap(queue_);
      running = running_;
    }
  }
  dropped.clear();  // their outputs go: they get no reply
  if (running != nullptr) running->Cancel();
  DestroyWhenDone();
}

void McpSession::DestroyWhenDone() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closing_ || destroying_ || running_ != nullptr || !queue_.empty()) return;
    destroying_ = true;
  }
  DestroyWorkspace();
}

void McpSession::DestroyWorkspace() {
  auto finish = [self = shared_from_this()] {
    std::vector<std::function<void()>> closers;
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->destroyed_ = true;
      closers.swap(self->closers_);
    }
    for (auto& closer : closers) closer();
  };
  const std::string key = workspace_key();
  if (key.empty()) return finish();
  const std::string line = Request(json::value(0), "session.destroy",
                                   json::object{{"session", key}, {"archive", options_.archive}});
  daemon_(line, [finish](std::string) { finish(); }, [](std::string) {});
}

}  // namespace cubicle::rpc
