// A HostHygieneTest run once on every payload route (sandbox_runner.h):
//
//   class CoreThing : public PayloadRouteTest {};
//   TEST_P(CoreThing, Holds) { ... Run(spec) ... }
//   INSTANTIATE_TEST_SUITE_P(EveryRoute, CoreThing, ::testing::ValuesIn(kEveryRoute), RouteTestName);
//
// A route this host or user cannot take is skipped in SetUp, saying why,
// never left out. Route names start with no "Core", so rootless.sh's filter
// (`*/Core*`) still picks suites by their own name.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "absl/strings/string_view.h"
#include "tests/support/host_probes.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {

inline std::string RouteTestName(const ::testing::TestParamInfo<PayloadRoute>& info) {
  return RouteName(info.param);
}

class PayloadRouteTest : public HostHygieneTest, public ::testing::WithParamInterface<PayloadRoute> {
 protected:
  void SetUp() override {
    HostHygieneTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    switch (route()) {
      case PayloadRoute::kCold:
      case PayloadRoute::kArmedDirect:
        break;
      case PayloadRoute::kArmedViaInit:
        if (!IsRoot()) {
          GTEST_SKIP() << "the request must bring a workspace to go through init, and a rootless zygote "
                          "cannot attach one at hand-off (ValidateRequest: cloning a host mount needs "
                          "CAP_SYS_ADMIN over the host's mount namespace)";
        }
        {
          // RunOnRoute's workspace is a TempDir too, root's: shown as the
          // sandbox user's through an idmapped mount.
          TempDir probe;
          REQUIRE_HOST(IdmappedMounts(probe.path()));
        }
        break;
      case PayloadRoute::kWarm:
      case PayloadRoute::kWarmTemplate:
        REQUIRE_HOST(Python3());  // the warm interpreter itself
        break;
    }
  }

  PayloadRoute route() const { return GetParam(); }

  absl::StatusOr<SandboxRun> Run(const runtime::SandboxSpec& spec, absl::string_view stdin_text = "") {
    return RunOnRoute(route(), spec, stdin_text);
  }
};

}  // namespace cubicle::test_support
