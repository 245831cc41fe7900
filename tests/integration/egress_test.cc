// Network egress end to end: real sandboxes (through the cubicle binary and
// the launcher) reaching test servers on 127.0.0.1 through the bridge in
// init and the host gateway. The servers — plain HTTP and TLS with a CA this
// test makes with the openssl CLI — are started and stopped by each test and
// record every request they see, so a refused request is shown to have
// reached nothing. Names point at them with --egress-resolve; 127.0.0.1 is
// let through with --egress-allow-cidr 127.0.0.1/32.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "egress/bridge.h"
#include "egress/gateway.h"
#include "egress/gateway_process.h"
#include "tests/support/daemon_client.h"
#include "tests/support/host_probes.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

constexpr char kName[] = "files.egress.test";
constexpr char kOpenssl[] = "/usr/bin/openssl";
constexpr char kOtherName[] = "other.egress.test";

// The test servers: HTTP and HTTPS on ephemeral ports of 127.0.0.1. Each
// request is appended to seen.log as "KIND METHOD HOST PATH". /big/N answers
// N bytes.
constexpr char kServerScript[] = R"py(
import http.server, os, socketserver, ssl, sys, threading
d = sys.argv[1]
seen = open(os.path.join(d, "seen.log"), "a", buffering=1)
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        seen.write("%s %s %s %s\n" % (self.server.kind, self.command, self.headers.get("Host"), self.path))
        if self.path.startswith("/big/"):
            body = b"x" * int(self.path[5:])
        else:
            body = ("hello from %s %s\n" % (self.server.kind, self.path)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            pass
    def log_message(self, *args):
        pass
class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
plain = Server(("127.0.0.1", 0), Handler)
plain.kind = "http"
tls = Server(("127.0.0.1", 0), Handler)
tls.kind = "https"
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(os.path.join(d, "server.pem"), os.path.join(d, "server.key"))
tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
for s in (plain, tls):
    threading.Thread(target=s.serve_forever, daemon=True).start()
with open(os.path.join(d, "ports.tmp"), "w") as f:
    f.write("%d %d\n" % (plain.server_address[1], tls.server_address[1]))
os.rename(os.path.join(d, "ports.tmp"), os.path.join(d, "ports"))
threading.Event().wait()
)py";

// Inside the sandbox: fetch argv[1] with urllib (which finds the bridge via
// the proxy variables), verifying TLS against $CA_PEM. Prints STATUS/BODY,
// or ERROR with the exception.
constexpr char kFetchScript[] = R"py(
import os, ssl, sys, urllib.error, urllib.request
ctx = ssl.create_default_context(cadata=os.environ["CA_PEM"])
try:
    with urllib.request.urlopen(sys.argv[1], context=ctx, timeout=20) as r:
        body = r.read()
        print("STATUS", r.status)
        print("BODY", body[:100].decode(errors="replace").strip(), len(body))
except urllib.error.HTTPError as e:
    print("STATUS", e.code)
    print("BODY", e.read().decode(errors="replace").strip())
except Exception as e:
    print("ERROR", type(e).__name__, e)
)py";

bool RunQuietly(const std::vector<std::string>& argv) {
  ProcessRun run = RunProcess(argv, "", {}, absl::Seconds(60));
  EXPECT_EQ(run.exit_code, 0) << argv[0] << " " << argv[1] << ": " << run.err;
  return run.exit_code == 0;
}

class EgressTest : public HostHygieneTest {
 protected:
  // The CA and the server certificate (for both test names) are made once.
  static void SetUpTestSuite() {
    certs_ = new TempDir();
    if (!Executable(kOpenssl).present) return;  // every test skips, saying so
    const std::string d = certs_->path();
    const std::string ext = certs_->Join("san.ext");
    WriteFile(ext, absl::StrCat("subjectAltName=DNS:", kName, ",DNS:", kOtherName, "\n"));
    ok_ = RunQuietly({kOpenssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                      "/CN=cubicle egress test CA", "-keyout", d + "/ca.key", "-out", d + "/ca.pem"}) &&
          RunQuietly({kOpenssl, "req", "-newkey", "rsa:2048", "-nodes", "-subj",
                      absl::StrCat("/CN=", kName), "-keyout", d + "/server.key", "-out", d + "/server.csr"}) &&
          RunQuietly({kOpenssl, "x509", "-req", "-in", d + "/server.csr", "-CA", d + "/ca.pem", "-CAkey",
                      d + "/ca.key", "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", d + "/server.pem"});
    ca_pem_ = ReadFile(d + "/ca.pem");
  }
  static void TearDownTestSuite() {
    delete certs_;
    certs_ = nullptr;
  }

