// Sgd: stochastic gradient descent with momentum and weight decay, computing exactly what
// torch.optim.SGD(momentum=m, dampening=0, nesterov=False) does, with the momentum buffers
// keyed by parameter name so that a checkpoint can store and restore them by name (libtorch's
// own optimizers key their state by tensor address).
//
// Not thread-safe; call from the training thread.
#ifndef PERCH_TRAINER_SGD_H_
#define PERCH_TRAINER_SGD_H_

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace perch::trainer {

class Sgd {
 public:
  struct Param {
    std::string name;
    at::Tensor tensor;
    bool decay = true;  // apply weight decay
  };

  // When `decay_norm_and_bias` is false, 1-D parameters (BatchNorm weights and biases, fc.bias)
  // get no weight decay, as torchvision's reference recipe allows with --norm-weight-decay 0.
  Sgd(std::vector<std::pair<std::string, at::Tensor>> params, double momentum, double weight_decay,
      bool decay_norm_and_bias);

  // p <- p - lr * buf,  buf <- momentum * buf + (grad + wd * p)  (buf = grad + wd * p at first).
  // Parameters without a gradient are left alone.
  void Step(double lr);
  void ZeroGrad();

  // Momentum buffers by parameter name (only those that exist yet).
  std::map<std::string, at::Tensor> State() const;
  // Restores buffers saved by State(); throws std::runtime_error on an unknown name or a
  // shape mismatch.
  void LoadState(const std::map<std::string, at::Tensor>& state);

 private:
  std::vector<Param> params_;
  std::vector<at::Tensor> buffers_;  // parallel to params_; undefined until the first step
  double momentum_;
  double weight_decay_;
};

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_SGD_H_
