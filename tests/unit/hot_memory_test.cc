// base/hot_memory.h: after a fork, a registered thread's stack pages are
// copied by UnshareHotMemory(), so the thread's own writes no longer fault.
#include "base/hot_memory.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace cubicle {
namespace {

constexpr size_t kBytes = 64 << 10;

// Minor faults of the calling thread so far.
long ThreadMinorFaults() {
  struct rusage ru;
  ::getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

// A thread's meeting with the test around a fork: the thread dirties its
// memory and waits; the test forks a child that keeps sharing the pages
// (unsharing them when asked) and lets the thread go on.
struct ForkRendezvous {
  std::mutex mu;
  std::condition_variable cv;
  int stage = 0;

  // In the thread, its memory dirty: waits until the fork is done.
  void ReadyAndWait() {
    std::unique_lock<std::mutex> lock(mu);
    stage = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return stage == 2; });
  }
  // In the test: the child, which shares the pages until EndChild.
  pid_t Fork(bool unshare) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return stage == 1; });
    const pid_t child = ::fork();
    if (child == 0) {
      ::pause();
      ::_exit(0);
    }
    if (unshare) UnshareHotMemory();
    stage = 2;
    cv.notify_all();
    return child;
  }
};

void EndChild(pid_t child) {
  if (child <= 0) return;
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

// The minor faults of writing kBytes of `region` again (one byte in 512).
long FaultsOfARewrite(volatile char* region) {
  const long before = ThreadMinorFaults();
  for (size_t i = 0; i < kBytes; i += 512) region[i] = 2;
  return ThreadMinorFaults() - before;
}

// A thread that dirties kBytes of its stack, lets the test fork (and
// unshare, when `unshare`), then writes the same bytes again: the minor
// faults of that second write.
long FaultsOfAWriteAfterAFork(bool unshare) {
  ForkRendezvous meet;
  long faults = -1;
  std::thread t([&] {
    RegisterHotStack();
    volatile char buf[kBytes];
    for (size_t i = 0; i < kBytes; i += 512) buf[i] = 1;
    meet.ReadyAndWait();
    faults = FaultsOfARewrite(buf);
  });
  const pid_t child = meet.Fork(unshare);
  t.join();
  EndChild(child);
  return faults;
}

bool PopulateWriteWorks() {
  void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const bool ok = ::madvise(p, 4096, MADV_POPULATE_WRITE) == 0;
  ::munmap(p, 4096);
  return ok;
}

TEST(HotMemory, AForkedStackIsCopiedAheadAndItsWritesDoNotFault) {
  if (!PopulateWriteWorks()) GTEST_SKIP() << "MADV_POPULATE_WRITE needs Linux 5.14";
  // The control: without the unshare, each page written faults once (the
  // copy), so the measurement can tell.
  EXPECT_GE(FaultsOfAWriteAfterAFork(/*unshare=*/false), static_cast<long>(kBytes / 4096 / 2));
  EXPECT_EQ(FaultsOfAWriteAfterAFork(/*unshare=*/true), 0);
}

// The same for a thread's malloc arena: a block it allocated and wrote
// before the fork is written again without a fault once unshared.
TEST(HotMemory, AForkedArenaIsCopiedAheadAndItsWritesDoNotFault) {
  if (!PopulateWriteWorks()) GTEST_SKIP() << "MADV_POPULATE_WRITE needs Linux 5.14";
  for (bool unshare : {false, true}) {
    SCOPED_TRACE(unshare ? "unshared" : "the control");
    ForkRendezvous meet;
    long faults = -1;
    bool registered = false;
    std::thread t([&] {
      const int before = HotMemoryCount();
      RegisterHotHeap();
      registered = HotMemoryCount() == before + 1;
      char* block = static_cast<char*>(std::malloc(kBytes));
      std::memset(block, 1, kBytes);
      meet.ReadyAndWait();
      faults = FaultsOfARewrite(block);
      std::free(block);
    });
    const pid_t child = meet.Fork(unshare);
    t.join();
    EndChild(child);
    if (!registered) GTEST_SKIP() << "this thread allocates from the shared main heap here";
    if (unshare) {
      EXPECT_EQ(faults, 0);
    } else {
      EXPECT_GE(faults, static_cast<long>(kBytes / 4096 / 2));
    }
  }
}

TEST(HotMemory, AThreadsStackIsForgottenWhenItEnds) {
  const int before = HotMemoryCount();
  std::thread([&] {
    RegisterHotStack();
    RegisterHotStack();  // idempotent
    EXPECT_EQ(HotMemoryCount(), before + 1);
  }).join();
  EXPECT_EQ(HotMemoryCount(), before);
  UnshareHotMemory();  // nothing registered left of it: no access to a freed stack
}

}  // namespace
}  // namespace cubicle
