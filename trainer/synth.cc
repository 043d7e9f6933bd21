#include "trainer/synth.h"

#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "trainer/transforms.h"

namespace perch::trainer {

namespace fs = std::filesystem;

namespace {

// Uniform integer in [lo, hi] from the trainer's SplitMix64 (transforms.h).
int UniformInt(Rng& r, int lo, int hi) {
  return lo + static_cast<int>(r.Below(static_cast<uint64_t>(hi - lo + 1)));
}

// HSV (all in [0, 1]) to RGB in [0, 255].
void HsvToRgb(double h, double s, double v, double rgb[3]) {
  h = h - std::floor(h);
  const double i = std::floor(h * 6);
  const double f = h * 6 - i;
  const double p = v * (1 - s), q = v * (1 - f * s), t = v * (1 - (1 - f) * s);
  double r, g, b;
  switch (static_cast<int>(i) % 6) {
    case 0:
      r = v, g = t, b = p;
      break;
    case 1:
      r = q, g = v, b = p;
      break;
    case 2:
      r = p, g = v, b = t;
      break;
    case 3:
      r = p, g = q, b = v;
      break;
    case 4:
      r = t, g = p, b = v;
      break;
    default:
      r = v, g = p, b = q;
      break;
  }
  rgb[0] = 255 * r;
  rgb[1] = 255 * g;
  rgb[2] = 255 * b;
}

uint8_t Clamp8(double v) { return static_cast<uint8_t>(std::clamp(v, 0.0, 255.0)); }

}  // namespace

std::string SynsetName(int label) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "n%08d", label);
  return buf;
}

void RenderImage(int label, int classes, uint64_t seed, int width, int height,
                 std::vector<uint8_t>* rgb) {
  Rng rng(seed);
  rgb->resize(static_cast<size_t>(width) * height * 3);
  // Class features. The golden-ratio hue walk spreads neighbouring labels around the wheel.
  const double hue = std::fmod(label * 0.6180339887, 1.0);
  const int shape = label % 4;  // 0 disc, 1 box, 2 ring, 3 diamond
  const double angle = M_PI * std::fmod(label * 0.3819660113 + 0.1, 1.0);
  const double freq = 6 + (label * 7 % std::max(classes, 5)) % 10;  // stripes across the object
  // Image-specific variation.
  const double bg_hue = rng.Uniform(0, 1);
  double fg[3], bg0[3], bg1[3];
  HsvToRgb(hue + rng.Uniform(-0.03, 0.03), rng.Uniform(0.6, 1.0), rng.Uniform(0.6, 1.0), fg);
  HsvToRgb(bg_hue, rng.Uniform(0.1, 0.5), rng.Uniform(0.3, 0.9), bg0);
  HsvToRgb(bg_hue + 0.2, rng.Uniform(0.1, 0.5), rng.Uniform(0.3, 0.9), bg1);
  const double radius = std::min(width, height) * rng.Uniform(0.2, 0.45);
  const double cx = rng.Uniform(radius, width - radius);
  const double cy = rng.Uniform(radius, height - radius);
  const double ca = std::cos(angle), sa = std::sin(angle);
  const double noise = 68;  // amplitude that gives ~110 KB at q90 for ~500x400
  uint64_t n = rng.Next();
  for (int y = 0; y < height; ++y) {
    const double ty = static_cast<double>(y) / height;
    uint8_t* row = rgb->data() + static_cast<size_t>(y) * width * 3;
    for (int x = 0; x < width; ++x) {
      const double tx = static_cast<double>(x) / width;
      const double g = 0.5 * (tx + ty);
      double px[3];
      for (int c = 0; c < 3; ++c) {
        px[c] = bg0[c] * (1 - g) + bg1[c] * g;
      }
      const double dx = (x - cx) / radius, dy = (y - cy) / radius;
      bool inside = false;
      switch (shape) {
        case 0:
          inside = dx * dx + dy * dy <= 1;
          break;
        case 1:
          inside = std::abs(dx) <= 0.85 && std::abs(dy) <= 0.85;
          break;
        case 2: {
          const double r2 = dx * dx + dy * dy;
          inside = r2 <= 1 && r2 >= 0.36;
          break;
        }
        default:
          inside = std::abs(dx) + std::abs(dy) <= 1;
          break;
      }
      if (inside) {
        const double u = dx * ca + dy * sa;
        const double stripe = 0.75 + 0.25 * std::sin(M_PI * freq * u);
        for (int c = 0; c < 3; ++c) {
          px[c] = fg[c] * stripe;
        }
      }
      // xorshift noise: cheap, and strong enough that the files are photo-sized.
      n ^= n << 13;
      n ^= n >> 7;
      n ^= n << 17;
      const double lum = (static_cast<double>(n & 0xff) / 255.0 - 0.5) * noise;
      for (int c = 0; c < 3; ++c) {
        const double chroma =
            (static_cast<double>((n >> (8 + 8 * c)) & 0xff) / 255.0 - 0.5) * noise * 0.4;
        row[3 * x + c] = Clamp8(px[c] + lum + chroma);
      }
    }
  }
}

