#include "trainer/resnet.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/init.h>

#include <stdexcept>

namespace perch::trainer {

namespace nn = torch::nn;

namespace {

nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(false));
}

nn::Sequential Downsample(int64_t in, int64_t out, int64_t stride) {
  // Registered as downsample.0 (conv) and downsample.1 (bn), as in torchvision.
  return nn::Sequential(Conv(in, out, 1, stride, 0), nn::BatchNorm2d(out));
}

template <typename Block>
nn::Sequential MakeLayer(int64_t* in_planes, int64_t planes, int64_t blocks, int64_t stride) {
  nn::Sequential layer;
  for (int64_t i = 0; i < blocks; ++i) {
    layer->push_back(Block(*in_planes, planes, i == 0 ? stride : 1));
    *in_planes = planes * Block::ContainedType::kExpansion;
  }
  return layer;
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride) {
  conv1_ = register_module("conv1", Conv(in_planes, planes, 3, stride, 1));
  bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
  conv2_ = register_module("conv2", Conv(planes, planes, 3, 1, 1));
  bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
  if (stride != 1 || in_planes != planes * kExpansion) {
    downsample_ = register_module("downsample", Downsample(in_planes, planes * kExpansion, stride));
  }
}

torch::Tensor BasicBlockImpl::forward(torch::Tensor x) {
  torch::Tensor identity = downsample_ ? downsample_->forward(x) : x;
  torch::Tensor out = torch::relu(bn1_(conv1_(x)));
  out = bn2_(conv2_(out));
  return torch::relu(out + identity);
}

BottleneckImpl::BottleneckImpl(int64_t in_planes, int64_t planes, int64_t stride) {
  conv1_ = register_module("conv1", Conv(in_planes, planes, 1, 1, 0));
  bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
  conv2_ = register_module("conv2", Conv(planes, planes, 3, stride, 1));
  bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
  conv3_ = register_module("conv3", Conv(planes, planes * kExpansion, 1, 1, 0));
  bn3_ = register_module("bn3", nn::BatchNorm2d(planes * kExpansion));
  if (stride != 1 || in_planes != planes * kExpansion) {
    downsample_ = register_module("downsample", Downsample(in_planes, planes * kExpansion, stride));
  }
}

torch::Tensor BottleneckImpl::forward(torch::Tensor x) {
  torch::Tensor identity = downsample_ ? downsample_->forward(x) : x;
  torch::Tensor out = torch::relu(bn1_(conv1_(x)));
  out = torch::relu(bn2_(conv2_(out)));
  out = bn3_(conv3_(out));
  return torch::relu(out + identity);
}

ResNetImpl::ResNetImpl(const std::string& arch, int64_t num_classes) {
  conv1_ = register_module("conv1", Conv(3, 64, 7, 2, 3));
  bn1_ = register_module("bn1", nn::BatchNorm2d(64));
  int64_t in_planes = 64;
  int64_t features = 0;
  if (arch == "resnet18") {
    layer1_ = register_module("layer1", MakeLayer<BasicBlock>(&in_planes, 64, 2, 1));
    layer2_ = register_module("layer2", MakeLayer<BasicBlock>(&in_planes, 128, 2, 2));
    layer3_ = register_module("layer3", MakeLayer<BasicBlock>(&in_planes, 256, 2, 2));
    layer4_ = register_module("layer4", MakeLayer<BasicBlock>(&in_planes, 512, 2, 2));
    features = 512 * BasicBlockImpl::kExpansion;
  } else if (arch == "resnet50") {
    layer1_ = register_module("layer1", MakeLayer<Bottleneck>(&in_planes, 64, 3, 1));
    layer2_ = register_module("layer2", MakeLayer<Bottleneck>(&in_planes, 128, 4, 2));
    layer3_ = register_module("layer3", MakeLayer<Bottleneck>(&in_planes, 256, 6, 2));
    layer4_ = register_module("layer4", MakeLayer<Bottleneck>(&in_planes, 512, 3, 2));
    features = 512 * BottleneckImpl::kExpansion;
  } else {
    throw std::invalid_argument("unknown architecture '" + arch + "' (resnet18 or resnet50)");
  }
  fc_ = register_module("fc", nn::Linear(features, num_classes));

  // torchvision's initialisation; Linear keeps nn.Linear's default (already applied).
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* conv = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, 0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = m->as<nn::BatchNorm2d>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
  }
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  x = torch::relu(bn1_(conv1_(x)));
  x = torch::max_pool2d(x, /*kernel_size=*/3, /*stride=*/2, /*padding=*/1);
  x = layer4_->forward(layer3_->forward(layer2_->forward(layer1_->forward(x))));
  x = torch::adaptive_avg_pool2d(x, {1, 1});
  return fc_(torch::flatten(x, 1));
}

}  // namespace perch::trainer
