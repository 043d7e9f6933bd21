// ResNet-18 and ResNet-50 (He et al. 2015, torchvision's v1.5 variant: stride 2 in the 3x3 conv
// of a bottleneck) built from torch::nn modules registered under torchvision's names, so that
// named_parameters()/named_buffers() read conv1.weight, bn1.running_mean,
// layer1.0.conv1.weight, layer2.0.downsample.0.weight, ..., fc.bias, exactly the keys of
// torchvision.models.resnet18/50().state_dict(). Initialisation follows torchvision
// (Kaiming-normal fan_out for convolutions, BatchNorm weight 1 / bias 0, nn.Linear's default).
//
// A module is used by one thread at a time (torch::nn semantics).
#ifndef PERCH_TRAINER_RESNET_H_
#define PERCH_TRAINER_RESNET_H_

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>

namespace perch::trainer {

class BasicBlockImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(BasicBlock);

class BottleneckImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t in_planes, int64_t planes, int64_t stride);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(Bottleneck);

class ResNetImpl : public torch::nn::Module {
 public:
  // `arch` is "resnet18" or "resnet50"; throws std::invalid_argument otherwise.
  ResNetImpl(const std::string& arch, int64_t num_classes);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  torch::nn::Sequential layer1_{nullptr}, layer2_{nullptr}, layer3_{nullptr}, layer4_{nullptr};
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(ResNet);

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_RESNET_H_
