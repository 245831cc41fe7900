// The fixture of the egress tests (egress_test.cc, egress_daemon_test.cc):
// test servers on 127.0.0.1 (plain HTTP and TLS with a CA made by the
// openssl CLI) that record every request, and the flags, configuration
// and decision-log readers the tests share. In an anonymous namespace:
// each test file has its own copy.
#pragma once

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

inline bool RunQuietly(const std::vector<std::string>& argv) {
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

}  // namespace
}  // namespace cubicle::test_support
