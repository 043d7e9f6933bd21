// Samplers: the order in which a loader reads a dataset's samples in each epoch.
//
// A Sampler maps an epoch number to a list of dataset indices; the Loader reads them in that
// order and batches consecutive positions. Keeping the order outside the loader lets another
// source (e.g. a reader of tar shards) plug in its own.
//
// DistributedSampler is torch.utils.data.DistributedSampler(shuffle=True, drop_last=False),
// element for element: g = torch.Generator(); g.manual_seed(seed + epoch);
// order = torch.randperm(n, generator=g); the order is padded to a multiple of the number of
// replicas by repeating it from the start; replica r takes order[r::replicas]. The C++ and the
// Python randperm are the same libtorch code (CPUGeneratorImpl, mt19937), so the same seed
// gives the same permutation; trainer/tests/sampler_test.cc checks this against Python.
//
// Thread-safety: all methods are const and may be called from any thread.
#ifndef PERCH_TRAINER_SAMPLER_H_
#define PERCH_TRAINER_SAMPLER_H_

#include <cstdint>
#include <vector>

namespace perch::trainer {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The dataset indices read in `epoch`, in order; always EpochLength() of them.
  virtual std::vector<int64_t> EpochOrder(int64_t epoch) const = 0;
  virtual int64_t EpochLength() const = 0;
};

// 0, 1, ..., size - 1 in every epoch (validation).
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t size) : size_(size) {}
  std::vector<int64_t> EpochOrder(int64_t epoch) const override;
  int64_t EpochLength() const override { return size_; }

 private:
  int64_t size_;
};

// Replica `rank` of `replicas` reads rank, rank + replicas, ... in dataset order, without
// padding: every sample is read by exactly one replica (for evaluation split between ranks).
class StridedSampler : public Sampler {
 public:
  StridedSampler(int64_t size, int replicas, int rank)
      : size_(size), replicas_(replicas), rank_(rank) {}
  std::vector<int64_t> EpochOrder(int64_t epoch) const override;
  int64_t EpochLength() const override {
    return rank_ < size_ ? (size_ - rank_ + replicas_ - 1) / replicas_ : 0;
  }

 private:
  int64_t size_;
  int replicas_;
  int rank_;
};

// torch's DistributedSampler split of a dataset of `size` samples between `replicas`.
//
// This sampler serves `count` consecutive replicas [first, first + count) to one loader whose
// batches hold `count` x `batch` samples: step k's batch is replica first's k-th batch of
// `batch` samples, then replica first + 1's, and so on (the last step's pieces are equally
// short, as every replica has the same number of samples). With count 1 the order is simply
// replica first's share. With count > 1 one process computes what `count` ranks would
// (micro-batches, trainer.h).
class DistributedSampler : public Sampler {
 public:
  // Throws std::invalid_argument unless size >= 1, replicas >= 1, 0 <= first,
  // count >= 1, first + count <= replicas, batch >= 1.
  DistributedSampler(int64_t size, uint64_t seed, int replicas, int first, int count,
                     int64_t batch);

  std::vector<int64_t> EpochOrder(int64_t epoch) const override;
  int64_t EpochLength() const override { return PerReplica() * count_; }

  // ceil(size / replicas): the samples each replica reads per epoch.
  int64_t PerReplica() const { return (size_ + replicas_ - 1) / replicas_; }
  // Replica `replica`'s share of `epoch`, exactly as DistributedSampler's __iter__ yields it.
  std::vector<int64_t> ReplicaOrder(int64_t epoch, int replica) const;

 private:
  int64_t size_;
  uint64_t seed_;
  int replicas_;
  int first_;
  int count_;
  int64_t batch_;
};

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_SAMPLER_H_
