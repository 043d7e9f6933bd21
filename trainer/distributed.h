// Distributed data parallel for perch-train: a process group over libtorch's c10d (a TCPStore
// for the rendezvous, ProcessGroupGloo for the collectives), and the few collectives the trainer
// needs: broadcasting the model from rank 0, all-reducing gradients in buckets, all-reducing a
// small vector of step statistics, a barrier.
//
// Ranks find each other through the TCPStore at `master`: rank 0 serves it, unless the
// launcher (perch-train --nproc) already does (`store_hosted`). Gloo runs on CPU tensors (and on
// CUDA tensors when libtorch was built with CUDA, staging through host memory); NCCL is not used.
//
// Gradients are not reduced during backward: after the last backward of a step the gradients
// are flattened into buckets of about 25 MB (torch DDP's default bucket_cap_mb), every bucket's
// all-reduce is started at once (Gloo works on them in the background, in order) and the
// gradients are unflattened as they complete. Overlapping with backward would need autograd
// hooks on every parameter's grad accumulator (what torch's Reducer does); with micro-batches
// the gradients must be complete before they are reduced, and the post-backward form is
// simple and deterministic.
//
// Thread-safety: one ProcessGroup is used from one thread (the training thread). Every rank
// must call the collectives in the same order with tensors of the same shapes; a rank that
// dies makes the others' collectives fail (an exception) instead of hanging, or time out after
// `timeout_s`.
#ifndef PERCH_TRAINER_DISTRIBUTED_H_
#define PERCH_TRAINER_DISTRIBUTED_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace perch::trainer {

struct DistributedOptions {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;         // rank on this node (selects the GPU)
  std::string master_addr;    // host of the TCPStore
  int master_port = 0;        // its port
  bool store_hosted = false;  // the launcher serves the TCPStore (rank 0 does not)
  double timeout_s = 1800;    // rendezvous and collectives (torch's default: 30 minutes)
};

// Parses "HOST:PORT" (IPv6 as "[addr]:port"); false if malformed.
bool ParseMaster(const std::string& text, std::string* host, int* port);

class ProcessGroup {
 public:
  // Connects to the other ranks; blocks until all have joined. Throws std::runtime_error
  // (with c10d's message) on failure or timeout.
  explicit ProcessGroup(const DistributedOptions& options);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // Overwrites `tensors` on every rank with rank 0's values (bucketed).
  void Broadcast(const std::vector<at::Tensor>& tensors);
  // Replaces every tensor by its sum over the ranks (bucketed, ~25 MB per all-reduce).
  void AllReduceSum(const std::vector<at::Tensor>& tensors);
  // Sums a small vector of doubles over the ranks.
  std::vector<double> AllReduceSum(const std::vector<double>& values);
  void Barrier();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_;
  int world_size_;
};

// Serves a TCPStore on ADDR:0 for the ranks the launcher starts; port() is the one the
// kernel chose. Thread-safety: construct and destroy from one thread.
class StoreServer {
 public:
  explicit StoreServer(const std::string& addr);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_DISTRIBUTED_H_
