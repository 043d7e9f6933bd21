#include "trainer/sgd.h"

#include <ATen/core/grad_mode.h>

#include <stdexcept>

namespace perch::trainer {

Sgd::Sgd(std::vector<std::pair<std::string, at::Tensor>> params, double momentum,
         double weight_decay, bool decay_norm_and_bias)
    : momentum_(momentum), weight_decay_(weight_decay) {
  for (auto& [name, tensor] : params) {
    const bool decay = decay_norm_and_bias || tensor.dim() > 1;
    params_.push_back(Param{name, tensor, decay});
  }
  buffers_.resize(params_.size());
}

void Sgd::Step(double lr) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i].tensor;
    const at::Tensor& grad = p.grad();
    if (!grad.defined()) {
      continue;
    }
    at::Tensor d_p = grad;
    if (weight_decay_ != 0 && params_[i].decay) {
      d_p = d_p.add(p, weight_decay_);
    }
    if (momentum_ != 0) {
      if (!buffers_[i].defined()) {
        buffers_[i] = d_p.clone().detach();
      } else {
        buffers_[i].mul_(momentum_).add_(d_p);
      }
      d_p = buffers_[i];
    }
    p.add_(d_p, -lr);
  }
}

void Sgd::ZeroGrad() {
  for (Param& p : params_) {
    if (p.tensor.grad().defined()) {
      // set_to_none, PyTorch 2's default: the next backward allocates fresh gradients.
      p.tensor.mutable_grad() = at::Tensor();
    }
  }
}

std::map<std::string, at::Tensor> Sgd::State() const {
  std::map<std::string, at::Tensor> state;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (buffers_[i].defined()) {
      state[params_[i].name] = buffers_[i];
    }
  }
  return state;
}

void Sgd::LoadState(const std::map<std::string, at::Tensor>& state) {
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < params_.size(); ++i) {
    by_name[params_[i].name] = i;
  }
  for (const auto& [name, tensor] : state) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      throw std::runtime_error("optimizer state for unknown parameter " + name);
    }
    const at::Tensor& p = params_[it->second].tensor;
    if (tensor.sizes() != p.sizes()) {
      throw std::runtime_error("optimizer state shape mismatch for " + name);
    }
    buffers_[it->second] =
        tensor.to(p.device(), p.scalar_type()).contiguous(p.suggest_memory_format());
  }
}

}  // namespace perch::trainer