  void SetUp() override {
    HostHygieneTest::SetUp();
    // Sandboxes launched in this process exec the cubicle binary as their
    // gateway (this process is a test binary, not cubicle).
    egress::SetGatewayExecutable(CubicleBinary());
    // The test servers are the host's python3 on 127.0.0.1, with a CA made
    // by the openssl CLI.
    REQUIRE_HOST(Python3());
    REQUIRE_HOST(Executable(kOpenssl));
    REQUIRE_HOST(Loopback());
    ASSERT_TRUE(ok_) << "could not make the test certificates";
    for (const char* f : {"server.pem", "server.key"}) {
      ASSERT_TRUE(WriteFile(dir_.Join(f), ReadFile(certs_->Join(f))));
    }
    ASSERT_TRUE(WriteFile(dir_.Join("server.py"), kServerScript));
    server_ = std::make_unique<RunningProcess>(
        std::vector<std::string>{"/usr/bin/python3", "-I", dir_.Join("server.py"), dir_.path()});
    ASSERT_TRUE(server_->started());
    // Bounded: 1000 polls of 10 ms.
    for (int i = 0; i < 1000 && ReadFile(dir_.Join("ports")).empty(); ++i) ::usleep(10'000);
    std::vector<std::string> ports = absl::StrSplit(ReadFile(dir_.Join("ports")), absl::ByAnyChar(" \n"),
                                                    absl::SkipEmpty());
    ASSERT_EQ(ports.size(), 2u) << "the test server did not start: " << server_->Wait(absl::Seconds(1)).err;
    http_port_ = ports[0];
    https_port_ = ports[1];
  }

  void TearDown() override {
    if (server_ != nullptr) {
      server_->Signal(SIGKILL);
      server_->Wait(absl::Seconds(10));
      server_.reset();
    }
    HostHygieneTest::TearDown();
  }

  // Flags that let kName through to the test servers.
  std::vector<std::string> AllowFlags(bool with_cidr = true) const {
    std::vector<std::string> flags = {"--net",          "allowlist",   "--allow-domain", kName,
                                      "--allow-port",   http_port_,    "--allow-port",   https_port_,
                                      "--egress-resolve", absl::StrCat(kName, "=127.0.0.1"),
                                      "--egress-resolve", absl::StrCat(kOtherName, "=127.0.0.1"),
                                      "--egress-log",   log_path()};
    if (with_cidr) {
      flags.push_back("--egress-allow-cidr");
      flags.push_back("127.0.0.1/32");
    }
    return flags;
  }

  // `cubicle run FLAGS -- python3 -I -c FETCH URL`.
  ProcessRun Fetch(std::vector<std::string> flags, const std::string& url) const {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), flags.begin(), flags.end());
    for (const std::string& a : {std::string("--setenv"), std::string("CA_PEM"), ca_pem_, std::string("--"),
                                 std::string("/usr/bin/python3"), std::string("-I"), std::string("-c"),
                                 std::string(kFetchScript), url}) {
      args.push_back(a);
    }
    ProcessRun run = RunCubicle(args);
    EXPECT_FALSE(run.timed_out) << run.err;
    return run;
  }

  std::string Url(const std::string& scheme, const std::string& host, const std::string& path) const {
    return absl::StrCat(scheme, "://", host, ":", scheme == "https" ? https_port_ : http_port_, path);
  }

  std::string log_path() const { return dir_.Join("decisions.jsonl"); }
  std::vector<std::string> Seen() const { return Lines(ReadFile(dir_.Join("seen.log"))); }

  // The decision log, one object per line; every line must parse.
  std::vector<boost::json::object> Decisions() const {
    std::vector<boost::json::object> out;
    for (const std::string& line : Lines(ReadFile(log_path()))) {
      boost::system::error_code ec;
      boost::json::value v = boost::json::parse(line, ec);
      EXPECT_FALSE(ec) << line;
      if (!ec && v.is_object()) out.push_back(v.as_object());
    }
    return out;
  }

  static std::string Str(const boost::json::object& o, const char* key) {
    const boost::json::value* v = o.if_contains(key);
    return v != nullptr && v->is_string() ? std::string(v->as_string()) : "";
  }

  // A daemon configuration with profile "web": kName and kOtherName let
  // through to the test servers, its decisions logged to log_path(), a
  // pool of one; with `warm`, its zygotes' Python forked from a template.
  std::string WriteWebConfig(bool warm = false) const {
    return WriteConfig(
        dir_, absl::StrCat(R"({"profiles": {"web": {"pool": {"min_idle": 1, "max_idle": 1},)",
                           warm ? R"("interpreter": {"argv": ["/usr/bin/python3", "-I"], "preload": ["json"]},)" : "",
                           R"("network": {"allow_domains": [")", kName, R"(", ")", kOtherName, R"("], "allow_ports": [)", http_port_,
                           ",", https_port_, R"(], "allow_cidrs": ["127.0.0.1/32"], "resolve": [")", kName,
                           R"(=127.0.0.1", ")", kOtherName, R"(=127.0.0.1"], "log": ")", log_path(), R"("}}}})"));
  }

  // A request line: the fetch script in "web", narrowed to `network` when
  // given (a sandbox of its own, built for the request).
  std::string FetchLine(int64_t id, const std::string& url, const std::string& network = "") const {
    boost::json::object params{{"profile", "web"},
                               {"argv", boost::json::array{"/usr/bin/python3", "-I", "-c", kFetchScript, url}},
                               {"env", boost::json::object{{"CA_PEM", ca_pem_}}}};
    if (!network.empty()) params["network"] = boost::json::parse(network);
    return RequestLine(id, "sandbox.run", boost::json::serialize(params));
  }

  // JSON-RPC id → the daemon's request id, from its request log lines
  // (CUBICLE_LOG_LEVEL=info) on `err`.
  static std::map<int64_t, std::string> RequestIds(const std::string& err) {
    std::map<int64_t, std::string> ids;
    for (absl::string_view line : absl::StrSplit(err, '\n', absl::SkipEmpty())) {
      boost::system::error_code ec;
      boost::json::value v = boost::json::parse(boost::json::string_view(line.data(), line.size()), ec);
      if (ec || !v.is_object() || v.as_object().if_contains("msg") == nullptr || v.at("msg") != "request") continue;
      const boost::json::object& r = v.at("request").as_object();
      if (r.at("id").is_int64()) ids[r.at("id").as_int64()] = std::string(r.at("request_id").as_string());
    }
    return ids;
  }

  // The decision lines whose host is `host`.
  std::vector<boost::json::object> DecisionsFor(const std::string& host) const {
    std::vector<boost::json::object> out;
    for (const auto& line : Decisions()) {
      if (Str(line, "host") == host) out.push_back(line);
    }
    return out;
  }

  static TempDir* certs_;
  static bool ok_;
  static std::string ca_pem_;
  TempDir dir_;
  std::unique_ptr<RunningProcess> server_;
  std::string http_port_, https_port_;
};

