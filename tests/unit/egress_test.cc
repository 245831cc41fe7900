// egress/: the address classifier, the domain matcher (with punycode), the
// policy parsers, the request-head parser, and the gateway's counts and
// control messages. No network is touched.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "egress/address_class.h"
#include "egress/control_messages.h"
#include "egress/counts.h"
#include "egress/http.h"
#include "egress/matcher.h"
#include "egress/policy.h"
#include "egress/policy_json.h"
#include "rpc/config.h"

#include <boost/json/parse.hpp>

namespace cubicle::egress {
namespace {

std::array<uint8_t, 16> Addr(const std::string& text) {
  absl::StatusOr<std::array<uint8_t, 16>> a = ParseAddress(text);
  EXPECT_TRUE(a.ok()) << text << ": " << a.status();
  return a.value_or(std::array<uint8_t, 16>{});
}

struct AddressCase {
  const char* address;
  const char* expected;  // "public" or a substring of the refused class
};

// At least 40 addresses: IPv4, IPv6, IPv4-mapped, NAT64 and 6to4 forms.
const AddressCase kAddressCases[] = {
    // IPv4 public
    {"8.8.8.8", "public"},
    {"1.1.1.1", "public"},
    {"93.184.215.14", "public"},
    {"100.63.255.255", "public"},  // just below CGNAT
    {"100.128.0.0", "public"},     // just above CGNAT
    {"172.15.255.255", "public"},  // just below 172.16/12
    {"172.32.0.0", "public"},      // just above
    {"223.255.255.255", "public"},
    // IPv4 refused
    {"0.0.0.0", "this network"},
    {"0.1.2.3", "this network"},
    {"127.0.0.1", "loopback"},
    {"127.255.255.254", "loopback"},
    {"10.0.0.1", "RFC 1918"},
    {"10.255.255.255", "RFC 1918"},
    {"172.16.0.1", "RFC 1918"},
    {"172.31.255.255", "RFC 1918"},
    {"192.168.1.1", "RFC 1918"},
    {"169.254.169.254", "link-local"},
    {"169.254.0.1", "link-local"},
    {"100.64.0.1", "CGNAT"},
    {"100.127.255.255", "CGNAT"},
    {"192.0.0.8", "IETF protocol"},
    {"192.0.2.1", "documentation"},
    {"198.51.100.7", "documentation"},
    {"203.0.113.9", "documentation"},
    {"198.18.0.1", "benchmarking"},
    {"198.19.255.255", "benchmarking"},
    {"192.88.99.1", "6to4 relay"},
    {"224.0.0.1", "multicast"},
    {"239.255.255.250", "multicast"},
    {"240.0.0.1", "reserved"},
    {"255.255.255.255", "broadcast"},
    // IPv6 public
    {"2606:4700:4700::1111", "public"},
    {"2a00:1450:4001:82a::200e", "public"},
    {"2001:4860:4860::8888", "public"},  // outside 2001::/23
    // IPv6 refused
    {"::", "unspecified"},
    {"::1", "loopback"},
    {"fc00::1", "unique local"},
    {"fd12:3456:789a::1", "unique local"},
    {"fe80::1", "link-local"},
    {"febf::1", "link-local"},
    {"fec0::1", "site-local"},
    {"ff02::1", "multicast"},
    {"ff05::1:3", "multicast"},
    {"2001:db8::1", "documentation"},
    {"3fff::1", "documentation"},
    {"100::1", "discard-only"},
    {"2001::1", "Teredo"},
    {"::7f00:1", "IPv4-compatible"},
    {"4000::1", "reserved"},
    {"1000::1", "reserved"},
    // IPv4-mapped: judged by the IPv4 address
    {"::ffff:127.0.0.1", "loopback"},
    {"::ffff:10.1.2.3", "RFC 1918"},
    {"::ffff:169.254.169.254", "link-local"},
    {"::ffff:8.8.8.8", "public"},
    // NAT64 well-known prefix: the embedded IPv4 decides
    {"64:ff9b::127.0.0.1", "loopback"},
    {"64:ff9b::a9fe:a9fe", "link-local"},  // 169.254.169.254
    {"64:ff9b::192.168.0.1", "RFC 1918"},
    {"64:ff9b::8.8.8.8", "public"},
    // NAT64 local-use /48: refused, naming the inner class when it has one
    {"64:ff9b:1::10.0.0.1", "RFC 1918"},
    {"64:ff9b:1::8.8.8.8", "local-use NAT64"},
    // 6to4 carries IPv4 in bits 16..47
    {"2002:7f00:1::1", "loopback"},
    {"2002:c0a8:101::1", "RFC 1918"},
    {"2002:808:808::1", "public"},
};

TEST(EgressAddressClass, Table) {
  ASSERT_GE(std::size(kAddressCases), 40u);
  for (const AddressCase& c : kAddressCases) {
    std::string rule(ClassifyAddress(Addr(c.address)));
    if (std::string(c.expected) == "public") {
      EXPECT_EQ(rule, "public") << c.address;
    } else {
      EXPECT_NE(rule, "public") << c.address;
      EXPECT_NE(rule.find(c.expected), std::string::npos) << c.address << " classified as " << rule;
    }
  }
}

TEST(EgressAddressClass, EveryRefusedClassIsKnownToTheMetrics) {
  for (const AddressCase& c : kAddressCases) {
    const absl::string_view rule = ClassifyAddress(Addr(c.address));
    if (rule == "public") continue;
    EXPECT_TRUE(IsRefusedClass(rule)) << c.address << ": " << rule;
    const std::string logged = absl::StrCat("address_class: ", rule);
    EXPECT_EQ(CountedRule(logged), logged);
  }
  EXPECT_FALSE(IsRefusedClass("public"));
  EXPECT_FALSE(IsRefusedClass("files.example.org"));
}

TEST(EgressAddressClass, AllowCidrOverridesTheClass) {
  std::vector<Cidr> cidrs = {*ParseCidr("127.0.0.1/32"), *ParseCidr("fd00::/8")};
  AddressVerdict v = JudgeAddress(Addr("127.0.0.1"), cidrs);
  EXPECT_TRUE(v.allowed);
  EXPECT_EQ(v.rule, "allow_cidr");
  EXPECT_TRUE(JudgeAddress(Addr("::ffff:127.0.0.1"), cidrs).allowed);  // the same address
  EXPECT_TRUE(JudgeAddress(Addr("fd12::1"), cidrs).allowed);
  v = JudgeAddress(Addr("127.0.0.2"), cidrs);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.rule, "loopback");
  EXPECT_FALSE(JudgeAddress(Addr("fc00::1"), cidrs).allowed);
  // The mapped form of a covered address is covered; its NAT64 form is
  // another destination and is not.
  EXPECT_FALSE(JudgeAddress(Addr("64:ff9b::127.0.0.1"), cidrs).allowed);
}

TEST(EgressPunycode, AgreesWithRfc3492Examples) {
  // Expected values from an independent implementation (Python's codec).
  const std::pair<const char*, const char*> cases[] = {
      {"bücher", "xn--bcher-kva"}, {"münchen", "xn--mnchen-3ya"}, {"españa", "xn--espaa-rta"},
      {"日本語", "xn--wgv71a119e"}, {"ü", "xn--tda"},             {"пример", "xn--e1afmkfd"},
      {"ℵ", "xn--i3g"},            {"a-ü-b", "xn--a--b-1ra"},      {"😀", "xn--e28h"},
  };
  for (const auto& [in, out] : cases) {
    absl::StatusOr<std::string> n = NormalizeHostName(in);
    ASSERT_TRUE(n.ok()) << in << ": " << n.status();
    EXPECT_EQ(*n, out) << in;
  }
}

TEST(EgressHostName, Normalises) {
  EXPECT_EQ(*NormalizeHostName("Example.ORG."), "example.org");
  EXPECT_EQ(*NormalizeHostName("BüCHER.example"), "xn--bcher-kva.example");  // ASCII folded in an IDN label
  EXPECT_EQ(*NormalizeHostName("pypi.org"), "pypi.org");
  EXPECT_EQ(*NormalizeHostName("_dmarc.example.org"), "_dmarc.example.org");
  for (const char* bad : {"", ".", "a..b", "exa mple.org", "user@example.org", "example.org:80", "a/b",
                          "example.org..", "\xff\xfe.org", "ex%61mple.org"}) {
    EXPECT_FALSE(NormalizeHostName(bad).ok()) << bad;
  }
  EXPECT_FALSE(NormalizeHostName(std::string(64, 'a') + ".org").ok());
  EXPECT_TRUE(NormalizeHostName(std::string(63, 'a') + ".org").ok());
}

TEST(EgressMatcher, Table) {
  struct Case {
    const char* pattern;
    const char* host;
    bool match;
  };
  const Case cases[] = {
      {"example.org", "example.org", true},
      {"example.org", "www.example.org", false},
      {"example.org", "evil-example.org", false},
      {"example.org", "example.org.evil.com", false},
      {"example.org", "xample.org", false},
      {"*.example.org", "www.example.org", true},
      {"*.example.org", "a.b.example.org", true},
      {"*.example.org", "example.org", false},
      {"*.example.org", "evil-example.org", false},
      {"*.example.org", "wwwexample.org", false},
      {"*.example.org", ".example.org", false},
      {"Example.Org.", "example.org", true},
      {"*.bücher.de", "shop.xn--bcher-kva.de", true},
      {"pypi.org", "files.pythonhosted.org", false},
  };
  for (const Case& c : cases) {
    absl::StatusOr<DomainPattern> p = ParseDomainPattern(c.pattern);
    ASSERT_TRUE(p.ok()) << c.pattern << ": " << p.status();
    absl::StatusOr<std::string> host = NormalizeHostName(c.host);
    bool matched = host.ok() && MatchesPattern(*p, *host);
    EXPECT_EQ(matched, c.match) << c.pattern << " vs " << c.host;
  }
}

void ExpectErrorNaming(const absl::Status& st, const std::string& value) {
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(std::string(st.message()).find(value), std::string::npos) << st.message();
}

TEST(EgressPolicy, BadPatternsNameTheValue) {
  for (const char* bad : {"*", "*.", "", "foo.*.org", "*example.org", "*.com", "127.0.0.1", "[::1]", "a..b",
                          "ex ample.org"}) {
    absl::StatusOr<DomainPattern> p = ParseDomainPattern(bad);
    ASSERT_FALSE(p.ok()) << "accepted '" << bad << "'";
    ExpectErrorNaming(p.status(), absl::StrCat("'", bad, "'"));
  }
}

TEST(EgressPolicy, BadPortsAndCidrsNameTheValue) {
  for (const char* bad : {"0", "70000", "65536", "-1", "", "80x", "1e3"}) {
    absl::StatusOr<uint16_t> p = ParsePort(bad);
    ASSERT_FALSE(p.ok()) << bad;
    ExpectErrorNaming(p.status(), absl::StrCat("'", bad, "'"));
  }
  EXPECT_EQ(*ParsePort("443"), 443);
  EXPECT_EQ(*ParsePort("65535"), 65535);
  for (const char* bad : {"10.0.0.0", "10.0.0.0/33", "10.0.0/8", "10.0.0.1/8", "fd00::/129", "nonsense/8",
                          "10.0.0.0/", "::1/-1"}) {
    absl::StatusOr<Cidr> c = ParseCidr(bad);
    ASSERT_FALSE(c.ok()) << bad;
    ExpectErrorNaming(c.status(), absl::StrCat("'", bad, "'"));
  }
  EXPECT_EQ(FormatCidr(*ParseCidr("127.0.0.1/32")), "127.0.0.1/32");
  EXPECT_EQ(FormatCidr(*ParseCidr("fd00::/8")), "fd00::/8");
  for (const char* bad : {"example.org", "example.org=", "=127.0.0.1", "example.org=localhost",
                          "bad host=127.0.0.1"}) {
    absl::StatusOr<ResolveOverride> r = ParseResolve(bad);
    ASSERT_FALSE(r.ok()) << bad;
    ExpectErrorNaming(r.status(), absl::StrCat("'", bad, "'"));
  }
  absl::StatusOr<ResolveOverride> r = ParseResolve("Files.Example.ORG=::1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->host, "files.example.org");
  EXPECT_EQ(FormatResolve(*r), "files.example.org=::1");
  r = ParseResolve("a.example=127.0.0.1,::1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->addresses.size(), 2u);
  EXPECT_EQ(FormatResolve(*r), "a.example=127.0.0.1,::1");
  EXPECT_FALSE(ParseResolve("a.example=127.0.0.1,").ok());
}

Policy Allowlist(std::vector<std::string> domains) {
  Policy p;
  p.mode = NetMode::kAllowlist;
  for (const std::string& d : domains) p.domains.push_back(*ParseDomainPattern(d));
  return p;
}

TEST(EgressPolicy, Validation) {
  EXPECT_TRUE(ValidatePolicy(Policy()).ok());
  Policy p = Allowlist({});
  EXPECT_FALSE(ValidatePolicy(p).ok());
  p = Allowlist({"example.org"});
  EXPECT_TRUE(ValidatePolicy(p).ok());
  p.ports.clear();
  EXPECT_FALSE(ValidatePolicy(p).ok());
  p = Allowlist({"example.org"});
  p.budgets.max_connections = 0;
  ExpectErrorNaming(ValidatePolicy(p), "max_connections '0'");
  p = Allowlist({"example.org"});
  p.budgets.idle_timeout = absl::ZeroDuration();
  EXPECT_FALSE(ValidatePolicy(p).ok());
  EXPECT_FALSE(ParseNetMode("open").ok());
}

TEST(EgressPolicy, RevisionIgnoresOrderAndSeesEveryRule) {
  Policy a = Allowlist({"a.example", "*.b.example"});
  Policy b = Allowlist({"*.b.example", "a.example", "a.example"});
  b.ports = {443, 80};
  EXPECT_EQ(CanonicalText(a), CanonicalText(b));
  EXPECT_EQ(Revision(a), Revision(b));
  EXPECT_EQ(Revision(a).size(), 16u);
  Policy c = a;
  c.ports.push_back(8080);
  EXPECT_NE(Revision(a), Revision(c));
  c = a;
  c.allow_cidrs.push_back(*ParseCidr("10.0.0.0/8"));
  EXPECT_NE(Revision(a), Revision(c));
  c = a;
  c.budgets.max_bytes = 1;
  EXPECT_NE(Revision(a), Revision(c));
  c = a;
  c.resolve.push_back(*ParseResolve("a.example=127.0.0.1"));
  EXPECT_NE(Revision(a), Revision(c));
}

TEST(EgressPolicy, RequestMayOnlyNarrow) {
  Policy base = Allowlist({"*.example.org", "pypi.org"});
  base.allow_cidrs.push_back(*ParseCidr("10.0.0.0/8"));
  base.budgets.max_bytes = 1000;
  Policy narrow = Allowlist({"files.example.org", "*.cdn.example.org", "pypi.org"});
  narrow.ports = {443};
  narrow.allow_cidrs.push_back(*ParseCidr("10.1.0.0/16"));
  narrow.budgets.max_bytes = 10;
  narrow.budgets.max_connections = 4;
  EXPECT_TRUE(CheckNarrows(base, narrow).ok()) << CheckNarrows(base, narrow);
  EXPECT_TRUE(CheckNarrows(base, Policy()).ok());  // none narrows anything

  auto widens = [&](Policy p, const std::string& what) {
    absl::Status st = CheckNarrows(base, p);
    EXPECT_TRUE(absl::IsPermissionDenied(st)) << what << ": " << st;
    EXPECT_NE(std::string(st.message()).find(what), std::string::npos) << st.message();
  };
  widens(Allowlist({"example.org"}), "example.org");  // "*.example.org" does not cover the apex
  widens(Allowlist({"evil.org"}), "evil.org");
  Policy p = Allowlist({"pypi.org"});
  p.ports = {22};
  widens(p, "port 22");
  p = Allowlist({"pypi.org"});
  p.allow_cidrs.push_back(*ParseCidr("0.0.0.0/0"));
  widens(p, "0.0.0.0/0");
  p = Allowlist({"pypi.org"});
  p.budgets.max_bytes = 0;  // no cap, over a profile's cap
  widens(p, "max_bytes");
  p = Allowlist({"pypi.org"});
  p.budgets.max_bytes = 10;
  p.budgets.idle_timeout = absl::Hours(1);
  widens(p, "idle timeout");
  p = Allowlist({"pypi.org"});
  p.budgets.max_bytes = 10;
  p.resolve.push_back(*ParseResolve("pypi.org=10.0.0.1"));
  widens(p, "resolve override");
  widens(Allowlist({"pypi.org"}), "max_bytes");
  EXPECT_TRUE(absl::IsPermissionDenied(CheckNarrows(Policy(), Allowlist({"pypi.org"}))));
}

TEST(EgressPolicy, ProxyEnvironment) {
  EXPECT_TRUE(ProxyEnvironment(Policy()).empty());
  Policy p = Allowlist({"pypi.org"});
  p.bridge_port = 3128;
  std::vector<std::string> env = ProxyEnvironment(p);
  for (const char* want : {"HTTP_PROXY=http://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128",
                           "http_proxy=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128",
                           "NO_PROXY=localhost,127.0.0.1"}) {
    EXPECT_NE(std::find(env.begin(), env.end(), want), env.end()) << want;
  }
}

RequestHead Parsed(const std::string& text) {
  absl::StatusOr<std::optional<RequestHead>> h = ParseRequestHead(text);
  EXPECT_TRUE(h.ok()) << text << ": " << h.status();
  if (!h.ok() || !h->has_value()) {
    ADD_FAILURE() << "incomplete: " << text;
    return {};
  }
  return **h;
}

TEST(EgressHttp, ConnectAndAbsoluteUri) {
  RequestHead c = Parsed("CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n\x16\x03\x01");
  EXPECT_TRUE(c.connect);
  EXPECT_EQ(c.host, "pypi.org");
  EXPECT_EQ(c.port, 443);
  EXPECT_EQ(c.head_bytes, std::string("CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n").size());
  c = Parsed("CONNECT [2001:db8::1]:8443 HTTP/1.1\r\n\r\n");
  EXPECT_EQ(c.host, "2001:db8::1");
  EXPECT_EQ(c.port, 8443);

  RequestHead g = Parsed("GET http://Example.org/simple/?q=1 HTTP/1.1\r\nHost: other.org\r\nUser-Agent: t\r\n"
                         "Proxy-Connection: keep-alive\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\n\r\n");
  EXPECT_FALSE(g.connect);
  EXPECT_EQ(g.host, "Example.org");
  EXPECT_EQ(g.port, 80);
  EXPECT_EQ(g.target, "/simple/?q=1");
  std::string up = UpstreamHead(g);
  EXPECT_EQ(up,
            "GET /simple/?q=1 HTTP/1.1\r\nHost: Example.org\r\nUser-Agent: t\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(Parsed("GET http://a.example:8080 HTTP/1.0\r\n\r\n").target, "/");
  EXPECT_EQ(Parsed("GET http://a.example?x HTTP/1.1\r\n\r\n").target, "/?x");
  EXPECT_EQ(UpstreamHead(Parsed("POST http://a.example:8080/p HTTP/1.1\r\nContent-Length: 3\r\n\r\n")),
            "POST /p HTTP/1.1\r\nHost: a.example:8080\r\nContent-Length: 3\r\nConnection: close\r\n\r\n");
}

TEST(EgressHttp, IncompleteWaitsForMore) {
  for (const char* partial : {"", "GET http://a.example/ HTTP/1.1\r\n", "CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r"}) {
    absl::StatusOr<std::optional<RequestHead>> h = ParseRequestHead(partial);
    ASSERT_TRUE(h.ok()) << partial << ": " << h.status();
    EXPECT_FALSE(h->has_value()) << partial;
  }
}

TEST(EgressHttp, MalformedAndOversizedHeads) {
  struct Case {
    std::string head;
    absl::StatusCode code;
  };
  const Case cases[] = {
      {"GET http://a.example/ HTTP/1.1\n\n", absl::StatusCode::kInvalidArgument},             // bare LF
      {"GET http://a.example/ HTTP/1.1\r\nX: a\rb\r\n\r\n", absl::StatusCode::kInvalidArgument},  // bare CR
      {std::string("GET http://a.example/ HTTP/1.1\r\nX: a\0b\r\n\r\n", 41), absl::StatusCode::kInvalidArgument},
      {"GET  http://a.example/ HTTP/1.1\r\n\r\n", absl::StatusCode::kInvalidArgument},
      {"GET http://a.example/ HTTP/2\r\n\r\n", absl::StatusCode::kInvalidArgument},
      {"G(T http://a.example/ HTTP/1.1\r\n\r\n", absl::StatusCode::kInvalidArgument},
      {"GET http://user:pw@a.example/ HTTP/1.1\r\n\r\n", absl::StatusCode::kInvalidArgument},
      {"GET http://a.example/#frag HTTP/1.1\r\n\r\n", absl::StatusCode::kInvalidArgument},
      {"GET http://a.example:0/ HTTP/1.1\r\n\r\n", absl::StatusCode::kInvalidArgument},
      {"GET http://a.example:99999/ HTTP/1.1\r\n\r\n", absl::StatusCode::kInvalidArgument},
      {"GET http://:80/ HTTP/1.1\r\n\r\n", absl::StatusCode::kInvalidArgument},
      {"CONNECT a.example HTTP/1.1\r\n\r\n", absl::StatusCode::kInvalidArgument},
      {"CONNECT 2001:db8::1:443 HTTP/1.1\r\n\r\n", absl::StatusCode::kInvalidArgument},
      {"CONNECT [::1 HTTP/1.1\r\n\r\n", absl::StatusCode::kInvalidArgument},
      {"GET http://a.example/ HTTP/1.1\r\n folded\r\n\r\n", absl::StatusCode::kInvalidArgument},
      {"GET http://a.example/ HTTP/1.1\r\nNoColon\r\n\r\n", absl::StatusCode::kInvalidArgument},
      {"GET http://a.example/ HTTP/1.1\r\nBad Name: x\r\n\r\n", absl::StatusCode::kInvalidArgument},
      {"POST http://a.example/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
       absl::StatusCode::kInvalidArgument},
      {"POST http://a.example/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
       absl::StatusCode::kInvalidArgument},
      {"POST http://a.example/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n", absl::StatusCode::kInvalidArgument},
      {"GET /index.html HTTP/1.1\r\nHost: a.example\r\n\r\n", absl::StatusCode::kUnimplemented},
      {"GET https://a.example/ HTTP/1.1\r\n\r\n", absl::StatusCode::kUnimplemented},
      {"GET ftp://a.example/ HTTP/1.1\r\n\r\n", absl::StatusCode::kUnimplemented},
      {"GET http://a.example/ HTTP/1.1\r\n" + std::string(kMaxRequestHead, 'x'), absl::StatusCode::kResourceExhausted},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::optional<RequestHead>> h = ParseRequestHead(c.head);
    EXPECT_EQ(h.status().code(), c.code) << c.head.substr(0, 80) << " -> " << h.status();
  }
  std::string many = "GET http://a.example/ HTTP/1.1\r\n";
  for (size_t i = 0; i <= kMaxHeaderCount; ++i) many += "X: y\r\n";
  many += "\r\n";
  EXPECT_EQ(ParseRequestHead(many).status().code(), absl::StatusCode::kResourceExhausted);
}


absl::StatusOr<Policy> FromJson(const std::string& text, const Policy& base = {}) {
  return PolicyFromJson(boost::json::parse(text), "network", base);
}

TEST(EgressPolicyJson, ParsesEveryKey) {
  absl::StatusOr<Policy> p = FromJson(R"({"mode": "allowlist", "allow_domains": ["pypi.org", "*.pythonhosted.org"],
      "allow_ports": [443, "8443"], "allow_cidrs": ["10.20.0.0/16"], "resolve": ["mirror.internal=10.20.0.5"],
      "max_connections": 16, "max_bytes": "512M", "idle_timeout_ms": 30000, "bridge_port": 3128,
      "log": "/var/log/egress.jsonl"})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->mode, NetMode::kAllowlist);
  ASSERT_EQ(p->domains.size(), 2u);
  EXPECT_EQ(FormatDomainPattern(p->domains[1]), "*.pythonhosted.org");
  EXPECT_EQ(p->ports, (std::vector<uint16_t>{443, 8443}));
  EXPECT_EQ(FormatCidr(p->allow_cidrs.at(0)), "10.20.0.0/16");
  EXPECT_EQ(p->resolve.at(0).host, "mirror.internal");
  EXPECT_EQ(p->budgets.max_connections, 16u);
  EXPECT_EQ(p->budgets.max_bytes, 512u << 20);
  EXPECT_EQ(p->budgets.idle_timeout, absl::Seconds(30));
  EXPECT_EQ(p->bridge_port, 3128);
  EXPECT_EQ(p->log_path, "/var/log/egress.jsonl");
  EXPECT_EQ(FromJson(R"("none")")->mode, NetMode::kNone);
  // Domains alone mean allowlist; absent keys keep the base's values.
  Policy base = *FromJson(R"({"allow_domains": ["a.example", "b.example"], "max_bytes": 1000})");
  absl::StatusOr<Policy> narrowed = FromJson(R"({"allow_domains": ["a.example"]})", base);
  ASSERT_TRUE(narrowed.ok()) << narrowed.status();
  EXPECT_EQ(narrowed->budgets.max_bytes, 1000u);
  EXPECT_EQ(narrowed->domains.size(), 1u);
  EXPECT_TRUE(CheckNarrows(base, *narrowed).ok());
}

TEST(EgressPolicyJson, RoundTripsThroughToJson) {
  Policy p = *FromJson(R"({"allow_domains": ["pypi.org", "*.pythonhosted.org"], "allow_ports": [443],
      "allow_cidrs": ["10.20.0.0/16", "fd00::/8"], "resolve": ["mirror.internal=10.20.0.5,fd00::5"],
      "max_connections": 3, "max_bytes": 12345, "idle_timeout_ms": 1500, "bridge_port": 3128, "log": "/x.log"})");
  absl::StatusOr<Policy> back = PolicyFromJson(PolicyToJson(p), "policy", Policy());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, p);
  EXPECT_EQ(Revision(*back), Revision(p));
  Policy uncapped = *FromJson(R"({"allow_domains": ["a.example"]})");
  EXPECT_EQ(*PolicyFromJson(PolicyToJson(uncapped), "policy", Policy()), uncapped);
  EXPECT_EQ(PolicyToJson(Policy()), boost::json::value("none"));
}

