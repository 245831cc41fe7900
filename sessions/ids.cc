#include "sessions/ids.h"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cubicle::sessions {
namespace {

constexpr char kCrockford[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
constexpr uint64_t kRandomHighMask = 0xffff;  // the random part's top 16 of 80 bits

struct Ulid {
  uint64_t ms = 0;       // 48 bits
  uint64_t rand_hi = 0;  // 16 bits
  uint64_t rand_lo = 0;  // 64 bits
};

// splitmix64: only for the fallback below, where getrandom(2) has failed.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// 80 fresh bits from getrandom(2). NewId cannot fail, so if the kernel
// refuses (it does not, for 10 bytes, once booted) the bits come from the
// time and pid instead: weaker across processes, still unique within this
// one, which the monotonic increment guarantees by itself.
void FillRandom(Ulid& id) {
  unsigned char bytes[10];
  size_t got = 0;
  for (int tries = 0; got < sizeof(bytes) && tries < 8; ++tries) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
    else if (errno != EINTR) break;
  }
  if (got < sizeof(bytes)) {
    uint64_t seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    uint64_t a = Mix(seed ^ static_cast<uint64_t>(::getpid()));
    uint64_t b = Mix(a);
    for (size_t i = 0; i < sizeof(bytes); ++i) bytes[i] = static_cast<unsigned char>((i < 8 ? a : b) >> (8 * (i % 8)));
  }
  id.rand_hi = (uint64_t{bytes[0]} << 8) | bytes[1];
  id.rand_lo = 0;
  for (size_t i = 2; i < sizeof(bytes); ++i) id.rand_lo = (id.rand_lo << 8) | bytes[i];
}

// The generator's last id, shared by every thread so that ids stay ordered
// process-wide; `pid` notices a fork, whose child must not replay the
// parent's next ids.
class Generator {
 public:
  Ulid Next() {
    uint64_t now = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count()) &
                   ((uint64_t{1} << 48) - 1);
    pid_t pid = ::getpid();
    absl::MutexLock lock(&mu_);
    if (pid != pid_ || now > last_.ms) {
      pid_ = pid;
      last_.ms = std::max(now, last_.ms);
      FillRandom(last_);
      return last_;
    }
    // Same millisecond, or the clock went back: one past the last id.
    if (++last_.rand_lo == 0) {
      last_.rand_hi = (last_.rand_hi + 1) & kRandomHighMask;
      if (last_.rand_hi == 0) {
        // The 80 bits wrapped: borrow the next millisecond rather than repeat.
        ++last_.ms;
        FillRandom(last_);
      }
    }
    return last_;
  }

 private:
  absl::Mutex mu_;
  Ulid last_ ABSL_GUARDED_BY(mu_);
  pid_t pid_ ABSL_GUARDED_BY(mu_) = 0;
};

Generator& TheGenerator() {
  static Generator* generator = new Generator();  // never destroyed: ids may be made during exit
  return *generator;
}

}  // namespace

std::string NewId(char prefix) {
  Ulid id = TheGenerator().Next();
  std::string out(1 + kUlidChars, prefix);
  // 130 bits of digits for 128 of value: the timestamp takes the first 10
  // digits (50 bits, the top 2 zero), the random part the last 16.
  uint64_t ms = id.ms;
  for (size_t i = 10; i > 0; --i, ms >>= 5) out[i] = kCrockford[ms & 31];
  uint64_t lo = id.rand_lo;
  uint64_t hi = id.rand_hi;
  for (size_t i = kUlidChars; i > 10; --i) {
    out[i] = kCrockford[lo & 31];
    lo = (lo >> 5) | ((hi & 31) << 59);
    hi >>= 5;
  }
  return out;
}

bool LooksLikeId(absl::string_view text, char prefix) {
  if (text.size() != 1 + kUlidChars || text[0] != prefix) return false;
  if (text[1] > '7') return false;
  for (char c : text.substr(1)) {
    bool digit = false;
    for (const char* d = kCrockford; *d; ++d) digit |= (*d == c);
    if (!digit) return false;
  }
  return true;
}

}  // namespace cubicle::sessions