TempDir* EgressTest::certs_ = nullptr;
bool EgressTest::ok_ = false;
std::string EgressTest::ca_pem_;

TEST_F(EgressTest, AllowedNameOverHttp) {
  ProcessRun run = Fetch(AllowFlags(), Url("http", kName, "/hello?x=1"));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "STATUS 200")) << run.out << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "hello from http /hello?x=1")) << run.out;
  // The server saw the request in origin form, with the Host of the URI.
  EXPECT_EQ(Seen(), std::vector<std::string>{absl::StrCat("http GET ", kName, ":", http_port_, " /hello?x=1")});
  std::vector<boost::json::object> log = Decisions();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(Str(log[0], "decision"), "allow");
  EXPECT_EQ(Str(log[0], "host"), kName);
  EXPECT_EQ(Str(log[0], "address"), "127.0.0.1");
  EXPECT_EQ(Str(log[0], "rule"), "http");
  EXPECT_FALSE(Str(log[0], "sandbox").empty());
  EXPECT_GT(log[0].at("bytes_up").to_number<int64_t>(), 0);
  EXPECT_GT(log[0].at("bytes_down").to_number<int64_t>(), 0);
  EXPECT_TRUE(log[0].contains("duration_us"));
}

TEST_F(EgressTest, AllowedNameOverHttpsVerifiesTheCertificateEndToEnd) {
  ProcessRun run = Fetch(AllowFlags(), Url("https", kName, "/secure"));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "STATUS 200")) << run.out << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "hello from https /secure")) << run.out;
  EXPECT_EQ(Seen(), std::vector<std::string>{absl::StrCat("https GET ", kName, ":", https_port_, " /secure")});
  std::vector<boost::json::object> log = Decisions();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(Str(log[0], "decision"), "allow");
  EXPECT_EQ(Str(log[0], "rule"), "connect");
  EXPECT_EQ(Str(log[0], "method"), "CONNECT");
  EXPECT_EQ(Str(log[0], "end"), "eof");
}

TEST_F(EgressTest, CurlOverHttpsWhenInstalled) {
  if (::access("/usr/bin/curl", X_OK) != 0) GTEST_SKIP() << "curl is not installed";
  std::vector<std::string> args = {"run"};
  for (const std::string& f : AllowFlags()) args.push_back(f);
  for (const std::string& a :
       {std::string("--setenv"), std::string("CA_PEM"), ca_pem_, std::string("--"), std::string("/bin/sh"),
        std::string("-c"),
        absl::StrCat("printf '%s' \"$CA_PEM\" > /tmp/ca.pem && /usr/bin/curl -sS --max-time 20 --cacert /tmp/ca.pem ",
                     Url("https", kName, "/curl"))}) {
    args.push_back(a);
  }
  ProcessRun run = RunCubicle(args);
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(run.out, "hello from https /curl\n") << run.err;
  EXPECT_EQ(Seen().size(), 1u);
}

TEST_F(EgressTest, NameNotOnTheListIs403NamingTheRuleAndReachesNothing) {
  for (const std::string scheme : {"http", "https"}) {
    ProcessRun run = Fetch(AllowFlags(), Url(scheme, kOtherName, "/nope"));
    EXPECT_EQ(run.exit_code, 0) << run.err;
    if (scheme == "http") {
      EXPECT_TRUE(absl::StrContains(run.out, "STATUS 403")) << run.out;
      EXPECT_TRUE(absl::StrContains(run.out, "domain_allowlist")) << run.out;
    } else {
      // urllib reports a refused CONNECT as an OSError carrying the status.
      EXPECT_TRUE(absl::StrContains(run.out, "403")) << run.out;
    }
  }
  EXPECT_EQ(Seen(), std::vector<std::string>{});
  std::vector<boost::json::object> log = Decisions();
  ASSERT_EQ(log.size(), 2u);
  for (const auto& line : log) {
    EXPECT_EQ(Str(line, "decision"), "deny");
    EXPECT_EQ(Str(line, "rule"), "domain_allowlist");
    EXPECT_EQ(Str(line, "host"), kOtherName);
  }
}

