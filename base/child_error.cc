#include "base/child_error.h"

namespace cubicle::child {

size_t CopyString(char* dst, size_t size, const char* src) {
  if (size == 0) return 0;
  size_t i = 0;
  if (src != nullptr) {
    for (; i + 1 < size && src[i] != '\0'; ++i) dst[i] = src[i];
  }
  dst[i] = '\0';
  return i;
}

bool Fail(ChildError* error, const char* step, const char* detail, int err) {
  CopyString(error->step, sizeof(error->step), step);
  CopyString(error->detail, sizeof(error->detail), detail);
  error->err = err;
  return false;
}

char* FormatWithNumber(char* buf, size_t size, const char* prefix, long n) {
  size_t used = CopyString(buf, size, prefix);
  char digits[24];
  size_t count = 0;
  bool negative = n < 0;
  unsigned long v = negative ? 0UL - static_cast<unsigned long>(n) : static_cast<unsigned long>(n);
  do {
    digits[count++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && count < sizeof(digits));
  if (negative && used + 1 < size) buf[used++] = '-';
  while (count > 0 && used + 1 < size) buf[used++] = digits[--count];
  buf[used] = '\0';
  return buf;
}

}  // namespace cubicle::child
