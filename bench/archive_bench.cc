// Workspace archive and restore throughput (sessions/archive.h) against
// `tar | zstd -3` and `zstd -dc | tar -x` on the same generated workspace,
// in the same run. The workspace lives on /dev/shm, as a session's does on
// its tmpfs, so the disk does not set the pace. MiB/s count the files'
// bytes, not the archive's.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/bench_stats.h"
#include "benchmark/benchmark.h"
#include "sessions/archive.h"

namespace cubicle::bench {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr int kTextFiles = 8;       // 2 MiB each: compressible text
constexpr int kBinaryFiles = 4;     // 4 MiB each: incompressible
constexpr int kSmallDirs = 64;      // 128 files of 4 KiB each: half text, half binary
constexpr int kSmallPerDir = 128;
constexpr uint64_t kSmallBytes = 4096;
constexpr uint64_t kWorkspaceBytes = kTextFiles * 2 * kMiB + kBinaryFiles * 4 * kMiB +
                                     uint64_t{kSmallDirs} * kSmallPerDir * kSmallBytes;

// A deterministic byte stream: text drawn from a small vocabulary, or noise.
class Generator {
 public:
  std::string Text(uint64_t bytes) {
    static const char* kWords[] = {"session ", "workspace ", "archive ", "the ", "of ", "sandbox ", "return ",
                                   "status ",  "int ",        "x = 1;\n", "for ", "import ", "def ",   "data\n"};
    std::string out;
    while (out.size() < bytes) out += kWords[Next() % (sizeof(kWords) / sizeof(kWords[0]))];
    out.resize(bytes);
    return out;
  }
  std::string Noise(uint64_t bytes) {
    std::string out(bytes, '\0');
    for (char& c : out) c = static_cast<char>(Next() >> 24);
    return out;
  }

 private:
  uint32_t Next() { return state_ = state_ * 1664525u + 1013904223u; }
  uint32_t state_ = 42;
};

void Run(const std::string& cmd) {
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "archive_bench: '%s' failed\n", cmd.c_str());
    std::exit(1);
  }
}

void Put(const std::string& path, const std::string& data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(data.data(), 1, data.size(), f) != data.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "archive_bench: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

// The generated workspace and the archives both tools made of it, made
// once for the whole run and removed at exit.
struct Workspace {
  std::string dir, src, ours, theirs;

  Workspace() {
    char tmpl[] = "/dev/shm/cubicle-archive-bench-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) std::exit(1);
    dir = tmpl;
    src = dir + "/src";
    ours = dir + "/ours.tar.zst";
    theirs = dir + "/theirs.tar.zst";
    Run(absl::StrCat("mkdir -p '", src, "/text' '", src, "/bin'"));
    Generator gen;
    for (int i = 0; i < kTextFiles; ++i) Put(absl::StrCat(src, "/text/doc", i, ".txt"), gen.Text(2 * kMiB));
    for (int i = 0; i < kBinaryFiles; ++i) Put(absl::StrCat(src, "/bin/blob", i, ".bin"), gen.Noise(4 * kMiB));
    for (int d = 0; d < kSmallDirs; ++d) {
      std::string sub = absl::StrCat(src, "/small/d", d);
      Run(absl::StrCat("mkdir -p '", sub, "'"));
      for (int f = 0; f < kSmallPerDir; ++f) {
        Put(absl::StrCat(sub, "/f", f), f % 2 ? gen.Noise(kSmallBytes) : gen.Text(kSmallBytes));
      }
    }
  }
  ~Workspace() { Run(absl::StrCat("rm -rf '", dir, "'")); }

  std::string Fresh(const char* name) const {
    std::string path = absl::StrCat(dir, "/", name);
    Run(absl::StrCat("rm -rf '", path, "' && mkdir '", path, "'"));
    return path;
  }
};

const Workspace& Data() {
  static const Workspace workspace;  // its destructor, at exit, removes it
  return workspace;
}

void Report(benchmark::State& state, const std::string& archive) {
  struct stat st;
  ::stat(archive.c_str(), &st);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kWorkspaceBytes));
  state.counters["archive_MiB"] = static_cast<double>(st.st_size) / kMiB;
}

void BM_CubicleArchive(benchmark::State& state) {
  const Workspace& w = Data();
  UniqueFd root(::open(w.src.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  for (auto _ : state) {
    UniqueFd out(::open(w.ours.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    auto stats = sessions::WriteArchive(root.get(), out.get(), {});
    if (!stats.ok()) state.SkipWithError(std::string(stats.status().message()).c_str());
  }
  Report(state, w.ours);
}

void BM_TarZstdArchive(benchmark::State& state) {
  const Workspace& w = Data();
  std::string cmd = absl::StrCat("tar -C '", w.src, "' -cf - . | zstd -3 -q > '", w.theirs, "'");
  for (auto _ : state) Run(cmd);
  Report(state, w.theirs);
}

void BM_CubicleRestore(benchmark::State& state) {
  const Workspace& w = Data();
  {  // the archive this restores, when run alone
    UniqueFd root(::open(w.src.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    UniqueFd out(::open(w.ours.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!sessions::WriteArchive(root.get(), out.get(), {}).ok()) state.SkipWithError("archive failed");
  }
  for (auto _ : state) {
    state.PauseTiming();
    UniqueFd dst(::open(w.Fresh("dst-ours").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    UniqueFd in(::open(w.ours.c_str(), O_RDONLY | O_CLOEXEC));
    state.ResumeTiming();
    auto stats = sessions::ExtractArchive(in.get(), dst.get(), {});
    if (!stats.ok()) state.SkipWithError(std::string(stats.status().message()).c_str());
  }
  Report(state, w.ours);
}

void BM_TarZstdRestore(benchmark::State& state) {
  const Workspace& w = Data();
  Run(absl::StrCat("tar -C '", w.src, "' -cf - . | zstd -3 -q > '", w.theirs, "'"));
  for (auto _ : state) {
    state.PauseTiming();
    std::string dst = w.Fresh("dst-theirs");
    state.ResumeTiming();
    Run(absl::StrCat("zstd -dc -q '", w.theirs, "' | tar -x -C '", dst, "'"));
  }
  Report(state, w.theirs);
}

// One archive or restore per repetition; $CUBICLE_BENCH_REPS (default 20).
void Configure(benchmark::internal::Benchmark* b) { PerExecution(b, Repetitions(20)); }

BENCHMARK(BM_CubicleArchive)->Apply(Configure);
BENCHMARK(BM_TarZstdArchive)->Apply(Configure);
BENCHMARK(BM_CubicleRestore)->Apply(Configure);
BENCHMARK(BM_TarZstdRestore)->Apply(Configure);

}  // namespace
}  // namespace cubicle::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