TEST_F(EgressTest, LookalikeNameIsRefused) {
  ProcessRun run = Fetch(AllowFlags(), Url("http", "evil-files.egress.test", "/"));
  EXPECT_TRUE(absl::StrContains(run.out, "STATUS 403")) << run.out << run.err;
  EXPECT_EQ(Seen(), std::vector<std::string>{});
}

TEST_F(EgressTest, AllowedNameResolvingToLoopbackIsRefusedWithoutTheCidr) {
  ProcessRun run = Fetch(AllowFlags(/*with_cidr=*/false), Url("http", kName, "/"));
  EXPECT_TRUE(absl::StrContains(run.out, "STATUS 403")) << run.out << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "address_class: loopback")) << run.out;
  EXPECT_EQ(Seen(), std::vector<std::string>{});
  std::vector<boost::json::object> log = Decisions();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(Str(log[0], "rule"), "address_class: loopback");
  EXPECT_EQ(Str(log[0], "address"), "127.0.0.1");
}

TEST_F(EgressTest, IpLiteralIsRefused) {
  // Not 127.0.0.1 itself: NO_PROXY sends that to the sandbox's own loopback.
  for (const std::string host : {"127.0.0.2", "[::1]", "8.8.8.8"}) {
    ProcessRun run = Fetch(AllowFlags(/*with_cidr=*/false), Url("http", host, "/"));
    EXPECT_TRUE(absl::StrContains(run.out, "STATUS 403")) << host << ": " << run.out << run.err;
    EXPECT_TRUE(absl::StrContains(run.out, "ip_literal")) << host << ": " << run.out;
  }
  EXPECT_EQ(Seen(), std::vector<std::string>{});
  std::vector<boost::json::object> log = Decisions();
  ASSERT_EQ(log.size(), 3u);
  for (const auto& line : log) EXPECT_EQ(Str(line, "rule"), "ip_literal");
}

// A name without an override is resolved on the host (here: "localhost"
// from /etc/hosts, by the gateway's unprivileged thread), and every
// address it resolves to must pass, not just the first.
TEST_F(EgressTest, NamesResolveOnTheHostAndEveryAddressIsChecked) {
  const std::string hosts = ReadFile("/etc/hosts");
  if (!absl::StrContains(hosts, "127.0.0.1") || !absl::StrContains(hosts, "localhost")) {
    GTEST_SKIP() << "/etc/hosts has no 127.0.0.1 localhost";
  }
  // Raw proxy requests: urllib would send "localhost" around the proxy (NO_PROXY).
  const std::string script = absl::StrCat(
      "import socket\n"
      "s = socket.create_connection(('127.0.0.1', 18118))\n"
      "s.sendall(b'GET http://localhost:", http_port_, "/dns HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n"
      "data = b''\n"
      "while True:\n"
      "    chunk = s.recv(4096)\n"
      "    if not chunk: break\n"
      "    data += chunk\n"
      "print(data.split(b'\\r\\n')[0].decode())\n"
      "print(data.split(b'\\r\\n\\r\\n', 1)[1].decode().strip())\n");
  auto run_with = [&](std::vector<std::string> cidrs) {
    std::vector<std::string> args = {"run", "--net", "allowlist", "--allow-domain", "localhost", "--allow-port",
                                     http_port_, "--egress-log", log_path()};
    for (const std::string& c : cidrs) {
      args.push_back("--egress-allow-cidr");
      args.push_back(c);
    }
    for (const std::string& a : {std::string("--"), std::string("/usr/bin/python3"), std::string("-I"),
                                 std::string("-c"), script}) {
      args.push_back(a);
    }
    ProcessRun run = RunCubicle(args);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return run.out;
  };
  // Every address localhost has here, let through: served.
  EXPECT_EQ(run_with({"127.0.0.1/32", "::1/128"}), "HTTP/1.1 200 OK\nhello from http /dns\n");
  EXPECT_EQ(Seen(), std::vector<std::string>{absl::StrCat("http GET localhost:", http_port_, " /dns")});
  if (absl::StrContains(hosts, "::1")) {
    // ::1 not covered: refused, although 127.0.0.1 is.
    std::string out = run_with({"127.0.0.1/32"});
    EXPECT_TRUE(absl::StartsWith(out, "HTTP/1.1 403 Forbidden\n")) << out;
    EXPECT_TRUE(absl::StrContains(out, "resolves to ::1 (loopback)")) << out;
    EXPECT_EQ(Seen().size(), 1u);
  }
}

// An answer with one refused address among allowed ones is refused: the
// gateway never picks the harmless one and connects to nothing.
TEST_F(EgressTest, OneRefusedAddressInTheAnswerRefusesTheName) {
  std::vector<std::string> flags = AllowFlags();
  for (std::string& f : flags) {
    if (f == absl::StrCat(kName, "=127.0.0.1")) f = absl::StrCat(kName, "=127.0.0.1,10.0.0.1");
  }
  ProcessRun run = Fetch(flags, Url("http", kName, "/"));
  EXPECT_TRUE(absl::StrContains(run.out, "STATUS 403")) << run.out << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "resolves to 10.0.0.1 (private (RFC 1918))")) << run.out;
  EXPECT_EQ(Seen(), std::vector<std::string>{});
  ASSERT_EQ(Decisions().size(), 1u);
  EXPECT_EQ(Str(Decisions()[0], "rule"), "address_class: private (RFC 1918)");
}

