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
  // Separable bilinear: a horizontal pass per source row into planar float rows (cached, since
  // neighbouring output rows share source rows), then a vertical pass per output row that is a
  // plain loop over contiguous floats (vectorized) with the normalization folded in. The flip
  // is folded into the horizontal taps. Output pixel centre o + 0.5 maps to
  // region.x + (o + 0.5) * step in edge coordinates, i.e. that minus 0.5 in centre coordinates.
  thread_local std::vector<int> x0;
  thread_local std::vector<int> x1;
  thread_local std::vector<float> xw;
  thread_local std::vector<float> rows;
  x0.resize(out_w);
  x1.resize(out_w);
  xw.resize(out_w);
  rows.resize(2 * 3 * static_cast<size_t>(out_w));
  const double step_x = src.region.w / out_w;
  const double step_y = src.region.h / out_h;
  const int last_col = src.width - 1;
  for (int o = 0; o < out_w; ++o) {
    double c = src.region.x + (o + 0.5) * step_x - 0.5;
    c = std::clamp(c, 0.0, static_cast<double>(last_col));
    const int i = std::min(static_cast<int>(c), std::max(0, src.width - 2));
    const int at = flip ? out_w - 1 - o : o;
    x0[at] = 3 * i;
    x1[at] = 3 * std::min(i + 1, last_col);
    xw[at] = static_cast<float>(c - i);
  }
  float scale[3];
  float bias[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.0f / (255.0f * stddev[c]);
    bias[c] = -mean[c] / stddev[c];
  }
  // Two cached horizontal rows: which source row each holds.
  int cached[2] = {-1, -1};
  auto horizontal = [&](int y, int slot) {
    if (cached[slot] == y) {
      return;
    }
    cached[slot] = y;
    const uint8_t* row = src.pixels + src.stride * y;
    float* r = rows.data() + static_cast<size_t>(slot) * 3 * out_w;
    float* g = r + out_w;
    float* b = g + out_w;
    for (int o = 0; o < out_w; ++o) {
      const uint8_t* p = row + x0[o];
      const uint8_t* q = row + x1[o];
      const float w = xw[o];
      r[o] = p[0] + w * (q[0] - p[0]);
      g[o] = p[1] + w * (q[1] - p[1]);
      b[o] = p[2] + w * (q[2] - p[2]);
    }
  };
  const size_t plane = static_cast<size_t>(out_w) * out_h;
  for (int oy = 0; oy < out_h; ++oy) {
    double cy = src.region.y + (oy + 0.5) * step_y - 0.5;
    cy = std::clamp(cy, 0.0, static_cast<double>(src.height - 1));
    const int iy = std::min(static_cast<int>(cy), std::max(0, src.height - 2));
    const int iy1 = std::min(iy + 1, src.height - 1);
    const float wy = static_cast<float>(cy - iy);
    // Keep the slots in a fixed parity so that a row stays cached as the window moves down.
    const int s0 = iy & 1;
    horizontal(iy, s0);
    horizontal(iy1, s0 ^ 1);
    if (iy1 == iy) {
      cached[s0 ^ 1] = -1;  // slot reused for the same row; (only at a 1-row image)
    }
    for (int c = 0; c < 3; ++c) {
      const float* top = rows.data() + (static_cast<size_t>(s0) * 3 + c) * out_w;
      const float* bot =
          iy1 == iy ? top : rows.data() + (static_cast<size_t>(s0 ^ 1) * 3 + c) * out_w;
      float* d = dst + c * plane + static_cast<size_t>(oy) * out_w;
      const float sc = scale[c];
      const float bi = bias[c];
      for (int o = 0; o < out_w; ++o) {
        d[o] = (top[o] + wy * (bot[o] - top[o])) * sc + bi;
      }
    }
  }
}

}  // namespace perch::trainer
