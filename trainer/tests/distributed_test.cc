// ProcessGroup over c10d on loopback, two ranks as two threads of this process: a TCPStore
// served by StoreServer (as perch-train --nproc does), broadcast from rank 0, bucketed
// all-reduce over more than one 25 MB bucket and mixed dtypes, the control vector, a barrier.
#include "trainer/distributed.h"

#include <gtest/gtest.h>

#include <thread>

#include "trainer/launch.h"

namespace perch::trainer {
namespace {

TEST(ParseMasterTest, HostAndPort) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(ParseMaster("127.0.0.1:29500", &host, &port));
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 29500);
  ASSERT_TRUE(ParseMaster("[::1]:80", &host, &port));
  EXPECT_EQ(host, "::1");
  ASSERT_TRUE(ParseMaster("node-1.example.org:1", &host, &port));
  EXPECT_EQ(host, "node-1.example.org");
  for (const char* bad :
       {"", "host", "host:", ":80", "host:0", "host:65536", "host:80x", "host:1234567", "[]:80"}) {
    EXPECT_FALSE(ParseMaster(bad, &host, &port)) << bad;
  }
}

TEST(RankShareArgsTest, RanksShareTheCoresUnlessTold) {
  using V = std::vector<std::string>;
  EXPECT_EQ(RankShareArgs(0, 0, 2, 16, false), (V{"--threads", "8", "--workers", "8"}));
  EXPECT_EQ(RankShareArgs(0, 0, 4, 2, false), (V{"--threads", "1", "--workers", "1"}));
  EXPECT_EQ(RankShareArgs(3, 0, 2, 16, false), (V{"--workers", "8"}));
  EXPECT_EQ(RankShareArgs(0, 0, 2, 16, true), (V{"--workers", "8"}));
  EXPECT_EQ(RankShareArgs(0, 5, 2, 16, false), (V{"--threads", "8"}));
  EXPECT_EQ(RankShareArgs(2, 5, 2, 16, false), V{});
}

TEST(ProcessGroupTest, TwoRanksBroadcastAndAllReduce) {
  StoreServer store("127.0.0.1");
  ASSERT_GT(store.port(), 0);
  // 7M + 2M floats: 36 MB, two buckets of float; then a double tensor in a bucket of its own.
  const std::vector<int64_t> sizes = {7 << 20, 2 << 20, 5};
  std::vector<std::vector<at::Tensor>> results(2);
  std::vector<std::vector<double>> control(2);
  std::vector<std::string> errors(2);
  auto rank_main = [&](int rank) {
    try {
      DistributedOptions o;
      o.rank = rank;
      o.world_size = 2;
      o.master_addr = "127.0.0.1";
      o.master_port = store.port();
      o.store_hosted = true;
      o.timeout_s = 60;
      ProcessGroup pg(o);
      std::vector<at::Tensor> ts = {at::full({sizes[0]}, rank + 1.0, at::kFloat),
                                    at::full({sizes[1] / 2, 2}, rank + 1.0, at::kFloat),
                                    at::full({sizes[2]}, 10.0 * (rank + 1), at::kDouble)};
      ts[0][3] = 100.0f * (rank + 1);
      pg.AllReduceSum(ts);
      std::vector<at::Tensor> bc = {at::full({3, 3}, rank == 0 ? 5.0 : -1.0, at::kFloat),
                                    at::full({4}, rank == 0 ? 2 : 9, at::kLong)};
      pg.Broadcast(bc);
      ts.insert(ts.end(), bc.begin(), bc.end());
      results[rank] = ts;
      control[rank] = pg.AllReduceSum(std::vector<double>{1.0, 0.5 * rank, 1e15 + rank});
      pg.Barrier();
    } catch (const std::exception& e) {
      errors[rank] = e.what();
    }
  };
  std::thread t0(rank_main, 0);
  std::thread t1(rank_main, 1);
  t0.join();
  t1.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  for (int r = 0; r < 2; ++r) {
    const auto& ts = results[r];
    EXPECT_TRUE(ts[0].narrow(0, 4, sizes[0] - 4).eq(3.0f).all().item<bool>());
    EXPECT_EQ(ts[0][3].item<float>(), 300.0f);
    EXPECT_EQ(ts[0][0].item<float>(), 3.0f);
    EXPECT_TRUE(ts[1].eq(3.0f).all().item<bool>());
    EXPECT_EQ(ts[1].sizes(), (std::vector<int64_t>{sizes[1] / 2, 2}));
    EXPECT_TRUE(ts[2].eq(30.0).all().item<bool>());
    EXPECT_TRUE(ts[3].eq(5.0f).all().item<bool>());
    EXPECT_TRUE(ts[4].eq(2).all().item<bool>());
    EXPECT_EQ(control[r], (std::vector<double>{2.0, 0.5, 2e15 + 1}));
  }
}

TEST(ProcessGroupTest, RankOutsideTheWorldIsRejected) {
  DistributedOptions o;
  o.rank = 2;
  o.world_size = 2;
  o.master_addr = "127.0.0.1";
  o.master_port = 1;
  EXPECT_THROW(ProcessGroup pg(o), std::invalid_argument);
}

}  // namespace
}  // namespace perch::trainer