TEST_F(EgressTest, PortNotAllowedIsRefused) {
  std::vector<std::string> flags = AllowFlags();
  // Only the HTTPS server's port is allowed now.
  for (size_t i = 0; i + 1 < flags.size(); ++i) {
    if (flags[i] == "--allow-port" && flags[i + 1] == http_port_) flags.erase(flags.begin() + i, flags.begin() + i + 2);
  }
  ProcessRun run = Fetch(flags, Url("http", kName, "/"));
  EXPECT_TRUE(absl::StrContains(run.out, "STATUS 403")) << run.out << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "port_allowlist")) << run.out;
  EXPECT_EQ(Seen(), std::vector<std::string>{});
}

TEST_F(EgressTest, DirectConnectFromInsideFails) {
  std::vector<std::string> args = {"run"};
  for (const std::string& f : AllowFlags()) args.push_back(f);
  for (const std::string& a : {std::string("--"), std::string("/usr/bin/python3"), std::string("-I"),
                               std::string("-c"),
                               absl::StrCat("import socket\n"
                                            "for addr in ('127.0.0.1', '10.0.2.2'):\n"
                                            "    try:\n"
                                            "        socket.create_connection((addr, ",
                                            http_port_,
                                            "), timeout=5)\n"
                                            "        print(addr, 'connected')\n"
                                            "    except OSError as e:\n"
                                            "        print(addr, type(e).__name__)\n")}) {
    args.push_back(a);
  }
  ProcessRun run = RunCubicle(args);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  // 127.0.0.1 inside is the sandbox's own loopback; nothing else is routed.
  EXPECT_EQ(run.out, "127.0.0.1 ConnectionRefusedError\n10.0.2.2 OSError\n") << run.err;
  EXPECT_EQ(Seen(), std::vector<std::string>{});
}

// The payload holds no fd of the bridge or the gateway channel, cannot
// read init's, and sees only lo.
TEST_F(EgressTest, PayloadHoldsNothingOfTheBridge) {
  std::vector<std::string> args = {"run"};
  for (const std::string& f : AllowFlags()) args.push_back(f);
  for (const std::string& a :
       {std::string("--"), std::string("/usr/bin/python3"), std::string("-I"), std::string("-c"),
        std::string("import os, socket\n"
                    "print(sorted(os.listdir('/proc/self/fd')))\n"
                    "for fd in os.listdir('/proc/self/fd'):\n"
                    "    try:\n"
                    "        print(fd, os.readlink('/proc/self/fd/' + fd))\n"
                    "    except OSError: pass\n"
                    "try:\n"
                    "    print(os.listdir('/proc/1/fd'))\n"
                    "except OSError as e:\n"
                    "    print('init fds:', type(e).__name__)\n"
                    "print([n for _, n in socket.if_nameindex()])\n")}) {
    args.push_back(a);
  }
  ProcessRun run = RunCubicle(args);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  // 0-2 and the one listdir itself opens; no socket among them.
  EXPECT_TRUE(absl::StartsWith(run.out, "['0', '1', '2', '3']\n")) << run.out;
  EXPECT_FALSE(absl::StrContains(run.out, "socket:")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "init fds: PermissionError\n")) << run.out;
  EXPECT_TRUE(absl::EndsWith(run.out, "['lo']\n")) << run.out;
}

TEST_F(EgressTest, NetNoneRefusesInetSockets) {
  ProcessRun run = RunCubicle({"run", "--net", "none", "--", "/usr/bin/python3", "-I", "-c",
                               "import socket\ntry:\n    socket.socket(socket.AF_INET)\n    print('inet ok')\n"
                               "except OSError as e:\n    print('inet', e.errno)\n"
                               "import os\nprint(sorted(os.listdir('/sys/class/net')) if os.path.exists('/sys/class/net') else 'nosys')\n"
                               "print(os.environ.get('HTTP_PROXY'))\n"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(absl::StartsWith(run.out, "inet 1\n")) << run.out;  // EPERM
  EXPECT_TRUE(absl::EndsWith(run.out, "None\n")) << run.out;
}

TEST_F(EgressTest, ByteBudgetOverrunClosesTheConnectionAndIsLogged) {
  std::vector<std::string> flags = AllowFlags();
  flags.push_back("--egress-max-bytes");
  flags.push_back("64K");
  ProcessRun run = Fetch(flags, Url("http", kName, "/big/4000000"));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "ERROR")) << run.out;  // the body was cut short
  std::vector<boost::json::object> log = Decisions();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(Str(log[0], "decision"), "allow");
  EXPECT_EQ(Str(log[0], "end"), "budget_bytes");
  const int64_t moved = log[0].at("bytes_up").to_number<int64_t>() + log[0].at("bytes_down").to_number<int64_t>();
  EXPECT_GT(moved, 64 * 1024);
  EXPECT_LT(moved, 4'000'000);
}

