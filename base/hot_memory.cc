#include "base/hot_memory.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace cubicle {
namespace {

struct Range {
  uintptr_t begin;
  size_t size;
};

std::mutex& Mu() {
  static std::mutex* mu = new std::mutex;  // outlives every thread's exit
  return *mu;
}
std::vector<Range>& Ranges() {
  static std::vector<Range>* ranges = new std::vector<Range>;
  return *ranges;
}
std::atomic<bool> g_unsupported{false};

// A thread's registration, dropped at its exit.
struct Registration {
  Range range{0, 0};
  ~Registration() {
    if (range.size == 0) return;
    std::lock_guard<std::mutex> lock(Mu());
    auto& v = Ranges();
    v.erase(std::remove_if(v.begin(), v.end(), [&](const Range& r) { return r.begin == range.begin; }), v.end());
  }
};
thread_local Registration t_registration;
thread_local Registration t_heap_registration;

// The mapping of /proc/self/maps that holds `addr` (unless it is [heap]),
// with the inaccessible mappings right after it: a glibc arena reserves
// its heap's whole span and opens it up (mprotect) as it grows.
Range MappingOf(uintptr_t addr) {
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return {0, 0};
  Range found{0, 0};
  char line[512];
  while (std::fgets(line, sizeof(line), maps) != nullptr) {
    unsigned long begin = 0, end = 0;
    char perms[8] = {};
    if (std::sscanf(line, "%lx-%lx %7s", &begin, &end, perms) != 3) continue;
    if (found.size != 0) {  // extending over the reserve
      if (begin != found.begin + found.size || std::strcmp(perms, "---p") != 0) break;
      found.size = end - found.begin;
      continue;
    }
    if (addr < begin || addr >= end) continue;
    if (std::strstr(line, "[heap]") != nullptr) break;
    found = {begin, end - begin};
  }
  std::fclose(maps);
  return found;
}

// The resident pages of [begin, begin + size), as runs, populated writable.
void Unshare(const Range& r, std::vector<unsigned char>& resident) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t pages = r.size / page;
  resident.resize(pages);
  if (::mincore(reinterpret_cast<void*>(r.begin), pages * page, resident.data()) != 0) return;
  for (size_t i = 0; i < pages;) {
    if (!(resident[i] & 1)) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < pages && (resident[j] & 1)) ++j;
    if (::madvise(reinterpret_cast<void*>(r.begin + i * page), (j - i) * page, MADV_POPULATE_WRITE) != 0 &&
        errno == EINVAL) {
      g_unsupported.store(true);
      return;
    }
    i = j;
  }
}

}  // namespace

void RegisterHotStack() {
  if (t_registration.range.size != 0) return;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
  void* addr = nullptr;
  size_t size = 0;
  const bool ok = pthread_attr_getstack(&attr, &addr, &size) == 0;
  pthread_attr_destroy(&attr);
  if (!ok || size == 0) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(addr) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(addr) + size) & ~(page - 1);
  if (end <= begin) return;
  t_registration.range = {begin, end - begin};
  std::lock_guard<std::mutex> lock(Mu());
  Ranges().push_back(t_registration.range);
}

void RegisterHotHeap() {
  if (t_heap_registration.range.size != 0) return;
  void* probe = std::malloc(64);
  if (probe == nullptr) return;
  const Range r = MappingOf(reinterpret_cast<uintptr_t>(probe));
  std::free(probe);
  if (r.size == 0) return;
  std::lock_guard<std::mutex> lock(Mu());
  for (const Range& other : Ranges()) {
    if (other.begin == r.begin) return;  // another thread's arena too
  }
  t_heap_registration.range = r;
  Ranges().push_back(r);
}

void UnshareHotMemory() {
  if (g_unsupported.load(std::memory_order_relaxed)) return;
  std::vector<unsigned char> resident;
  std::lock_guard<std::mutex> lock(Mu());  // a registered thread cannot end meanwhile
  for (const Range& r : Ranges()) Unshare(r, resident);
}

int HotMemoryCount() {
  std::lock_guard<std::mutex> lock(Mu());
  return static_cast<int>(Ranges().size());
}

}  // namespace cubicle
