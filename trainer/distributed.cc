#include "trainer/distributed.h"

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace perch::trainer {

namespace {

// torch DDP's default bucket_cap_mb.
constexpr int64_t kBucketBytes = 25 << 20;

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// Consecutive runs of same-dtype, same-device tensors of about kBucketBytes each.
std::vector<std::vector<at::Tensor>> Buckets(const std::vector<at::Tensor>& tensors) {
  std::vector<std::vector<at::Tensor>> out;
  int64_t bytes = 0;
  for (const at::Tensor& t : tensors) {
    const int64_t size = t.numel() * static_cast<int64_t>(t.element_size());
    if (out.empty() || bytes + size > kBucketBytes || out.back()[0].dtype() != t.dtype() ||
        out.back()[0].device() != t.device()) {
      out.emplace_back();
      bytes = 0;
    }
    out.back().push_back(t);
    bytes += size;
  }
  return out;
}

at::Tensor Flatten(const std::vector<at::Tensor>& bucket) {
  std::vector<at::Tensor> flat;
  flat.reserve(bucket.size());
  for (const at::Tensor& t : bucket) {
    flat.push_back(t.reshape({-1}));
  }
  return at::cat(flat);
}

void Unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& bucket) {
  int64_t offset = 0;
  for (const at::Tensor& t : bucket) {
    t.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
}

}  // namespace

bool ParseMaster(const std::string& text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size() ||
      text.size() - colon - 1 > 5) {
    return false;
  }
  std::string h = text.substr(0, colon);
  if (h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  }
  int p = 0;
  for (size_t i = colon + 1; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') {
      return false;
    }
    p = p * 10 + (text[i] - '0');
  }
  if (h.empty() || p < 1 || p > 65535) {
    return false;
  }
  *host = h;
  *port = p;
  return true;
}

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
};

ProcessGroup::ProcessGroup(const DistributedOptions& o)
    : impl_(std::make_unique<Impl>()), rank_(o.rank), world_size_(o.world_size) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    throw std::invalid_argument("rank " + std::to_string(o.rank) + " is not in a world of " +
                                std::to_string(o.world_size));
  }
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(o.master_port);
    so.isServer = o.rank == 0 && !o.store_hosted;
    so.numWorkers = o.store_hosted ? c10::nullopt : c10::optional<size_t>(o.world_size);
    so.waitWorkers = false;  // the process group's own rendezvous waits for everyone
    so.timeout = Millis(o.timeout_s);
    impl_->store = c10::make_intrusive<c10d::TCPStore>(o.master_addr, so);
    auto options = c10d::ProcessGroupGloo::Options::create(Millis(o.timeout_s));
    // Gloo's interface: GLOO_SOCKET_IFNAME as in torch; loopback for a one-node rendezvous on
    // loopback; else the address the host name resolves to (torch's default).
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname != nullptr && *ifname != '\0') {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (IsLoopback(o.master_addr)) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    options->threads = 2;
    impl_->pg =
        c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, o.rank, o.world_size, options);
  } catch (const std::exception& e) {
    throw std::runtime_error("joining the process group at " + o.master_addr + ":" +
                             std::to_string(o.master_port) + " as rank " + std::to_string(o.rank) +
                             " of " + std::to_string(o.world_size) + ": " + e.what());
  }
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::Broadcast(const std::vector<at::Tensor>& tensors) {
  std::vector<std::vector<at::Tensor>> buckets = Buckets(tensors);
  for (const auto& bucket : buckets) {
    std::vector<at::Tensor> flat = {Flatten(bucket)};
    c10d::BroadcastOptions bo;
    bo.rootRank = 0;
    impl_->pg->broadcast(flat, bo)->wait();
    Unflatten(flat[0], bucket);
  }
}

void ProcessGroup::AllReduceSum(const std::vector<at::Tensor>& tensors) {
  std::vector<std::vector<at::Tensor>> buckets = Buckets(tensors);
  std::vector<std::vector<at::Tensor>> flats;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  flats.reserve(buckets.size());
  for (const auto& bucket : buckets) {
    flats.push_back({Flatten(bucket)});
    works.push_back(impl_->pg->allreduce(flats.back(), c10d::AllreduceOptions()));
  }
  for (size_t i = 0; i < buckets.size(); ++i) {
    works[i]->wait();
    Unflatten(flats[i][0], buckets[i]);
  }
}

std::vector<double> ProcessGroup::AllReduceSum(const std::vector<double>& values) {
  std::vector<at::Tensor> t = {at::tensor(values, at::TensorOptions().dtype(at::kDouble))};
  impl_->pg->allreduce(t, c10d::AllreduceOptions())->wait();
  const double* p = t[0].data_ptr<double>();
  return std::vector<double>(p, p + values.size());
}

void ProcessGroup::Barrier() { impl_->pg->barrier(c10d::BarrierOptions())->wait(); }

struct StoreServer::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

StoreServer::StoreServer(const std::string& addr) : impl_(std::make_unique<Impl>()) {
  c10d::TCPStoreOptions so;
  so.port = 0;
  so.isServer = true;
  so.waitWorkers = false;
  impl_->store = c10::make_intrusive<c10d::TCPStore>(addr, so);
}

StoreServer::~StoreServer() = default;

int StoreServer::port() const { return impl_->store->getPort(); }

}  // namespace perch::trainer