TEST_F(EgressTest, IdleConnectionIsClosedAndLogged) {
  std::vector<std::string> args = {"run"};
  for (const std::string& f : AllowFlags()) args.push_back(f);
  for (const char* f : {"--egress-idle-timeout", "0.2"}) args.push_back(f);
  // A tunnel nobody speaks on: the gateway closes it (EOF; the 20 s socket
  // timeout only bounds the test).
  for (const std::string& a : {std::string("--"), std::string("/usr/bin/python3"), std::string("-I"),
                               std::string("-c"),
                               absl::StrCat("import socket\n"
                                            "a = socket.create_connection(('127.0.0.1', 18118), timeout=20)\n"
                                            "a.sendall(b'CONNECT ", kName, ":", https_port_,
                                            " HTTP/1.1\\r\\n\\r\\n')\n"
                                            "print(a.recv(100).split(b'\\r\\n')[0].decode())\n"
                                            "print('closed' if a.recv(100) == b'' else 'data')\n")}) {
    args.push_back(a);
  }
  ProcessRun run = RunCubicle(args);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "HTTP/1.1 200 Connection established\nclosed\n") << run.err;
  std::vector<boost::json::object> log = Decisions();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(Str(log[0], "decision"), "allow");
  EXPECT_EQ(Str(log[0], "end"), "idle_timeout");
}

TEST_F(EgressTest, ConnectionBudgetRefusesTheExtraConnection) {
  std::vector<std::string> flags = AllowFlags();
  flags.push_back("--egress-max-connections");
  flags.push_back("1");
  std::vector<std::string> args = {"run"};
  for (const std::string& f : flags) args.push_back(f);
  // One connection is held open (a CONNECT tunnel nobody speaks TLS on),
  // the second is refused.
  for (const std::string& a : {std::string("--"), std::string("/usr/bin/python3"), std::string("-I"),
                               std::string("-c"),
                               absl::StrCat("import socket\n"
                                            "a = socket.create_connection(('127.0.0.1', 18118))\n"
                                            "a.sendall(b'CONNECT ", kName, ":", https_port_,
                                            " HTTP/1.1\\r\\n\\r\\n')\n"
                                            "print(a.recv(100).split(b'\\r\\n')[0].decode())\n"
                                            "b = socket.create_connection(('127.0.0.1', 18118))\n"
                                            "b.sendall(b'CONNECT ", kName, ":", https_port_,
                                            " HTTP/1.1\\r\\n\\r\\n')\n"
                                            "print(b.recv(1000).split(b'\\r\\n')[0].decode())\n")}) {
    args.push_back(a);
  }
  ProcessRun run = RunCubicle(args);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "HTTP/1.1 200 Connection established\nHTTP/1.1 403 Forbidden\n") << run.err;
  bool logged = false;
  for (const auto& line : Decisions()) logged |= Str(line, "rule") == "budget_connections";
  EXPECT_TRUE(logged) << ReadFile(log_path());
}

TEST_F(EgressTest, BadPolicyFlagsAreUsageErrorsNamingTheValue) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--net", "allowlist", "--allow-domain", "*"}, "'*'"},
      {{"--net", "allowlist", "--allow-domain", "*."}, "'*.'"},
      {{"--net", "allowlist", "--allow-domain", ""}, "''"},
      {{"--net", "allowlist", "--allow-domain", "a.example", "--egress-allow-cidr", "10.0.0.0/33"}, "'10.0.0.0/33'"},
      {{"--net", "allowlist", "--allow-domain", "a.example", "--allow-port", "0"}, "'0'"},
      {{"--net", "allowlist", "--allow-domain", "a.example", "--allow-port", "70000"}, "'70000'"},
      {{"--net", "allowlist"}, "no domain"},
      {{"--net", "everything"}, "'everything'"},
      {{"--allow-domain", "a.example"}, "--net allowlist"},
      {{"--net", "allowlist", "--allow-domain", "a.example", "--seccomp", "no-network"}, "no-network"},
  };
  for (const auto& [flags, needle] : cases) {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), flags.begin(), flags.end());
    for (const char* a : {"--", "/bin/true"}) args.push_back(a);
    ProcessRun run = RunCubicle(args);
    EXPECT_EQ(run.exit_code, 2) << absl::StrJoin(flags, " ") << ": " << run.err;
    EXPECT_TRUE(absl::StrContains(run.err, needle)) << absl::StrJoin(flags, " ") << ": " << run.err;
  }
  EXPECT_EQ(Seen(), std::vector<std::string>{});
  EXPECT_EQ(ReadFile(log_path()), "");
}

