#include "trainer/sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace perch::trainer {

std::vector<int64_t> SequentialSampler::EpochOrder(int64_t /*epoch*/) const {
  std::vector<int64_t> order(static_cast<size_t>(size_));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

std::vector<int64_t> StridedSampler::EpochOrder(int64_t /*epoch*/) const {
  std::vector<int64_t> order;
  for (int64_t i = rank_; i < size_; i += replicas_) {
    order.push_back(i);
  }
  return order;
}

DistributedSampler::DistributedSampler(int64_t size, uint64_t seed, int replicas, int first,
                                       int count, int64_t batch)
    : size_(size), seed_(seed), replicas_(replicas), first_(first), count_(count), batch_(batch) {
  if (size < 1 || replicas < 1 || first < 0 || count < 1 || first + count > replicas || batch < 1) {
    throw std::invalid_argument("DistributedSampler: bad size, replicas, ranks or batch size");
  }
}

std::vector<int64_t> DistributedSampler::ReplicaOrder(int64_t epoch, int replica) const {
  // g = torch.Generator(); g.manual_seed(self.seed + self.epoch)
  at::Generator gen = at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch));
  at::Tensor perm = at::randperm(size_, gen, at::TensorOptions().dtype(at::kLong));
  const int64_t* p = perm.data_ptr<int64_t>();
  // indices += indices[:padding] (repeated as often as needed), then indices[rank::replicas].
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(PerReplica()));
  const int64_t total = PerReplica() * replicas_;
  for (int64_t i = replica; i < total; i += replicas_) {
    out.push_back(p[i % size_]);
  }
  return out;
}

std::vector<int64_t> DistributedSampler::EpochOrder(int64_t epoch) const {
  if (count_ == 1) {
    return ReplicaOrder(epoch, first_);
  }
  std::vector<std::vector<int64_t>> shares;
  for (int r = first_; r < first_ + count_; ++r) {
    shares.push_back(ReplicaOrder(epoch, r));
  }
  const int64_t n = PerReplica();
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(n * count_));
  for (int64_t start = 0; start < n; start += batch_) {
    const int64_t end = std::min(n, start + batch_);
    for (const auto& share : shares) {
      out.insert(out.end(), share.begin() + start, share.begin() + end);
    }
  }
  return out;
}

}  // namespace perch::trainer