bool EncodeJpeg(const std::vector<uint8_t>& rgb, int width, int height, int quality,
                std::vector<uint8_t>* jpeg) {
  tjhandle h = tjInitCompress();
  if (h == nullptr) {
    return false;
  }
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int rc =
      tjCompress2(h, rgb.data(), width, 0, height, TJPF_RGB, &out, &size, TJSAMP_420, quality, 0);
  if (rc == 0) {
    jpeg->assign(out, out + size);
  }
  tjFree(out);
  tjDestroy(h);
  return rc == 0;
}

SynthResult SynthesizeTree(const SynthOptions& o) {
  if (o.classes < 1 || o.per_class < 1 || o.val_per_class < 0 || o.min_side < 8 ||
      o.max_side < o.min_side) {
    throw std::invalid_argument("synth: classes and per-class must be >= 1");
  }
  struct Job {
    std::string path;
    int label;
    uint64_t seed;
  };
  std::vector<Job> jobs;
  for (const auto& [split, count] : {std::pair<std::string, int>{"train", o.per_class},
                                     std::pair<std::string, int>{"val", o.val_per_class}}) {
    for (int c = 0; c < o.classes && count > 0; ++c) {
      const fs::path dir = fs::path(o.out) / split / SynsetName(c);
      fs::create_directories(dir);
      for (int i = 0; i < count; ++i) {
        Rng s(o.seed * 0x100000001b3ULL + (split == "val" ? 0x5bd1e995ULL : 0));
        uint64_t seed = s.Next() ^ (static_cast<uint64_t>(c) << 32) ^ static_cast<uint64_t>(i);
        jobs.push_back(Job{(dir / (SynsetName(c) + "_" + std::to_string(i) + ".JPEG")).string(), c,
                           Rng(seed).Next()});
      }
    }
  }
  std::atomic<size_t> next{0};
  std::atomic<int64_t> bytes{0};
  std::atomic<bool> failed{false};
  std::string error;
  std::mutex error_mu;
  auto work = [&] {
    std::vector<uint8_t> rgb, jpeg;
    for (size_t j; (j = next.fetch_add(1)) < jobs.size() && !failed;) {
      Rng r(jobs[j].seed);
      // ImageNet's typical shapes: the long side 400-600 px, the short side 2/3-7/8 of it
      // (500x375 and 500x333 are the most common), landscape three times as often as portrait.
      const int long_side =
          UniformInt(r, o.max_side >= o.min_side ? o.min_side : o.max_side, o.max_side);
      const int short_side = std::max(8, static_cast<int>(long_side * r.Uniform(0.66, 0.875)));
      const bool portrait = r.Uniform(0, 1) < 0.25;
      const int w = portrait ? short_side : long_side;
      const int h = portrait ? long_side : short_side;
      RenderImage(jobs[j].label, o.classes, r.Next(), w, h, &rgb);
      bool ok = EncodeJpeg(rgb, w, h, o.quality, &jpeg);
      if (ok) {
        std::ofstream f(jobs[j].path, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(jpeg.data()),
                static_cast<std::streamsize>(jpeg.size()));
        ok = static_cast<bool>(f);
      }
      if (!ok) {
        std::lock_guard<std::mutex> lock(error_mu);
        error = "cannot encode or write " + jobs[j].path;
        failed = true;
      }
      bytes += static_cast<int64_t>(jpeg.size());
    }
  };
  const int threads = o.threads > 0
                          ? o.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back(work);
  }
  for (auto& t : pool) {
    t.join();
  }
  if (failed) {
    throw std::runtime_error(error);
  }
  return SynthResult{static_cast<int64_t>(jobs.size()), bytes.load()};
}

}  // namespace perch::trainer
