// Runs a function when destroyed unless disarmed first: how a request or
// an execution whose waiter was dropped uncalled (withdrawn by a cancel,
// or by the drain's deadline) is still answered, in one place whichever
// way it went. Held through a shared_ptr by whoever may drop it; built in
// place (make_shared), never copied, so it runs exactly once.
#pragma once

#include <utility>

#include "absl/functional/any_invocable.h"

namespace cubicle::rpc {

class OnDrop {
 public:
  explicit OnDrop(absl::AnyInvocable<void() &&> fn) : fn_(std::move(fn)) {}
  OnDrop(const OnDrop&) = delete;
  OnDrop& operator=(const OnDrop&) = delete;
  ~OnDrop() {
    if (fn_) std::move(fn_)();
  }
  void Disarm() { fn_ = nullptr; }

 private:
  absl::AnyInvocable<void() &&> fn_;
};

}  // namespace cubicle::rpc
