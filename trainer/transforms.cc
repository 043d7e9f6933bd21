#include "trainer/transforms.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace perch::trainer {

uint64_t MixSeed(uint64_t seed, uint64_t a, uint64_t b) {
  Rng r(seed ^ 0x6a09e667f3bcc909ULL);
  uint64_t x = r.Next() ^ (a * 0xd1b54a32d192ed03ULL);
  Rng r2(x);
  uint64_t y = r2.Next() ^ (b * 0x9e3779b97f4a7c15ULL);
  return Rng(y).Next();
}

namespace {

// Python's round(): halves to even, which std::nearbyint does in the default rounding mode.
int PyRound(double v) { return static_cast<int>(std::nearbyint(v)); }

}  // namespace

RectF RandomResizedCropRegion(int width, int height, Rng& rng, double scale_lo, double scale_hi,
                              double ratio_lo, double ratio_hi) {
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(ratio_lo);
  const double log_hi = std::log(ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.Uniform(scale_lo, scale_hi);
    const double aspect = std::exp(rng.Uniform(log_lo, log_hi));
    const int w = PyRound(std::sqrt(target_area * aspect));
    const int h = PyRound(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      // torch.randint(0, height - h + 1): top in [0, height - h].
      const int top = static_cast<int>(rng.Below(static_cast<uint64_t>(height - h + 1)));
      const int left = static_cast<int>(rng.Below(static_cast<uint64_t>(width - w + 1)));
      return RectF{static_cast<double>(left), static_cast<double>(top), static_cast<double>(w),
                   static_cast<double>(h)};
    }
  }
  // Fallback to a central crop, clamped to the ratio range.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width;
  int h = height;
  if (in_ratio < ratio_lo) {
    w = width;
    h = PyRound(w / ratio_lo);
  } else if (in_ratio > ratio_hi) {
    h = height;
    w = PyRound(h * ratio_hi);
  }
  const int top = (height - h) / 2;
  const int left = (width - w) / 2;
  return RectF{static_cast<double>(left), static_cast<double>(top), static_cast<double>(w),
               static_cast<double>(h)};
}

int ValResizeFor(int crop_size) { return PyRound(crop_size * 256.0 / 224.0); }

RectF ResizeCenterCropRegion(int width, int height, int resize_size, int crop_size) {
  // torchvision F.resize(img, [size]): the shorter side becomes `size`, the longer
  // int(size * long / short).
  int new_w;
  int new_h;
  if (width <= height) {
    new_w = resize_size;
    new_h = static_cast<int>(static_cast<double>(resize_size) * height / width);
  } else {
    new_h = resize_size;
    new_w = static_cast<int>(static_cast<double>(resize_size) * width / height);
  }
  // F.center_crop: top = int(round((h - crop) / 2.0)). Crops larger than the resized image
  // (never the case for 256 -> 224) are clamped instead of padded.
  const int cw = std::min(crop_size, new_w);
  const int ch = std::min(crop_size, new_h);
  const int top = PyRound((new_h - ch) / 2.0);
  const int left = PyRound((new_w - cw) / 2.0);
  const double sx = static_cast<double>(width) / new_w;
  const double sy = static_cast<double>(height) / new_h;
  return RectF{left * sx, top * sy, cw * sx, ch * sy};
}

void ResampleNormalize(const DecodedRegion& src, int out_w, int out_h, bool flip, float* dst,
                       const float mean[3], const float stddev[3]) {
  // Per-column and per-row taps, computed once per image: output pixel centre (o + 0.5) maps
  // to region.x + (o + 0.5) * step in edge coordinates, i.e. that minus 0.5 in centre
  // coordinates.
  thread_local std::vector<int> xi;
  thread_local std::vector<float> xw;
  xi.resize(out_w);
  xw.resize(out_w);
  const double step_x = src.region.w / out_w;
  const double step_y = src.region.h / out_h;
  for (int o = 0; o < out_w; ++o) {
    double c = src.region.x + (o + 0.5) * step_x - 0.5;
    c = std::clamp(c, 0.0, static_cast<double>(src.width - 1));
    int i = std::min(static_cast<int>(c), std::max(0, src.width - 2));
    xi[o] = i;
    xw[o] = static_cast<float>(c - i);
  }
  float scale[3];
  float bias[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.0f / (255.0f * stddev[c]);
    bias[c] = -mean[c] / stddev[c];
  }
  const size_t plane = static_cast<size_t>(out_w) * out_h;
  const int last_col = src.width - 1;
  for (int oy = 0; oy < out_h; ++oy) {
    double cy = src.region.y + (oy + 0.5) * step_y - 0.5;
    cy = std::clamp(cy, 0.0, static_cast<double>(src.height - 1));
    int iy = std::min(static_cast<int>(cy), std::max(0, src.height - 2));
    const float wy = static_cast<float>(cy - iy);
    const uint8_t* r0 = src.pixels + src.stride * iy;
    const uint8_t* r1 = src.pixels + src.stride * std::min(iy + 1, src.height - 1);
    float* d0 = dst + static_cast<size_t>(oy) * out_w;
    float* d1 = d0 + plane;
    float* d2 = d1 + plane;
    for (int ox = 0; ox < out_w; ++ox) {
      const int x = xi[ox];
      const int xn = std::min(x + 1, last_col);
      const float wx = xw[ox];
      const uint8_t* a = r0 + 3 * x;
      const uint8_t* b = r0 + 3 * xn;
      const uint8_t* c = r1 + 3 * x;
      const uint8_t* d = r1 + 3 * xn;
      const int o = flip ? out_w - 1 - ox : ox;
      float v[3];
      for (int ch = 0; ch < 3; ++ch) {
        const float top = a[ch] + wx * (b[ch] - a[ch]);
        const float bot = c[ch] + wx * (d[ch] - c[ch]);
        v[ch] = top + wy * (bot - top);
      }
      d0[o] = v[0] * scale[0] + bias[0];
      d1[o] = v[1] * scale[1] + bias[1];
      d2[o] = v[2] * scale[2] + bias[2];
    }
  }
}

}  // namespace perch::trainer
