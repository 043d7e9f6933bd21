// The image transforms of torchvision's ImageNet recipe, expressed as "which region of the
// original image becomes the output" so that the JPEG decoder can decode only that region:
//   train: RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3)) + RandomHorizontalFlip
//   val:   Resize(size * 256 / 224) + CenterCrop(size)
// followed by ToTensor + Normalize(ImageNet mean/std). The random parameters follow
// torchvision's algorithm exactly (10 attempts, then a central crop clamped to the ratio range);
// the random numbers come from a per-sample Rng so results do not depend on thread timing.
//
// All functions are pure (thread-safe); Rng is a value type, one per sample.
#ifndef PERCH_TRAINER_TRANSFORMS_H_
#define PERCH_TRAINER_TRANSFORMS_H_

#include <cstddef>
#include <cstdint>

#include "trainer/jpeg_decoder.h"

namespace perch::trainer {

inline constexpr float kImageNetMean[3] = {0.485f, 0.456f, 0.406f};
inline constexpr float kImageNetStd[3] = {0.229f, 0.224f, 0.225f};

// SplitMix64: small, fast, and identical on every platform (unlike std:: distributions).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi).
  double Uniform(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(Next() >> 11) * 0x1.0p-53;
  }
  // Uniform integer in [0, n); n > 0.
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  uint64_t state_;
};

// A seed for (seed, a, b) streams, e.g. (run seed, epoch, sample index).
uint64_t MixSeed(uint64_t seed, uint64_t a, uint64_t b);

// torchvision.transforms.RandomResizedCrop.get_params for a width x height image. Returns the
// crop as an integer rectangle (x = left, y = top).
RectF RandomResizedCropRegion(int width, int height, Rng& rng, double scale_lo = 0.08,
                              double scale_hi = 1.0, double ratio_lo = 3.0 / 4.0,
                              double ratio_hi = 4.0 / 3.0);

// Resize(resize_size) (shorter side to resize_size, longer side truncated as torchvision does)
// then CenterCrop(crop_size), expressed as the region of the original image the crop covers.
RectF ResizeCenterCropRegion(int width, int height, int resize_size, int crop_size);

// The resize torchvision's ImageNet recipe pairs with a crop: 256 for 224, scaled.
int ValResizeFor(int crop_size);

// Bilinearly resamples `region` (pixel-edge coordinates of `src`) of an RGB image to
// out_w x out_h, mirrors it horizontally if `flip`, and writes (v / 255 - mean[c]) / std[c]
// as planar float CHW into `dst` (3 * out_w * out_h floats). Source pixels outside the buffer
// are clamped to its edge.
void ResampleNormalize(const DecodedRegion& src, int out_w, int out_h, bool flip, float* dst,
                       const float mean[3] = kImageNetMean, const float stddev[3] = kImageNetStd);

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_TRANSFORMS_H_
