// rpc/workspace_leases.h without a daemon: one holder per key, waiters
// started in order through `post` (never on the releasing thread), refusal
// without waiting, withdrawal, and a lease that outlives its table. The
// test's `post` only records closures; the test runs them when it says, so
// every order below is the test's, not a scheduler's.
#include "rpc/workspace_leases.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace cubicle::rpc {
namespace {

using Lease = WorkspaceLeases::Lease;

// A `post` that keeps what it is given until RunAll.
class RecordedPosts {
 public:
  WorkspaceLeases::Post Post() {
    return [this](absl::AnyInvocable<void() &&> f) { pending_.push_back(std::move(f)); };
  }
  size_t size() const { return pending_.size(); }
  // Runs what was posted so far (and what those post in turn), in order.
  void RunAll() {
    for (int round = 0; round < 100 && !pending_.empty(); ++round) {
      std::vector<absl::AnyInvocable<void() &&>> now;
      now.swap(pending_);
      for (auto& f : now) std::move(f)();
    }
  }
  void Clear() { pending_.clear(); }

 private:
  std::vector<absl::AnyInvocable<void() &&>> pending_;
};

// Who got a lease, in order, the thread it got it on, and the leases held.
struct Starts {
  std::vector<std::string> order;
  std::vector<std::thread::id> threads;
  std::vector<std::shared_ptr<Lease>> held;