TEST(EgressPolicyJson, ErrorsNameThePathAndTheValue) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"allow_domains": ["*"]})", "network.allow_domains[0]: domain pattern '*'"},
      {R"({"allow_domains": ["ok.example", "*."]})", "network.allow_domains[1]: domain pattern '*.'"},
      {R"({"allow_domains": [""]})", "network.allow_domains[0]: domain pattern ''"},
      {R"({"allow_domains": ["a.example"], "allow_ports": [0]})", "network.allow_ports[0]: port '0'"},
      {R"({"allow_domains": ["a.example"], "allow_ports": [70000]})", "network.allow_ports[0]: port '70000'"},
      {R"({"allow_domains": ["a.example"], "allow_cidrs": ["10.0.0.0/33"]})", "network.allow_cidrs[0]: CIDR '10.0.0.0/33'"},
      {R"({"allow_domains": ["a.example"], "resolve": ["a.example"]})", "network.resolve[0]: resolve override 'a.example'"},
      {R"({"allow_domains": ["a.example"], "max_connections": 0})", "network.max_connections: 0 is outside"},
      {R"({"allow_domains": ["a.example"], "max_bytes": "12Q"})", "network.max_bytes: '12Q' is not a size"},
      {R"({"allow_domains": ["a.example"], "allow_ports": [1.5]})", "network.allow_ports[0]: expected a whole number, got 1.5"},
      {R"({"allow_domains": ["a.example"], "idle_timeout_ms": 2.5})", "network.idle_timeout_ms: expected a whole number, got 2.5"},
      {R"({"allow_domains": ["a.example"], "max_connections": "16"})", "network.max_connections: expected a whole number, got '16'"},
      {R"({"allow_domains": ["a.example"], "log": "relative.log"})", "network.log: must be an absolute path"},
      {R"({"allow_domains": ["a.example"], "proxy": true})", "network.proxy: unknown key"},
      {R"({"mode": "open"})", "network.mode: network policy 'open'"},
      {R"({"mode": "allowlist"})", "network: network policy allowlist: no domain"},
      {R"({"mode": "none", "allow_domains": ["a.example"]})", "network: mode none takes no other key"},
      {R"(42)", "network: expected \"none\" or an object"},
  };
  for (const auto& [json, expected] : cases) {
    absl::StatusOr<Policy> p = FromJson(json);
    ASSERT_FALSE(p.ok()) << json;
    EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
    EXPECT_NE(std::string(p.status().message()).find(expected), std::string::npos)
        << json << " -> " << p.status().message();
  }
}