// In process, through the launcher: sandboxes of one policy share one
// gateway process; another policy gets its own; the last sandbox takes it
// away (HostHygieneTest: no process of ours is left).
TEST_F(EgressTest, OneGatewayPerPolicyRevisionGoneWithItsLastSandbox) {
  egress::GatewayRegistry& gateways = egress::SharedGateways();
  const size_t before = gateways.live();
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.seccomp = seccomp::Policy::kDefault;
  spec.egress.mode = egress::NetMode::kAllowlist;
  spec.egress.domains = {*egress::ParseDomainPattern(kName)};
  spec.egress.log_path = log_path();
  runtime::SandboxSpec other = spec;
  other.egress.ports = {443};
  {
    absl::StatusOr<std::unique_ptr<runtime::Zygote>> a = runtime::Zygote::Create(spec);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(gateways.live(), before + 1);
    absl::StatusOr<std::unique_ptr<runtime::Zygote>> b = runtime::Zygote::Create(spec);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(gateways.live(), before + 1);
    absl::StatusOr<std::unique_ptr<runtime::Zygote>> c = runtime::Zygote::Create(other);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(gateways.live(), before + 2);
    // Each gateway is a process of its own, unprivileged, under seccomp.
    std::vector<pid_t> gateway_pids;
    for (pid_t pid : Descendants()) {
      if (ReadFile(absl::StrCat("/proc/", pid, "/comm")) == "cubicle-egress\n") gateway_pids.push_back(pid);
    }
    EXPECT_EQ(gateway_pids.size(), 2u);
    for (pid_t pid : gateway_pids) {
      const std::string status = ReadFile(absl::StrCat("/proc/", pid, "/status"));
      EXPECT_EQ(StatusField(status, "NoNewPrivs"), "1");
      EXPECT_EQ(StatusField(status, "Seccomp"), "2");
      EXPECT_EQ(StatusField(status, "CapEff"), "0000000000000000");
      if (IsRoot()) {
        EXPECT_EQ(StatusField(status, "Uid"), "999999\t999999\t999999\t999999");
      }
    }
    // A pooled sandbox reaches the gateway too (and gets the proxy env).
    runtime::ExecRequest request;
    request.argv = {"/bin/sh", "-c", "echo $HTTPS_PROXY"};
    absl::StatusOr<SandboxRun> run = RunInZygote(**a, request);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->out, "http://127.0.0.1:18118\n");
  }
  EXPECT_EQ(gateways.live(), before);
}


// Through the daemon: a profile's network key, and params.network, which
// may narrow it (and then runs on a sandbox of its own) but never widen it.
TEST_F(EgressTest, DaemonProfileAndNarrowingRequests) {
  const std::string config = dir_.Join("config.json");
  ASSERT_TRUE(WriteFile(
      config, absl::StrCat(R"({"profiles": {"web": {"pool": {"min_idle": 1, "max_idle": 1},
        "network": {"allow_domains": [")", kName, R"(", ")", kOtherName, R"("], "allow_ports": [)", http_port_, ",",
                           https_port_, R"(], "allow_cidrs": ["127.0.0.1/32"], "resolve": [")", kName,
                           R"(=127.0.0.1", ")", kOtherName, R"(=127.0.0.1"], "log": ")", log_path(), R"("}}}})")));
  auto call = [&](int id, const std::string& url, const std::string& network) {
    boost::json::object params{{"profile", "web"},
                               {"argv", boost::json::array{"/usr/bin/python3", "-I", "-c", kFetchScript, url}},
                               {"env", boost::json::object{{"CA_PEM", ca_pem_}}}};
    if (!network.empty()) params["network"] = boost::json::parse(network);
    return boost::json::serialize(boost::json::object{
        {"jsonrpc", "2.0"}, {"id", id}, {"method", "sandbox.run"}, {"params", params}});
  };
  std::string input = absl::StrJoin(
      {call(1, Url("https", kName, "/pooled"), ""),
       call(2, Url("http", kOtherName, "/narrowed-away"), absl::StrCat(R"({"allow_domains": [")", kName, R"("]})")),
       call(3, Url("http", kName, "/narrowed-in"), absl::StrCat(R"({"allow_domains": [")", kName, R"("]})")),
       call(4, Url("http", kName, "/widened"), R"({"allow_domains": ["pypi.org"]})"),
       call(5, Url("http", kName, "/none"), R"("none")")},
      "\n");
  ProcessRun run = RunCubicle({"serve", "--config", config}, input + "\n");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::map<int64_t, boost::json::object> replies;
  for (const std::string& line : Lines(run.out)) {
    boost::json::value v = boost::json::parse(line);
    replies[v.at("id").as_int64()] = v.as_object();
  }
  ASSERT_EQ(replies.size(), 5u) << run.out;
  auto out = [&](int id) {
    const boost::json::value* r = replies[id].if_contains("result");
    return r != nullptr ? std::string(r->at("stdout").as_string()) : boost::json::serialize(replies[id]);
  };
  EXPECT_TRUE(absl::StrContains(out(1), "hello from https /pooled")) << out(1);
  EXPECT_TRUE(absl::StrContains(out(2), "STATUS 403")) << out(2);
  EXPECT_TRUE(absl::StrContains(out(2), "domain_allowlist")) << out(2);
  EXPECT_TRUE(absl::StrContains(out(3), "hello from http /narrowed-in")) << out(3);
  ASSERT_TRUE(replies[4].contains("error")) << out(4);
  EXPECT_EQ(replies[4].at("error").at("code").as_int64(), -32002);
  EXPECT_TRUE(absl::StrContains(std::string(replies[4].at("error").at("message").as_string()), "pypi.org"));
  EXPECT_TRUE(absl::StrContains(out(5), "ERROR")) << "no network at all: " << out(5);
  std::vector<std::string> seen = Seen();
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::string>{absl::StrCat("http GET ", kName, ":", http_port_, " /narrowed-in"),
                                            absl::StrCat("https GET ", kName, ":", https_port_, " /pooled")}));
  // Two revisions served: the profile's and the narrowed one.
  std::set<std::string> revisions;
  for (const auto& line : Decisions()) revisions.insert(Str(line, "revision"));
  EXPECT_EQ(revisions.size(), 2u);
}