  WorkspaceLeases::Start Named(std::string name) {
    return [this, name = std::move(name)](std::shared_ptr<Lease> lease) {
      order.push_back(name);
      threads.push_back(std::this_thread::get_id());
      held.push_back(std::move(lease));
    };
  }
};

TEST(WorkspaceLeases, FreeKeyStartsAtOnceOnTheCallersThread) {
  RecordedPosts posts;
  auto leases = WorkspaceLeases::Create(posts.Post());
  Starts starts;
  std::optional<uint64_t> r = leases->Acquire("session:a", /*wait=*/true, starts.Named("A"));
  ASSERT_TRUE(r.has_value()) << "a free key is never refused";
  ASSERT_EQ(starts.order, std::vector<std::string>{"A"}) << "started before Acquire returned";
  EXPECT_EQ(starts.threads[0], std::this_thread::get_id());
  EXPECT_EQ(posts.size(), 0u) << "nothing posted for a free key";
  EXPECT_EQ(starts.held[0]->key(), "session:a");
  EXPECT_TRUE(leases->Held("session:a"));
  EXPECT_EQ(leases->Waiting("session:a"), 0u);

  // Free again once the lease goes; with wait=false too.
  starts.held.clear();
  EXPECT_FALSE(leases->Held("session:a"));
  EXPECT_EQ(posts.size(), 0u) << "no waiter, nothing to post";
  EXPECT_TRUE(leases->Acquire("session:a", /*wait=*/false, starts.Named("B")).has_value());
  EXPECT_EQ(starts.order, (std::vector<std::string>{"A", "B"}));
}

TEST(WorkspaceLeases, WaitersStartInOrderThroughPostNeverOnTheReleasingThread) {
  RecordedPosts posts;
  auto leases = WorkspaceLeases::Create(posts.Post());
  Starts starts;
  ASSERT_TRUE(leases->Acquire("k", true, starts.Named("A")).has_value());
  std::optional<uint64_t> b = leases->Acquire("k", true, starts.Named("B"));
  std::optional<uint64_t> c = leases->Acquire("k", true, starts.Named("C"));
  ASSERT_TRUE(b.has_value());
  ASSERT_TRUE(c.has_value());
  EXPECT_NE(*b, 0u) << "a waiter's ticket is not the free key's 0";
  EXPECT_NE(*b, *c);
  EXPECT_EQ(starts.order, std::vector<std::string>{"A"});
  EXPECT_EQ(leases->Waiting("k"), 2u);

  // A's lease released on another thread: B is posted, not started there.
  std::shared_ptr<Lease> a = std::move(starts.held[0]);
  starts.held.clear();
  std::thread releaser([a = std::move(a)]() mutable { a.reset(); });
  const std::thread::id releaser_id = releaser.get_id();
  releaser.join();
  EXPECT_EQ(starts.order, std::vector<std::string>{"A"}) << "B started on the releasing thread";
  EXPECT_EQ(posts.size(), 1u);
  EXPECT_TRUE(leases->Held("k")) << "the lease passes to B: held all along";
  EXPECT_EQ(leases->Waiting("k"), 1u);

  posts.RunAll();
  ASSERT_EQ(starts.order, (std::vector<std::string>{"A", "B"}));
  EXPECT_NE(starts.threads[1], releaser_id);
  EXPECT_EQ(starts.threads[1], std::this_thread::get_id()) << "B ran where the test ran the posted closure";
  EXPECT_EQ(starts.held[0]->key(), "k");

  // A newcomer while B holds it queues behind C.
  ASSERT_TRUE(leases->Acquire("k", true, starts.Named("D")).has_value());
  EXPECT_EQ(leases->Waiting("k"), 2u);

  starts.held.clear();  // B's release, on this thread: still only posted
  EXPECT_EQ(starts.order, (std::vector<std::string>{"A", "B"}));
  posts.RunAll();
  EXPECT_EQ(starts.order, (std::vector<std::string>{"A", "B", "C"}));
  starts.held.clear();
  posts.RunAll();
  EXPECT_EQ(starts.order, (std::vector<std::string>{"A", "B", "C", "D"}));
  EXPECT_TRUE(leases->Held("k"));
  EXPECT_EQ(leases->Waiting("k"), 0u);
  starts.held.clear();
  EXPECT_EQ(posts.size(), 0u);
  EXPECT_FALSE(leases->Held("k"));
}

TEST(WorkspaceLeases, NoWaitOnAHeldKeyIsRefusedAndTheStartDestroyedUncalled) {
  RecordedPosts posts;
  auto leases = WorkspaceLeases::Create(posts.Post());
  Starts starts;
  ASSERT_TRUE(leases->Acquire("k", true, starts.Named("A")).has_value());
  auto owned = std::make_shared<int>(7);
  bool called = false;
  std::optional<uint64_t> r =
      leases->Acquire("k", /*wait=*/false, [owned, &called](std::shared_ptr<Lease>) { called = true; });
  EXPECT_FALSE(r.has_value());
  EXPECT_FALSE(called);
  EXPECT_EQ(owned.use_count(), 1) << "the refused start (and what it captured) outlived Acquire";
  EXPECT_EQ(leases->Waiting("k"), 0u);
  starts.held.clear();
  posts.RunAll();
  EXPECT_FALSE(called) << "a refused start ran after the release";
  EXPECT_FALSE(leases->Held("k"));
}

TEST(WorkspaceLeases, WithdrawDropsAWaiterButNotOneThatStarted) {
  RecordedPosts posts;
  auto leases = WorkspaceLeases::Create(posts.Post());
  Starts starts;
  std::optional<uint64_t> a = leases->Acquire("k", true, starts.Named("A"));
  auto owned = std::make_shared<int>(7);
  bool called = false;
  std::optional<uint64_t> b = leases->Acquire("k", true, [owned, &called](std::shared_ptr<Lease>) { called = true; });
  std::optional<uint64_t> c = leases->Acquire("k", true, starts.Named("C"));
  ASSERT_TRUE(a.has_value() && b.has_value() && c.has_value());
  EXPECT_EQ(owned.use_count(), 2) << "a waiter keeps its start";

  EXPECT_TRUE(leases->Withdraw("k", *b));
  EXPECT_EQ(owned.use_count(), 1) << "the withdrawn start was kept";
  EXPECT_EQ(leases->Waiting("k"), 1u);
  EXPECT_FALSE(leases->Withdraw("k", *b)) << "withdrawn twice";
  EXPECT_FALSE(leases->Withdraw("other", *c)) << "a ticket belongs to its key";
  EXPECT_FALSE(leases->Withdraw("k", *a)) << "the free key's start ran at once: nothing to withdraw";

  starts.held.clear();
  posts.RunAll();
  EXPECT_FALSE(called);
  EXPECT_EQ(starts.order, (std::vector<std::string>{"A", "C"})) << "C is next once B is withdrawn";
  EXPECT_FALSE(leases->Withdraw("k", *c)) << "C started: too late to withdraw";
  EXPECT_TRUE(leases->Held("k"));
  starts.held.clear();
  EXPECT_FALSE(leases->Held("k"));
}

TEST(WorkspaceLeases, ALeaseOutlivingItsTableReleasesNothing) {
  RecordedPosts posts;
  auto leases = WorkspaceLeases::Create(posts.Post());
  Starts starts;
  ASSERT_TRUE(leases->Acquire("k", true, starts.Named("A")).has_value());
  auto owned = std::make_shared<int>(7);
  ASSERT_TRUE(leases->Acquire("k", true, [owned](std::shared_ptr<Lease>) {}).has_value());
  std::weak_ptr<WorkspaceLeases> weak = leases;
  leases.reset();
  EXPECT_TRUE(weak.expired()) << "a lease keeps its table alive";
  EXPECT_EQ(owned.use_count(), 1) << "the table's waiters went with it";
  starts.held.clear();  // must not touch the table
  EXPECT_EQ(posts.size(), 0u);

  // A hand-off posted before the table went: the lease it carries outlives
  // the table too.
  RecordedPosts later;
  leases = WorkspaceLeases::Create(later.Post());
  ASSERT_TRUE(leases->Acquire("k", true, starts.Named("B")).has_value());
  ASSERT_TRUE(leases->Acquire("k", true, starts.Named("C")).has_value());
  starts.held.clear();
  ASSERT_EQ(later.size(), 1u);
  leases.reset();
  later.RunAll();
  EXPECT_EQ(starts.order, (std::vector<std::string>{"A", "B", "C"}));
  starts.held.clear();
  EXPECT_EQ(later.size(), 0u);
}

TEST(WorkspaceLeases, KeysAreIndependent) {
  RecordedPosts posts;
  auto leases = WorkspaceLeases::Create(posts.Post());
  Starts starts;
  ASSERT_TRUE(leases->Acquire("session:a", true, starts.Named("a1")).has_value());
  ASSERT_TRUE(leases->Acquire("session:b", true, starts.Named("b1")).has_value());
  EXPECT_EQ(starts.order, (std::vector<std::string>{"a1", "b1"})) << "b is free whatever holds a";
  ASSERT_TRUE(leases->Acquire("session:a", true, starts.Named("a2")).has_value());
  EXPECT_EQ(leases->Waiting("session:a"), 1u);
  EXPECT_EQ(leases->Waiting("session:b"), 0u);
  EXPECT_FALSE(leases->Acquire("session:b", false, starts.Named("b2")).has_value());

  starts.held.erase(starts.held.begin() + 1);  // b1's: a's waiter stays waiting
  EXPECT_EQ(posts.size(), 0u);
  EXPECT_FALSE(leases->Held("session:b"));
  EXPECT_TRUE(leases->Held("session:a"));
  EXPECT_EQ(leases->Waiting("session:a"), 1u);
  EXPECT_FALSE(leases->Held("session:c")) << "a key never asked for";
  EXPECT_EQ(leases->Waiting("session:c"), 0u);
  EXPECT_FALSE(leases->Held("session:c")) << "asking made no entry";

  starts.held.clear();
  posts.RunAll();
  EXPECT_EQ(starts.order, (std::vector<std::string>{"a1", "b1", "a2"}));
  starts.held.clear();
  EXPECT_FALSE(leases->Held("session:a"));
}

}  // namespace
}  // namespace cubicle::rpc
