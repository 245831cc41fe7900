// Egress through the bridge and the gateway against direct loopback TCP, in
// the same run (issue 7): bulk throughput (1 GiB per iteration) and
// connection set-up latency.
//
// The sandbox side is what init does, without the sandbox: a listener on
// 127.0.0.1 stands for the bridge, and each accepted connection is handed
// to the gateway by egress::bridge::PassPending — the very function init
// runs — over a SOCK_SEQPACKET socketpair attached to a real gateway
// process (GatewayProcess, as a launcher makes it). The client then speaks
// CONNECT, as a proxy client in the sandbox would.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/unique_fd.h"
#include "bench/bench_stats.h"
#include "benchmark/benchmark.h"
#include "egress/bridge.h"
#include "egress/gateway.h"
#include "egress/gateway_process.h"

namespace cubicle::bench {
namespace {

constexpr uint64_t kBulkBytes = uint64_t{1} << 30;
constexpr char kHost[] = "bench.egress.test";

UniqueFd Listen(uint16_t* port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd.get(), 512) != 0) {
    return UniqueFd();
  }
  socklen_t len = sizeof(a);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

UniqueFd Connect(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return UniqueFd();
  return fd;
}

// The upstream servers: `bulk` writes kBulkBytes then closes; `hello`
// writes one byte then closes. One thread each, until stopped.
class Servers {
 public:
  Servers() {
    bulk_ = Listen(&bulk_port_);
    hello_ = Listen(&hello_port_);
    threads_.emplace_back([this] { Serve(bulk_.get(), kBulkBytes); });
    threads_.emplace_back([this] { Serve(hello_.get(), 1); });
  }
  ~Servers() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }
  uint16_t bulk_port() const { return bulk_port_; }
  uint16_t hello_port() const { return hello_port_; }

 private:
  void Serve(int listen_fd, uint64_t bytes) {
    std::vector<char> chunk(1 << 20, 'x');
    while (!stop_) {
      pollfd p = {listen_fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      UniqueFd c(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) continue;
      for (uint64_t sent = 0; sent < bytes;) {
        ssize_t n = ::send(c.get(), chunk.data(), std::min<uint64_t>(chunk.size(), bytes - sent), MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<uint64_t>(n);
      }
    }
  }
  UniqueFd bulk_, hello_;
  uint16_t bulk_port_ = 0, hello_port_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// A gateway for kHost and both server ports, one attached "sandbox", and
// the stand-in for the bridge's listener.
class Path {
 public:
  explicit Path(const Servers& servers) {
    egress::Policy p;
    p.mode = egress::NetMode::kAllowlist;
    p.domains = {*egress::ParseDomainPattern(kHost)};
    p.ports = {servers.bulk_port(), servers.hello_port()};
    p.allow_cidrs = {*egress::ParseCidr("127.0.0.1/32")};
    p.resolve = {*egress::ParseResolve(absl::StrCat(kHost, "=127.0.0.1"))};
    p.budgets.max_connections = 1024;
    p.log_path = "/dev/null";
    // The deployed shape: the gateway is a process of its own (the cubicle
    // binary), unprivileged, under seccomp.
    const char* binary = std::getenv("CUBICLE_BINARY");
    egress::SetGatewayExecutable(binary != nullptr ? binary : CUBICLE_BINARY_PATH);
    absl::StatusOr<std::shared_ptr<egress::GatewayProcess>> gateway = egress::GatewayProcess::Spawn(p);
    if (!gateway.ok()) {
      std::fprintf(stderr, "egress gateway: %s\n", std::string(gateway.status().message()).c_str());
      std::abort();
    }
    gateway_ = *std::move(gateway);
    int sv[2];
    ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv);
    channel_.reset(sv[1]);
    attachment_ = *gateway_->Attach("bench", UniqueFd(sv[0]));
    bridge_ = Listen(&bridge_port_);
    int fl = 1;
    ::ioctl(bridge_.get(), FIONBIO, &fl);
  }

  // Connects through the bridge and asks for a tunnel to `port`; returns
  // the socket and any payload bytes that came with the "200".
  UniqueFd Open(uint16_t port, uint64_t* early) {
    UniqueFd c = Connect(bridge_port_);
    egress::bridge::PassPending(bridge_.get(), channel_.get());
    std::string req = absl::StrCat("CONNECT ", kHost, ":", port, " HTTP/1.1\r\n\r\n");
    if (::send(c.get(), req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) return UniqueFd();
    std::string got;
    char buf[4096];
    size_t end;
    while ((end = got.find("\r\n\r\n")) == std::string::npos) {
      ssize_t n = ::recv(c.get(), buf, sizeof(buf), 0);
      if (n <= 0) return UniqueFd();
      got.append(buf, static_cast<size_t>(n));
    }
    if (got.rfind("HTTP/1.1 200", 0) != 0) return UniqueFd();
    *early = got.size() - (end + 4);
    return c;
  }

 private:
  std::shared_ptr<egress::GatewayProcess> gateway_;
  UniqueFd channel_;
  egress::Attachment attachment_;
  UniqueFd bridge_;
  uint16_t bridge_port_ = 0;
};

Servers& TheServers() {
  static Servers* s = new Servers();
  return *s;
}
Path& ThePath() {
  static Path* p = new Path(TheServers());
  return *p;
}

uint64_t Drain(int fd) {
  static std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  for (;;) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) return total;
    total += static_cast<uint64_t>(n);
  }
}

void Bulk(benchmark::State& state, bool via_gateway) {
  for (auto _ : state) {
    uint64_t got = 0;
    UniqueFd c = via_gateway ? ThePath().Open(TheServers().bulk_port(), &got) : Connect(TheServers().bulk_port());
    if (!c) return state.SkipWithError("connect failed");
    got += Drain(c.get());
    if (got != kBulkBytes) return state.SkipWithError("short transfer");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBulkBytes));
}

// Connect, (tunnel,) first byte, close; per-connection percentiles.
void Setup(benchmark::State& state, bool via_gateway) {
  std::vector<double> ms;
  for (auto _ : state) {
    absl::Time start = absl::Now();
    uint64_t got = 0;
    UniqueFd c = via_gateway ? ThePath().Open(TheServers().hello_port(), &got) : Connect(TheServers().hello_port());
    if (!c) return state.SkipWithError("connect failed");
    got += Drain(c.get());
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
    if (got != 1) return state.SkipWithError("no byte");
  }
  state.counters["p50_ms"] = Percentile<50>(ms);
  state.counters["p90_ms"] = Percentile<90>(ms);
  state.counters["p99_ms"] = Percentile<99>(ms);
}

void BM_DirectBulk(benchmark::State& state) { Bulk(state, false); }
void BM_GatewayBulk(benchmark::State& state) { Bulk(state, true); }
void BM_DirectSetup(benchmark::State& state) { Setup(state, false); }
void BM_GatewaySetup(benchmark::State& state) { Setup(state, true); }

BENCHMARK(BM_DirectBulk)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GatewayBulk)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DirectSetup)->Iterations(Repetitions(500))->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_GatewaySetup)->Iterations(Repetitions(500))->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace cubicle::bench

BENCHMARK_MAIN();