// A gateway that died is replaced for the next sandbox of its revision.
TEST_F(EgressTest, DeadGatewayIsReplacedForTheNextSandbox) {
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.seccomp = seccomp::Policy::kDefault;
  spec.egress.mode = egress::NetMode::kAllowlist;
  spec.egress.domains = {*egress::ParseDomainPattern(kName)};
  spec.egress.log_path = log_path();
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> a = runtime::Zygote::Create(spec);
  ASSERT_TRUE(a.ok()) << a.status();
  auto gateways = [] {
    std::vector<pid_t> out;
    for (pid_t pid : Descendants()) {
      if (ReadFile(absl::StrCat("/proc/", pid, "/comm")) == "cubicle-egress\n") out.push_back(pid);
    }
    return out;
  };
  std::vector<pid_t> first = gateways();
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(::kill(first[0], SIGKILL), 0);  // our own child
  siginfo_t info;
  ASSERT_EQ(::waitid(P_PID, first[0], &info, WEXITED | WNOWAIT), 0);  // dead (the registry reaps it later)
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> b = runtime::Zygote::Create(spec);
  ASSERT_TRUE(b.ok()) << b.status();
  std::vector<pid_t> now = gateways();
  EXPECT_EQ(now.size(), 2u) << "a new gateway beside the dead one (reaped when its sandbox goes)";
  runtime::ExecRequest request;
  request.argv = {"/bin/true"};
  absl::StatusOr<SandboxRun> run = RunInZygote(**b, request);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kExited);
}

// The gateway is a child of its launcher and dies with it.
TEST_F(EgressTest, GatewayProcessDiesWithItsLauncher) {
  std::vector<std::string> args = {"run"};
  for (const std::string& f : AllowFlags()) args.push_back(f);
  for (const char* a : {"--", "/bin/sleep", "60.0471"}) args.push_back(a);  // a marker no one else uses
  RunningProcess cubicle(CubicleArgv(args));
  ASSERT_TRUE(cubicle.started());
  pid_t gateway = -1;
  for (int i = 0; i < 1000 && gateway < 0; ++i) {  // bounded: 10 s
    for (pid_t pid : Descendants(cubicle.pid())) {
      if (ReadFile(absl::StrCat("/proc/", pid, "/comm")) == "cubicle-egress\n") gateway = pid;
    }
    if (gateway < 0) ::usleep(10'000);
  }
  ASSERT_GT(gateway, 0) << "no gateway process under cubicle run";
  cubicle.Signal(SIGKILL);
  cubicle.Wait();
  bool gone = false;
  for (int i = 0; i < 1000 && !gone; ++i) {  // bounded: 10 s
    gone = ::kill(gateway, 0) != 0;
    if (!gone) ::usleep(10'000);
  }
  EXPECT_TRUE(gone) << "gateway " << gateway << " outlived its launcher: "
                    << ReadFile(absl::StrCat("/proc/", gateway, "/status"));
  // The sandbox (its init dies with the launcher too) is gone as well.
  std::vector<pid_t> left = WaitUntilGone("60.0471");
  for (pid_t pid : left) ADD_FAILURE() << "left: " << ReadFile(absl::StrCat("/proc/", pid, "/status"));
}

// A gateway that cannot start is a clear error, and nothing is left.
TEST_F(EgressTest, GatewayThatCannotStartFailsTheSandboxCleanly) {
  egress::SetGatewayExecutable("/nonexistent/cubicle");
  runtime::SandboxSpec spec = TestSpec({"/bin/true"});
  spec.seccomp = seccomp::Policy::kDefault;
  spec.egress.mode = egress::NetMode::kAllowlist;
  spec.egress.domains = {*egress::ParseDomainPattern(kName)};
  spec.egress.log_path = log_path();
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = runtime::Zygote::Create(spec);
  egress::SetGatewayExecutable(CubicleBinary());
  ASSERT_FALSE(z.ok());
  EXPECT_TRUE(absl::StrContains(z.status().message(), "egress gateway")) << z.status();
  EXPECT_TRUE(absl::StrContains(z.status().message(), "execve(/nonexistent/cubicle): ENOENT")) << z.status();
  EXPECT_EQ(egress::SharedGateways().live(), 0u);
  // A gateway that starts but cannot open its log says so, through the CLI.
  ProcessRun run = RunCubicle({"run", "--net", "allowlist", "--allow-domain", kName, "--egress-log",
                               dir_.Join("no/such/dir/log"), "--", "/bin/true"});
  EXPECT_EQ(run.exit_code, 125) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, absl::StrCat("open(", dir_.Join("no/such/dir/log"), ", egress log): ENOENT")))
      << run.err;
}

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
TEST_F(EgressTest, DaemonTagsEachDecisionWithItsRequestId) {
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
TEST_F(EgressTest, DaemonTagsTheRequestsOfAWarmTemplatesZygotes) {
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
TEST_F(EgressTest, DaemonMetricsCountConnectionsAndKeepAnExitedGatewaysCounts) {
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