// The one rule for whole numbers (base/json_reader.h), as in the config and
// in JSON-RPC params: any spelling JSON allows, if it is exactly one.
TEST(EgressPolicyJson, WholeNumbersMayBeWrittenAsJsonAllows) {
  absl::StatusOr<Policy> p = FromJson(R"({"allow_domains": ["a.example"], "allow_ports": [443.0, 8.443e3],
      "max_connections": 1e1, "max_bytes": 1e6, "idle_timeout_ms": 1.5e3, "bridge_port": 3128.0})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->ports, (std::vector<uint16_t>{443, 8443}));
  EXPECT_EQ(p->budgets.max_connections, 10u);
  EXPECT_EQ(p->budgets.max_bytes, 1000000u);
  EXPECT_EQ(p->budgets.idle_timeout, absl::Milliseconds(1500));
  EXPECT_EQ(p->bridge_port, 3128);
}

TEST(EgressPolicyJson, ProfileNetworkKey) {
  absl::StatusOr<rpc::DaemonConfig> config = rpc::ParseConfig(
      R"({"profiles": {"web": {"network": {"allow_domains": ["pypi.org"], "allow_ports": [443]}},
                        "strict": {"seccomp": "no-network", "network": {"allow_domains": ["pypi.org"]}},
                        "off": {"network": "none"}}})");
  ASSERT_FALSE(config.ok()) << "an allowlist with seccomp no-network cannot work";
  EXPECT_NE(std::string(config.status().message()).find("profiles.strict"), std::string::npos) << config.status();
  config = rpc::ParseConfig(
      R"({"profiles": {"web": {"network": {"allow_domains": ["pypi.org"], "allow_ports": [443]}},
                        "off": {"network": "none"}}})");
  ASSERT_TRUE(config.ok()) << config.status();
  const runtime::SandboxSpec& web = config->profiles.at("web").spec;
  EXPECT_EQ(web.egress.mode, NetMode::kAllowlist);
  EXPECT_EQ(web.egress.ports, std::vector<uint16_t>{443});
  EXPECT_EQ(web.seccomp, seccomp::Policy::kDefault) << "the bridge needs AF_INET";
  const runtime::SandboxSpec& off = config->profiles.at("off").spec;
  EXPECT_EQ(off.egress.mode, NetMode::kNone);
  EXPECT_EQ(off.seccomp, seccomp::Policy::kNoNetwork);
  absl::StatusOr<rpc::DaemonConfig> bad =
      rpc::ParseConfig(R"({"profiles": {"web": {"network": {"allow_domains": ["*.com"]}}}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("profiles.web.network.allow_domains[0]: domain pattern '*.com'"),
            std::string::npos)
      << bad.status();
}

