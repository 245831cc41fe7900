// exec.follow (docs/protocol.md): a managed execution's output pushed to
// its client as it is kept, as exec.output notifications, then its end as
// the reply. Nothing polls: the capture tells the follower (LiveOutput's
// watchers), and the follower sends from the control thread, since the
// capture's own thread must never wait on a client's socket or stdout.
#include <algorithm>
#include <atomic>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "rpc/daemon.h"
#include "rpc/execution.h"
#include "rpc/results_json.h"

namespace cubicle::rpc {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// One notification's data at most: a client reads the stream in pieces of
// a size it can hold, whatever the capture budget is.
constexpr size_t kMaxPiece = 64 << 10;

std::string OutputNotification(const std::string& id, int stream, size_t offset, absl::string_view data) {
  json::object params{{"exec_id", id}, {"stream", stream == 0 ? "stdout" : "stderr"}, {"offset", offset}};
  if (ValidUtf8(data)) {
    params["data"] = json::string_view(data.data(), data.size());
  } else {
    params["data_base64"] = absl::Base64Escape(data);
  }
  return json::serialize(json::object{{"jsonrpc", "2.0"}, {"method", "exec.output"}, {"params", std::move(params)}});
}

// Sends `rest` (its stream's bytes from offset `base` on) in pieces that
// never split a character (unless the text is not UTF-8 there anyway);
// returns how much went out. Short of the end (`final` false), a character
// cut off at the very end waits for its other bytes.
size_t SendPieces(const std::function<void(std::string)>& notify, const std::string& id, int stream,
                  absl::string_view rest, size_t base, bool final) {
  const size_t n = final ? rest.size() : Utf8Boundary(rest);
  for (size_t at = 0; at < n;) {
    size_t piece = std::min(kMaxPiece, n - at);
    if (at + piece < n) {
      const size_t whole = Utf8Boundary(rest.substr(at, piece));
      if (whole > 0) piece = whole;
    }
    if (notify) notify(OutputNotification(id, stream, base + at, rest.substr(at, piece)));
    at += piece;
  }
  return n;
}

}  // namespace

struct Daemon::Follower {
  std::shared_ptr<Execution> exec;
  std::function<void(std::string)> notify;
  std::mutex mu;  // one Pump at a time, so pieces go out in order
  size_t offsets[2] = {0, 0};
  uint64_t watcher = 0;
  std::atomic<bool> scheduled{false};
};

void Daemon::Pump(Follower& f, bool final) {
  std::lock_guard<std::mutex> lock(f.mu);
  for (int stream = 0; stream < 2; ++stream) {
    std::string text;
    {
      std::lock_guard<std::mutex> live_lock(f.exec->live->mu);
      const std::string& all = stream == 0 ? f.exec->live->out : f.exec->live->err;
      if (f.offsets[stream] < all.size()) text = all.substr(f.offsets[stream]);
    }
    f.offsets[stream] += SendPieces(f.notify, f.exec->id, stream, text, f.offsets[stream], final);
  }
}

void Daemon::ExecFollow(Request request) {
  auto answer = [&](Expected<json::value> result) { request.replies->Add(ReplyTo(request.call, result)); };
  Expected<const json::object*> params = ParamsObject(request.call.params);
  if (!params.ok()) return answer(std::move(params).error());
  if (auto bad = RejectUnknown(**params, {"exec_id", "stdout_offset", "stderr_offset"})) return answer(*bad);
  Expected<std::optional<std::string>> id = GetString(**params, "exec_id", true);
  if (!id.ok()) return answer(std::move(id).error());
  size_t offsets[2] = {0, 0};
  const char* names[2] = {"stdout_offset", "stderr_offset"};
  for (int stream = 0; stream < 2; ++stream) {
    Expected<std::optional<int64_t>> offset = GetInt64(**params, names[stream], false, 0);
    if (!offset.ok()) return answer(std::move(offset).error());
    offsets[stream] = static_cast<size_t>(offset->value_or(0));
  }
  std::shared_ptr<Execution> exec;
  {
    std::lock_guard<std::mutex> lock(exec_mu_);
    auto it = executions_.find(**id);
    if (it != executions_.end()) exec = it->second;
  }
  if (exec == nullptr) return FollowRecorded(std::move(request), **id, offsets);

  auto f = std::make_shared<Follower>();
  f->exec = exec;
  f->notify = request.notify;
  std::copy(offsets, offsets + 2, f->offsets);
  std::unique_lock<std::mutex> lock(exec_mu_);
  if (exec->ended() || cut_off_) {
    json::value status = exec->StatusJson();
    lock.unlock();
    Pump(*f, /*final=*/exec->ended());
    return answer(std::move(status));
  }
  Defer(request);
  const uint64_t id_of_follower = ++next_waiter_;
  f->watcher = id_of_follower;
  auto shared = std::make_shared<Request>(std::move(request));
  auto unwatch = [f] {
    std::lock_guard<std::mutex> live_lock(f->exec->live->mu);
    f->exec->live->watchers.erase(f->watcher);
  };
  // Its end: the rest of the output, then the reply, both on the control
  // thread, behind every piece a watcher queued there before.
  exec->waiters[id_of_follower] = [this, f, shared, unwatch](json::value status) mutable {
    unwatch();
    asio::post(control_, [this, f, shared, status = std::move(status)]() mutable {
      Pump(*f, /*final=*/true);
      Finish(*shared, std::move(status));
    });
  };
  {
    std::lock_guard<std::mutex> live_lock(exec->live->mu);
    exec->live->watchers[id_of_follower] = [this, f] {
      if (f->scheduled.exchange(true)) return;  // a pump is queued: it sends this too
      asio::post(control_, [this, f] {
        f->scheduled = false;
        Pump(*f, /*final=*/false);
      });
    };
  }
  lock.unlock();
  // What was kept before it watched.
  asio::post(control_, [this, f] { Pump(*f, /*final=*/false); });
  // Its client left, or the daemon ends its waits: answered with the
  // state now.
  auto take = [this, exec, id_of_follower, shared, unwatch] {
    std::unique_lock<std::mutex> lock(exec_mu_);
    auto it = exec->waiters.find(id_of_follower);
    if (it == exec->waiters.end()) return;  // ended: its waiter answers
    exec->waiters.erase(it);
    json::value status = exec->StatusJson();
    lock.unlock();
    unwatch();
    asio::post(control_, [this, shared, status = std::move(status)]() mutable { Finish(*shared, std::move(status)); });
  };
  if (!shared->cancel->SetStop(take)) take();
}

void Daemon::FollowRecorded(Request request, const std::string& id, const size_t offsets[2]) {
  // Ended long ago or before a restart: what the records kept, at once.
  json::value raw = json::object{{"exec_id", id}};
  std::optional<json::value> status = RecordedStatus(raw);
  if (!status.has_value()) {
    return request.replies->Add(
        ReplyTo(request.call, Error{kNotFound, absl::StrCat("no execution '", id, "'"), nullptr}));
  }
  for (int stream = 0; stream < 2; ++stream) {
    bool ended = false;
    Expected<std::string> text = ExecOutput(id, stream == 0, &ended);
    if (!text.ok()) continue;
    const size_t from = std::min(offsets[stream], text->size());
    (void)SendPieces(request.notify, id, stream, absl::string_view(*text).substr(from), from, /*final=*/true);
  }
  request.replies->Add(ReplyTo(request.call, std::move(*status)));
}

}  // namespace cubicle::rpc
