// namespaces/prefault.h: what a zygote maps before its request is really in
// its page tables afterwards. Each check runs in a forked child, whose
// page tables start as fork leaves them: no file-backed text, every
// written page shared copy-on-write. /proc/self/pagemap says per page
// whether it is present (bit 63) and mapped by this process alone (bit 56).
#include "namespaces/prefault.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace cubicle::namespaces {
namespace {

constexpr uint64_t kPresent = uint64_t{1} << 63;
constexpr uint64_t kExclusive = uint64_t{1} << 56;

// Pages of [start, start + length) whose pagemap entry has every bit of
// `bits`; -1 when pagemap cannot be read.
long PagesWith(int pagemap, uintptr_t start, size_t length, uint64_t bits) {
  long count = 0;
  for (uintptr_t page = start & ~uintptr_t{4095}; page < start + length; page += 4096) {
    uint64_t entry = 0;
    if (::pread(pagemap, &entry, sizeof(entry), static_cast<off_t>(page / 4096 * sizeof(entry))) !=
        sizeof(entry)) {
      return -1;
    }
    count += (entry & bits) == bits;
  }
  return count;
}

// Runs `check` in a forked child; its exit code is the result: 0 passed,
// 1 failed (and said why on stderr), 2 the host cannot tell (skip).
int InChild(int (*check)()) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(check());
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << status;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

bool KernelHasPopulateRead() {
  // MADV_POPULATE_READ (22) came with Linux 5.14; older kernels say EINVAL.
  void* page = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return false;
  const bool ok = ::madvise(page, 4096, 22) == 0;
  ::munmap(page, 4096);
  return ok;
}

TEST(Prefault, ExecutableSegmentsCoverThisProgramsCode) {
  const auto here = reinterpret_cast<uintptr_t>(&ExecutableSegments);
  bool covered = false;
  for (const MemoryRange& r : ExecutableSegments()) {
    EXPECT_EQ(r.start % 4096, 0u);
    EXPECT_EQ(r.length % 4096, 0u);
    EXPECT_GT(r.length, 0u);
    covered |= here >= r.start && here < r.start + r.length;
  }
  EXPECT_TRUE(covered) << "no executable segment holds ExecutableSegments itself";
}

std::vector<MemoryRange>* g_text = nullptr;

int TextIsMappedAfterPrefaultText() {
  const int pagemap = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap < 0) return 2;
  long before = 0, after = 0, total = 0;
  for (const MemoryRange& r : *g_text) {
    const long n = PagesWith(pagemap, r.start, r.length, kPresent);
    if (n < 0) return 2;
    before += n;
    total += static_cast<long>(r.length / 4096);
  }
  PrefaultText(g_text->data(), g_text->size());
  for (const MemoryRange& r : *g_text) after += PagesWith(pagemap, r.start, r.length, kPresent);
  // A fork maps none of it; afterwards all of it is.
  if (before >= total || after != total) {
    std::fprintf(stderr, "present pages: %ld before, %ld after, of %ld\n", before, after, total);
    return 1;
  }
  return 0;
}

TEST(Prefault, TextIsInTheForkedChildsPageTablesAfterPrefaultText) {
  if (!KernelHasPopulateRead()) GTEST_SKIP() << "the kernel has no MADV_POPULATE_READ (Linux 5.14)";
  std::vector<MemoryRange> text = ExecutableSegments();
  g_text = &text;
  const int rc = InChild(TextIsMappedAfterPrefaultText);
  g_text = nullptr;
  if (rc == 2) GTEST_SKIP() << "/proc/self/pagemap cannot be read here";
  EXPECT_EQ(rc, 0);
}

char* g_shared = nullptr;
constexpr size_t kSharedBytes = 4 * 4096;

int WritablePagesAreOwnAfterPrefaultWritable() {
  const int pagemap = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap < 0) return 2;
  const auto start = reinterpret_cast<uintptr_t>(g_shared);
  const long before = PagesWith(pagemap, start, kSharedBytes, kPresent | kExclusive);
  if (before < 0) return 2;
  PrefaultWritable(g_shared, kSharedBytes);
  const long after = PagesWith(pagemap, start, kSharedBytes, kPresent | kExclusive);
  // Shared with the parent before; this child's own after, contents kept.
  for (size_t i = 0; i < kSharedBytes; ++i) {
    if (g_shared[i] != static_cast<char>(i % 251)) {
      std::fprintf(stderr, "byte %zu changed\n", i);
      return 1;
    }
  }
  if (before != 0 || after != static_cast<long>(kSharedBytes / 4096)) {
    std::fprintf(stderr, "own pages: %ld before, %ld after, of %zu\n", before, after, kSharedBytes / 4096);
    return 1;
  }
  return 0;
}

TEST(Prefault, WritablePagesBecomeTheChildsOwnWithTheirContents) {
  void* area = ::mmap(nullptr, kSharedBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(area, MAP_FAILED);
  g_shared = static_cast<char*>(area);
  for (size_t i = 0; i < kSharedBytes; ++i) g_shared[i] = static_cast<char>(i % 251);
  const int rc = InChild(WritablePagesAreOwnAfterPrefaultWritable);
  ::munmap(area, kSharedBytes);
  g_shared = nullptr;
  if (rc == 2) GTEST_SKIP() << "/proc/self/pagemap cannot be read here";
  EXPECT_EQ(rc, 0);
}

}  // namespace
}  // namespace cubicle::namespaces