// The metric labels are the gateway's fixed rules; nothing a sandbox chose
// (a host, a port, an errno in a message) becomes one.
TEST(EgressCounts, RulesMapToABoundedSet) {
  for (const char* fixed : {"http", "connect", "bad_request", "ip_literal", "bad_host", "domain_allowlist",
                            "port_allowlist", "budget_bytes", "budget_connections", "resolve_failed",
                            "upstream_connect", "idle_timeout", "client_closed_before_request"}) {
    EXPECT_EQ(CountedRule(fixed), fixed);
  }
  EXPECT_EQ(CountedRule(""), "none");
  EXPECT_EQ(CountedRule("pipe2: EMFILE"), "pipe2");
  EXPECT_EQ(CountedRule("address_class: loopback"), "address_class: loopback");
  EXPECT_EQ(CountedRule("address_class: evil.example"), "other");
  EXPECT_EQ(CountedRule("evil.example"), "other");
  EXPECT_EQ(CountedRule("connect "), "other");
  // A label is its own label: what a gateway counted reads back the same.
  for (const char* rule : {"", "pipe2: EMFILE", "evil.example", "address_class: loopback", "connect"}) {
    EXPECT_EQ(CountedRule(CountedRule(rule)), CountedRule(rule)) << rule;
  }
}

