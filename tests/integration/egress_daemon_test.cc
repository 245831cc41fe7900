// Egress observed through the daemon and the gateway engine: every decision
// line tagged with the request id of the request whose sandbox made the
// connection (pooled, cold and warm-template routes), the egress metrics
// counting by decision and rule and never going down, and the in-process
// gateway under hundreds of tunnels and re-tagging.
#include "tests/integration/egress_fixture.h"

namespace cubicle::test_support {
namespace {

// gtest wants one fixture class per suite, and each test file has its own
// copy of EgressTest: these tests are a suite of their own.
class EgressDaemonTest : public EgressTest {};

// The egress families of the daemon's metrics, read from its --metrics
// socket.
struct EgressScrape {
  bool ok = false;
  std::map<std::string, uint64_t> decisions;  // summed over the rules
  std::map<std::pair<std::string, std::string>, uint64_t> rules;
  std::map<std::string, uint64_t> bytes;  // by direction
  uint64_t gateways = 0;
  std::string text;
};

EgressScrape ScrapeEgress(const std::string& socket) {
  EgressScrape s;
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, socket.c_str(), sizeof(a.sun_path) - 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return s;
  if (!SendAll(fd.get(), "GET /metrics HTTP/1.0\r\n\r\n")) return s;
  bool eof = false;
  for (int i = 0; i < 100 && !eof; ++i) ReadSome(fd.get(), absl::Milliseconds(100), &s.text, &eof);  // at most 10 s
  if (!eof || !absl::StartsWith(s.text, "HTTP/1.0 200")) return s;
  s.ok = true;
  for (absl::string_view line : absl::StrSplit(s.text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::ByAnyChar("{\"} "), absl::SkipEmpty());
    uint64_t n = 0;
    if (parts.empty() || !absl::SimpleAtoi(parts.back(), &n)) continue;
    if (parts[0] == "cubicle_egress_connections_total" && parts.size() == 6 && parts[1] == "decision=" &&
        parts[3] == ",rule=") {
      s.decisions[parts[2]] += n;
      s.rules[{parts[2], parts[4]}] += n;
    } else if (parts[0] == "cubicle_egress_bytes_total" && parts.size() == 4) {
      s.bytes[parts[2]] = n;
    } else if (parts[0] == "cubicle_egress_gateways" && parts.size() == 2) {
      s.gateways = n;
    }
  }
  return s;
}

// Waits (bounded: 20 s) for a scrape `done` accepts, checking on the way
// that no count ever went down; the last scrape.
EgressScrape ScrapeUntil(const std::string& socket, const EgressScrape& from,
                         const std::function<bool(const EgressScrape&)>& done) {
  EgressScrape last = from;
  for (int i = 0; i < 200; ++i) {
    EgressScrape s = ScrapeEgress(socket);
    EXPECT_TRUE(s.ok) << s.text;
    if (!s.ok) return s;
    for (const auto& [key, n] : last.rules) {
      EXPECT_GE(s.rules[key], n) << key.first << "/" << key.second << " went down: " << s.text;
    }
    for (const auto& [direction, n] : last.bytes) EXPECT_GE(s.bytes[direction], n) << direction << ": " << s.text;
    last = s;
    if (done(s)) return s;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ADD_FAILURE() << "the metrics never got there: " << last.text;
  return last;
}

// Through the daemon, every decision line of a connection a sandbox made
// for a request carries that request's id, as the daemon's request log
// has it: on the pooled route (a zygote a fork server built before any
// request, tagged at hand-off) and on the cold one (a narrowed policy: a
// sandbox built for the request).
TEST_F(EgressDaemonTest, DaemonTagsEachDecisionWithItsRequestId) {
  SocketDaemon daemon(SocketDaemon::Options{{"--config", WriteWebConfig()}, std::nullopt, {"CUBICLE_LOG_LEVEL=info"}});
  ASSERT_TRUE(daemon.up());
  auto warm = [&] {
    boost::json::value r =
        daemon.Call(RequestLine(100, "pool.warm", R"({"profile":"web","count":1,"timeout_ms":20000})"));
    ASSERT_TRUE(r.is_object() && r.as_object().contains("result")) << boost::json::serialize(r);
  };
  auto stdout_of = [](const boost::json::value& reply) {
    const boost::json::value* result = reply.is_object() ? reply.as_object().if_contains("result") : nullptr;
    return result != nullptr ? std::string(result->at("stdout").as_string()) : boost::json::serialize(reply);
  };
  // Two through the pool, each on a zygote ready before it came; one cold.
  warm();
  const std::string pooled_http = stdout_of(daemon.Call(FetchLine(1, Url("http", kName, "/pooled-1"))));
  warm();
  const std::string pooled_https = stdout_of(daemon.Call(FetchLine(2, Url("https", kName, "/pooled-2"))));
  const std::string cold = stdout_of(daemon.Call(
      FetchLine(3, Url("http", kOtherName, "/cold"), absl::StrCat(R"({"allow_domains": [")", kOtherName, R"("]})"))));
  EXPECT_TRUE(absl::StrContains(pooled_http, "hello from http /pooled-1")) << pooled_http;
  EXPECT_TRUE(absl::StrContains(pooled_https, "hello from https /pooled-2")) << pooled_https;
  EXPECT_TRUE(absl::StrContains(cold, "hello from http /cold")) << cold;
  boost::json::value stats = daemon.Call(RequestLine(101, "pool.stats"));
  EXPECT_EQ(stats.at("result").at("pools").at("web").at("hits"), 2) << "both pooled runs were hits";
  ProcessRun ended = daemon.Stop();
  ASSERT_EQ(ended.exit_code, 0) << ended.err;

  std::map<int64_t, std::string> request_ids = RequestIds(ended.err);
  for (int64_t id : {1, 2, 3}) {
    ASSERT_EQ(request_ids.count(id), 1u) << "no request line for " << id << ": " << ended.err;
    EXPECT_TRUE(absl::StartsWith(request_ids[id], "q")) << request_ids[id];
  }
  EXPECT_NE(request_ids[1], request_ids[2]) << "two requests through one pool, two ids";

  std::map<std::string, std::vector<std::string>> tagged;  // "METHOD HOST" → request ids
  for (const auto& line : Decisions()) {
    tagged[absl::StrCat(Str(line, "method"), " ", Str(line, "host"))].push_back(Str(line, "request_id"));
  }
  EXPECT_EQ(tagged[absl::StrCat("GET ", kName)], std::vector<std::string>{request_ids[1]});
  EXPECT_EQ(tagged[absl::StrCat("CONNECT ", kName)], std::vector<std::string>{request_ids[2]});
  EXPECT_EQ(tagged[absl::StrCat("GET ", kOtherName)], std::vector<std::string>{request_ids[3]});
  EXPECT_EQ(tagged.size(), 3u);
}

// The same for a warm profile's zygotes, whose Python a fork server forks
// from the profile's template: the template's own sandbox is not the
// request's.
TEST_F(EgressDaemonTest, DaemonTagsTheRequestsOfAWarmTemplatesZygotes) {
  SocketDaemon daemon(
      SocketDaemon::Options{{"--config", WriteWebConfig(/*warm=*/true)}, std::nullopt, {"CUBICLE_LOG_LEVEL=info"}});
  ASSERT_TRUE(daemon.up());
  std::vector<std::string> outs;
  for (int64_t id : {1, 2}) {
    boost::json::value warmed =
        daemon.Call(RequestLine(100 + id, "pool.warm", R"({"profile":"web","count":1,"timeout_ms":30000})"));
    ASSERT_TRUE(warmed.is_object() && warmed.as_object().contains("result")) << boost::json::serialize(warmed);
    boost::json::value reply = daemon.Call(FetchLine(id, Url("http", kName, absl::StrCat("/warm-", id))));
    ASSERT_TRUE(reply.is_object() && reply.as_object().contains("result")) << boost::json::serialize(reply);
    EXPECT_EQ(reply.at("result").at("warm"), true) << boost::json::serialize(reply);
    outs.push_back(std::string(reply.at("result").at("stdout").as_string()));
  }
  EXPECT_TRUE(absl::StrContains(outs[0], "hello from http /warm-1")) << outs[0];
  EXPECT_TRUE(absl::StrContains(outs[1], "hello from http /warm-2")) << outs[1];
  ProcessRun ended = daemon.Stop();
  ASSERT_EQ(ended.exit_code, 0) << ended.err;
  std::map<int64_t, std::string> ids = RequestIds(ended.err);
  ASSERT_EQ(ids.size(), 4u) << ended.err;  // two pool.warm, two runs
  std::vector<std::string> tagged;
  for (const auto& line : Decisions()) tagged.push_back(Str(line, "request_id"));
  std::sort(tagged.begin(), tagged.end());
  std::vector<std::string> expected = {ids[1], ids[2]};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(tagged, expected);
}

// The daemon's metrics count each connection once, by decision and rule,
// as it ends; a gateway that has exited (a narrowed request's, gone with
// its sandbox) takes none of its counts with it.
TEST_F(EgressDaemonTest, DaemonMetricsCountConnectionsAndKeepAnExitedGatewaysCounts) {
  const std::string metrics = dir_.Join("metrics.sock");
  SocketDaemon daemon({"--config", WriteWebConfig(), "--metrics", absl::StrCat("unix:", metrics)});
  ASSERT_TRUE(daemon.up());
  boost::json::value r =
      daemon.Call(RequestLine(100, "pool.warm", R"({"profile":"web","count":1,"timeout_ms":20000})"));
  ASSERT_TRUE(r.is_object() && r.as_object().contains("result")) << boost::json::serialize(r);
  auto run = [&](int64_t id, const std::string& url, const std::string& network = "") {
    boost::json::value reply = daemon.Call(FetchLine(id, url, network));
    const boost::json::value* result = reply.is_object() ? reply.as_object().if_contains("result") : nullptr;
    return result != nullptr ? std::string(result->at("stdout").as_string()) : boost::json::serialize(reply);
  };
  const EgressScrape before = ScrapeEgress(metrics);
  ASSERT_TRUE(before.ok) << before.text;
  EXPECT_EQ(before.gateways, 1u) << "the idle zygote's: " << before.text;

  const std::string allowed = run(1, Url("http", kName, "/counted"));
  const std::string denied = run(2, Url("http", "nowhere.egress.test", "/refused"));
  EXPECT_TRUE(absl::StrContains(allowed, "STATUS 200")) << allowed;
  EXPECT_TRUE(absl::StrContains(denied, "STATUS 403")) << denied;
  auto decided = [](const EgressScrape& s, const char* decision) {
    auto it = s.decisions.find(decision);
    return it == s.decisions.end() ? uint64_t{0} : it->second;
  };
  auto rule = [](const EgressScrape& s, const char* decision, const char* rule) {
    auto it = s.rules.find({decision, rule});
    return it == s.rules.end() ? uint64_t{0} : it->second;
  };
  // Counted as each connection ends, which may be just after the reply.
  const EgressScrape after = ScrapeUntil(metrics, before, [&](const EgressScrape& s) {
    return decided(s, "allow") >= decided(before, "allow") + 1 && decided(s, "deny") >= decided(before, "deny") + 1;
  });
  EXPECT_EQ(decided(after, "allow"), decided(before, "allow") + 1) << after.text;
  EXPECT_EQ(decided(after, "deny"), decided(before, "deny") + 1) << after.text;
  EXPECT_EQ(rule(after, "allow", "http"), rule(before, "allow", "http") + 1) << after.text;
  EXPECT_EQ(rule(after, "deny", "domain_allowlist"), rule(before, "deny", "domain_allowlist") + 1) << after.text;
  EXPECT_EQ(after.rules.size(), 2u) << "nothing else was counted: " << after.text;
  EXPECT_GT(after.bytes.at("up"), 0u) << after.text;
  EXPECT_GT(after.bytes.at("down"), 0u) << after.text;

  // A narrowed request: its revision's gateway starts for its sandbox and
  // exits with it.
  const std::string narrowed =
      run(3, Url("http", kName, "/narrowed"), absl::StrCat(R"({"allow_domains": [")", kName, R"("]})"));
  EXPECT_TRUE(absl::StrContains(narrowed, "STATUS 200")) << narrowed;
  const EgressScrape gone = ScrapeUntil(metrics, after, [&](const EgressScrape& s) {
    return rule(s, "allow", "http") >= rule(after, "allow", "http") + 1 && s.gateways == before.gateways;
  });
  EXPECT_EQ(rule(gone, "allow", "http"), rule(after, "allow", "http") + 1) << gone.text;
  EXPECT_EQ(rule(gone, "deny", "domain_allowlist"), rule(after, "deny", "domain_allowlist")) << gone.text;
  EXPECT_EQ(gone.gateways, 1u) << gone.text;
  EXPECT_GT(gone.bytes.at("up"), after.bytes.at("up")) << gone.text;
  const EgressScrape later = ScrapeEgress(metrics);
  EXPECT_EQ(later.rules, gone.rules) << later.text;
  ProcessRun ended = daemon.Stop();
  EXPECT_EQ(ended.exit_code, 0) << ended.err;
}

// The gateway engine alone, in this process (no sandbox; the bridge's
// hand-off done here with the function init runs): hundreds of open tunnels, and it still answers a new
// connection at once; detaching the sandbox closes every one of them.
class EgressGatewayTest : public HostHygieneTest {
 protected:
  void SetUp() override {
    HostHygieneTest::SetUp();
    REQUIRE_HOST(Loopback());
  }
};

UniqueFd ListenLoopback(uint16_t* port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(::listen(fd.get(), 1024), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

UniqueFd ConnectLoopback(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  timeval limit = {10, 0};  // every read below is bounded
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  return fd;
}

std::string ReadHead(int fd) {
  std::string got;
  char c;
  while (got.find("\r\n\r\n") == std::string::npos && got.size() < 1000 && ::recv(fd, &c, 1, 0) == 1) got.push_back(c);
  return got;
}

// An in-process gateway allowing kName (resolved to 127.0.0.1) on `ports`,
// logging to DIR/log.jsonl, with one sandbox `sandbox` attached: `channel`
// is that sandbox's end. Empty `gateway` (and a test failure) when it
// could not be started.
struct LoopbackGateway {
  std::shared_ptr<egress::Gateway> gateway;
  egress::Attachment attachment;
  UniqueFd channel;
};
LoopbackGateway StartLoopbackGateway(const TempDir& dir, std::vector<uint16_t> ports, const std::string& sandbox,
                                     std::optional<size_t> max_connections = std::nullopt) {
  LoopbackGateway out;
  egress::Policy policy;
  policy.mode = egress::NetMode::kAllowlist;
  policy.domains = {*egress::ParseDomainPattern(kName)};
  policy.ports = std::move(ports);
  policy.allow_cidrs = {*egress::ParseCidr("127.0.0.1/32")};
  policy.resolve = {*egress::ParseResolve(absl::StrCat(kName, "=127.0.0.1"))};
  if (max_connections.has_value()) policy.budgets.max_connections = *max_connections;
  policy.log_path = dir.Join("log.jsonl");
  absl::StatusOr<std::shared_ptr<egress::Gateway>> gateway = egress::Gateway::Start(policy);
  EXPECT_TRUE(gateway.ok()) << gateway.status();
  if (!gateway.ok()) return out;
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  out.channel.reset(sv[1]);
  absl::StatusOr<egress::Attachment> attachment = (*gateway)->Attach(sandbox, UniqueFd(sv[0]));
  EXPECT_TRUE(attachment.ok()) << attachment.status();
  if (!attachment.ok()) return out;
  out.gateway = *std::move(gateway);
  out.attachment = *std::move(attachment);
  return out;
}

TEST_F(EgressGatewayTest, HundredsOfTunnelsStayResponsiveAndCloseWithTheSandbox) {
  constexpr int kTunnels = 300;
  // Each tunnel holds about eight fds in this process (the client's and the
  // gateway's sockets, the upstream one, the splice pipes): past a soft
  // RLIMIT_NOFILE of 1024, a common default, though rarely past the hard one.
  REQUIRE_HOST(OpenFiles(kTunnels * 10));
  TempDir dir;
  // The upstream: a listener nobody accepts on (the kernel completes the
  // handshakes into its backlog), and an echo server.
  uint16_t hold_port = 0, echo_port = 0, bridge_port = 0;
  UniqueFd hold = ListenLoopback(&hold_port);
  UniqueFd echo = ListenLoopback(&echo_port);
  UniqueFd bridge = ListenLoopback(&bridge_port);
  int nonblocking = ::fcntl(bridge.get(), F_GETFL) | O_NONBLOCK;
  ::fcntl(bridge.get(), F_SETFL, nonblocking);

  LoopbackGateway gw = StartLoopbackGateway(dir, {hold_port, echo_port}, "stress", kTunnels + 10);
  ASSERT_NE(gw.gateway, nullptr);
  UniqueFd& channel = gw.channel;
  egress::Attachment* attachment = &gw.attachment;
  std::shared_ptr<egress::Gateway>* gateway = &gw.gateway;

  // As root, the gateway's thread is not: unprivileged ids, no capabilities.
  if (IsRoot()) {
    bool found = false;
    for (const std::string& tid : ListDirectory("/proc/self/task")) {
      if (ReadFile(absl::StrCat("/proc/self/task/", tid, "/comm")) != "cubicle-egress\n") continue;
      const std::string status = ReadFile(absl::StrCat("/proc/self/task/", tid, "/status"));
      if (StatusField(status, "Uid") != "999999\t999999\t999999\t999999") continue;  // another gateway's
      found = true;
      EXPECT_EQ(StatusField(status, "Gid"), "999999\t999999\t999999\t999999");
      EXPECT_EQ(StatusField(status, "CapEff"), "0000000000000000");
      EXPECT_EQ(StatusField(status, "CapPrm"), "0000000000000000");
      EXPECT_EQ(StatusField(status, "NoNewPrivs"), "1");
      EXPECT_EQ(StatusField(status, "Seccomp"), "2");  // filter mode
    }
    EXPECT_TRUE(found) << "no unprivileged cubicle-egress thread";
    EXPECT_EQ(::geteuid(), 0u) << "the rest of the process keeps its ids";
  }

  auto open_tunnel = [&](uint16_t port) {
    UniqueFd c = ConnectLoopback(bridge_port);
    egress::bridge::PassPending(bridge.get(), channel.get());
    std::string req = absl::StrCat("CONNECT ", kName, ":", port, " HTTP/1.1\r\n\r\n");
    EXPECT_EQ(::send(c.get(), req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    return c;
  };
  std::vector<UniqueFd> tunnels;
  for (int i = 0; i < kTunnels; ++i) tunnels.push_back(open_tunnel(hold_port));
  for (UniqueFd& t : tunnels) ASSERT_EQ(ReadHead(t.get()), "HTTP/1.1 200 Connection established\r\n\r\n");

  // One more, to a server that answers: served while the others stay open.
  UniqueFd e = open_tunnel(echo_port);
  ASSERT_EQ(ReadHead(e.get()), "HTTP/1.1 200 Connection established\r\n\r\n");
  pollfd p = {echo.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10'000), 1);
  UniqueFd served(::accept4(echo.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_EQ(::send(e.get(), "ping", 4, MSG_NOSIGNAL), 4);
  char buf[8] = {};
  ASSERT_EQ(::recv(served.get(), buf, 4, MSG_WAITALL), 4);
  ASSERT_EQ(::send(served.get(), buf, 4, MSG_NOSIGNAL), 4);
  char back[8] = {};
  ASSERT_EQ(::recv(e.get(), back, 4, MSG_WAITALL), 4);
  EXPECT_EQ(std::string(back, 4), "ping");

  // The sandbox goes: every tunnel is closed (EOF, not a timeout).
  *attachment = egress::Attachment();
  for (UniqueFd& t : tunnels) {
    char c;
    ASSERT_EQ(::recv(t.get(), &c, 1, 0), 0);
  }
  gateway->reset();
  std::vector<std::string> lines = Lines(ReadFile(dir.Join("log.jsonl")));
  EXPECT_EQ(lines.size(), static_cast<size_t>(kTunnels + 1));
  size_t gone = 0;
  for (const std::string& line : lines) gone += absl::StrContains(line, R"("end":"sandbox_gone")");
  EXPECT_EQ(gone, static_cast<size_t>(kTunnels + 1));
}

// A tag holds for the connections that reach the gateway after it, until
// the next one (a sandbox that serves one request after another); a
// connection keeps the tag it came under. The counts see every connection
// once, as it ends.
TEST_F(EgressGatewayTest, ATagHoldsForTheConnectionsThatComeAfterIt) {
  TempDir dir;
  uint16_t ports[3] = {}, bridge_port = 0;
  std::vector<UniqueFd> upstreams;  // listeners nobody accepts on
  for (uint16_t& port : ports) upstreams.push_back(ListenLoopback(&port));
  UniqueFd bridge = ListenLoopback(&bridge_port);
  ::fcntl(bridge.get(), F_SETFL, ::fcntl(bridge.get(), F_GETFL) | O_NONBLOCK);
  LoopbackGateway gw = StartLoopbackGateway(dir, {ports[0], ports[1], ports[2]}, "reused");
  ASSERT_NE(gw.gateway, nullptr);
  UniqueFd& channel = gw.channel;
  egress::Attachment* attachment = &gw.attachment;
  std::shared_ptr<egress::Gateway>* gateway = &gw.gateway;
  auto connect = [&](const std::string& host, uint16_t port) {
    UniqueFd c = ConnectLoopback(bridge_port);
    egress::bridge::PassPending(bridge.get(), channel.get());
    std::string req = absl::StrCat("CONNECT ", host, ":", port, " HTTP/1.1\r\n\r\n");
    EXPECT_EQ(::send(c.get(), req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    return c;
  };
  const std::string established = "HTTP/1.1 200 Connection established\r\n\r\n";
  UniqueFd untagged = connect(kName, ports[0]);
  ASSERT_EQ(ReadHead(untagged.get()), established);
  attachment->Tag("q1");
  UniqueFd first = connect(kName, ports[1]);
  ASSERT_EQ(ReadHead(first.get()), established);
  attachment->Tag("q2");
  UniqueFd refused = connect(kOtherName, ports[0]);
  ASSERT_TRUE(absl::StartsWith(ReadHead(refused.get()), "HTTP/1.1 403")) << "not on the list";
  attachment->Tag("not an id");  // ignored
  UniqueFd second = connect(kName, ports[2]);
  ASSERT_EQ(ReadHead(second.get()), established);
  *attachment = egress::Attachment();  // every connection ends
  const egress::Counts counts = (*gateway)->CountsSoFar();
  gateway->reset();

  std::map<std::string, std::string> tags;  // "HOST:PORT" → request_id ("-": none)
  for (const std::string& line : Lines(ReadFile(dir.Join("log.jsonl")))) {
    boost::json::object o = boost::json::parse(line).as_object();
    const boost::json::value* id = o.if_contains("request_id");
    tags[absl::StrCat(o.at("host").as_string().c_str(), ":", o.at("port").as_int64())] =
        id != nullptr ? std::string(id->as_string()) : "-";
  }
  EXPECT_EQ(tags, (std::map<std::string, std::string>{{absl::StrCat(kName, ":", ports[0]), "-"},
                                                      {absl::StrCat(kName, ":", ports[1]), "q1"},
                                                      {absl::StrCat(kOtherName, ":", ports[0]), "q2"},
                                                      {absl::StrCat(kName, ":", ports[2]), "q2"}}));
  using Key = std::pair<std::string, std::string>;
  EXPECT_EQ(counts.connections,
            (std::map<Key, uint64_t>{{{"allow", "connect"}, 3}, {{"deny", "domain_allowlist"}, 1}}));
}

}  // namespace
}  // namespace cubicle::test_support
