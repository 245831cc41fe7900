// Network egress end to end: real sandboxes (through the cubicle binary and
// the launcher) reaching test servers on 127.0.0.1 through the bridge in
// init and the host gateway. The servers — plain HTTP and TLS with a CA this
// test makes with the openssl CLI — are started and stopped by each test and
// record every request they see, so a refused request is shown to have
// reached nothing. Names point at them with --egress-resolve; 127.0.0.1 is
// let through with --egress-allow-cidr 127.0.0.1/32.
#include "tests/integration/egress_fixture.h"

namespace cubicle::test_support {
namespace {
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

}  // namespace
}  // namespace cubicle::test_support