TEST(EgressCounts, CountAddAndMax) {
  Counts a;
  a.Count("allow", "connect", 100, 2000);
  a.Count("allow", "connect", 1, 2);
  a.Count("deny", "domain_allowlist", 50, 0);
  a.Count("error", "pipe2: EMFILE", 0, 0);
  using Key = std::pair<std::string, std::string>;
  EXPECT_EQ(a.connections, (std::map<Key, uint64_t>{{{"allow", "connect"}, 2},
                                                     {{"deny", "domain_allowlist"}, 1},
                                                     {{"error", "pipe2"}, 1}}));
  EXPECT_EQ(a.bytes_up, 151u);
  EXPECT_EQ(a.bytes_down, 2002u);
  Counts b;
  b.Count("deny", "domain_allowlist", 1, 1);
  b.Count("deny", "domain_allowlist", 1, 1);
  Counts sum = a;
  sum.Add(b);
  EXPECT_EQ((sum.connections[{"deny", "domain_allowlist"}]), 3u);
  EXPECT_EQ(sum.bytes_up, 153u);
  Counts most = a;
  most.Max(b);
  EXPECT_EQ((most.connections[{"deny", "domain_allowlist"}]), 2u);
  EXPECT_EQ((most.connections[{"allow", "connect"}]), 2u);
  EXPECT_EQ(most.bytes_up, 151u);
}

