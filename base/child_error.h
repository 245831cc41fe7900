// The error record of code that runs between clone and execve. Such code may
// not allocate, so it fills this fixed-size record; the parent turns it into an
// absl::Status ("pivot_root(/newroot): EINVAL: Invalid argument").
#pragma once

#include <cstddef>

namespace cubicle {

struct ChildError {
  char step[64];     // the syscall or operation, e.g. "pivot_root"
  char detail[256];  // its argument, usually a sandbox path
  int err;           // errno, or 0 for a logical error described in detail
};

// Async-signal-safe helpers for the child side.
namespace child {

// Copies at most size-1 bytes and always terminates. Returns the bytes copied.
size_t CopyString(char* dst, size_t size, const char* src);

// Records the failure and returns false, so a step can `return Fail(...)`.
bool Fail(ChildError* error, const char* step, const char* detail, int err);

// Writes "<prefix><n>" into buf (e.g. "/proc/self/fd/7"). Returns buf.
char* FormatWithNumber(char* buf, size_t size, const char* prefix, long n);

}  // namespace child
}  // namespace cubicle