TEST(EgressCounts, JsonRoundTripsAndRefusesWhatIsNotCounts) {
  Counts c;
  c.Count("allow", "http", 10, 20);
  c.Count("deny", "address_class: private (RFC 1918)", 3, 0);
  c.Count("none", "", 0, 0);
  absl::StatusOr<Counts> back = CountsFromJson(CountsToJson(c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, c);
  EXPECT_EQ(CountsToJson(Counts()), R"({"connections":[],"bytes_up":0,"bytes_down":0})");
  // A gateway's rule outside the set is counted as "other", and entries
  // that then coincide are summed.
  back = CountsFromJson(
      R"({"connections":[["deny","evil.example",2],["deny","other.example",3],["allow","connect",1]],)"
      R"("bytes_up":1,"bytes_down":2})");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((back->connections), (std::map<std::pair<std::string, std::string>, uint64_t>{
                                     {{"deny", "other"}, 5}, {{"allow", "connect"}, 1}}));
  for (const char* bad : {"", "[]", "{}", R"({"connections":[],"bytes_up":-1,"bytes_down":0})",
                          R"({"connections":[["maybe","connect",1]],"bytes_up":0,"bytes_down":0})",
                          R"({"connections":[["allow","connect"]],"bytes_up":0,"bytes_down":0})",
                          R"({"connections":[["allow","connect",1.5]],"bytes_up":0,"bytes_down":0})",
                          R"({"connections":{},"bytes_up":0,"bytes_down":0})"}) {
    EXPECT_FALSE(CountsFromJson(bad).ok()) << bad;
  }
  std::string many = R"({"connections":[)";
  for (size_t i = 0; i <= kMaxCountEntries; ++i) many += std::string(i == 0 ? "" : ",") + R"(["allow","http",1])";
  many += R"(],"bytes_up":0,"bytes_down":0})";
  EXPECT_FALSE(CountsFromJson(many).ok()) << "more entries than any gateway has rules";
}

TEST(EgressControlMessages, TagCarriesTheSandboxAndAValidRequestId) {
  const std::string m = TagMessage("4711-3", "q01JEXAMPLE0000000000000000");
  EXPECT_EQ(m, std::string("T4711-3\0q01JEXAMPLE0000000000000000", 35));
  std::string sandbox, id;
  ASSERT_TRUE(ParseTagMessage(m, &sandbox, &id));
  EXPECT_EQ(sandbox, "4711-3");
  EXPECT_EQ(id, "q01JEXAMPLE0000000000000000");
  for (const std::string& bad :
       {std::string("T4711-3"), std::string("D4711-3"), std::string(""), TagMessage("", "q1"), TagMessage("1-1", ""),
        TagMessage("1-1", "with space"), TagMessage("1-1", "quote\""), TagMessage("1-1", std::string(65, 'q')),
        TagMessage("1-1", "q1\nq2")}) {
    EXPECT_FALSE(ParseTagMessage(bad, &sandbox, &id)) << bad;
  }
  EXPECT_TRUE(ValidRequestId(std::string(64, 'q')));
  EXPECT_TRUE(ValidRequestId("q01J.A_b-9"));
}

TEST(EgressControlMessages, CountsAskedAndAnsweredBySequence) {
  uint64_t sequence = 0;
  ASSERT_TRUE(ParseCountsRequest(CountsRequest(42), &sequence));
  EXPECT_EQ(sequence, 42u);
  EXPECT_FALSE(ParseCountsRequest("S", &sequence));
  EXPECT_FALSE(ParseCountsRequest("S0", &sequence));
  EXPECT_FALSE(ParseCountsRequest("Sx", &sequence));
  EXPECT_FALSE(ParseCountsRequest("C1", &sequence));
  Counts c;
  c.Count("deny", "port_allowlist", 7, 0);
  bool final = true;
  absl::StatusOr<Counts> got = ParseCountsMessage(CountsReply(42, c), &sequence, &final);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, c);
  EXPECT_EQ(sequence, 42u);
  EXPECT_FALSE(final);
  got = ParseCountsMessage(FinalCounts(c), &sequence, &final);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, c);
  EXPECT_EQ(sequence, 0u);
  EXPECT_TRUE(final);
  for (const char* bad : {"", "C", "C42", "C0 {}", "Cx {}", "R", "C42 not json", "Fnot json"}) {
    EXPECT_FALSE(ParseCountsMessage(bad, &sequence, &final).ok()) << bad;
  }
}

}  // namespace
}  // namespace cubicle::egress
