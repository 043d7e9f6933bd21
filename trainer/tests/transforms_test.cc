// Transforms: torchvision's crop parameters, the decode-region path, and what comes out of the
// loader (shapes, ranges, normalization), checked against torchvision itself where it matters.
#include "trainer/transforms.h"

#include <gtest/gtest.h>
#include <torch/serialize.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "trainer/image_folder.h"
#include "trainer/jpeg_decoder.h"
#include "trainer/loader.h"
#include "trainer/tests/test_util.h"

namespace perch::trainer {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

TEST(RandomResizedCropTest, StaysInsideAndWithinScaleAndRatio) {
  Rng rng(7);
  int fallbacks = 0;
  for (int i = 0; i < 20000; ++i) {
    const int w = 50 + static_cast<int>(rng.Below(600));
    const int h = 50 + static_cast<int>(rng.Below(600));
    const RectF r = RandomResizedCropRegion(w, h, rng);
    ASSERT_GE(r.x, 0);
    ASSERT_GE(r.y, 0);
    ASSERT_LE(r.x + r.w, w);
    ASSERT_LE(r.y + r.h, h);
    ASSERT_EQ(r.x, std::floor(r.x));  // integer crops, as torchvision's
    const double area = r.w * r.h / (static_cast<double>(w) * h);
    const double ratio = r.w / r.h;
    if (r.w == w && r.h == h) {
      ++fallbacks;
      continue;
    }
    // Rounding to whole pixels moves both a little beyond the nominal ranges.
    EXPECT_GE(area, 0.08 * 0.9) << w << "x" << h;
    EXPECT_LE(area, 1.0);
    EXPECT_GE(ratio, 0.75 * 0.9);
    EXPECT_LE(ratio, 4.0 / 3.0 * 1.1);
  }
  EXPECT_LT(fallbacks, 2000);
}

TEST(RandomResizedCropTest, FallbackIsCentralCropClampedToRatio) {
  Rng rng(1);
  // A 1000x10 strip: no 3/4..4/3 crop of >= 8 % of the area fits, so all 10 attempts fail.
  const RectF r = RandomResizedCropRegion(1000, 10, rng);
  EXPECT_EQ(r.h, 10);
  EXPECT_EQ(r.w, 13);  // round(10 * 4/3)
  EXPECT_EQ(r.x, (1000 - 13) / 2);
  EXPECT_EQ(r.y, 0);
}

TEST(CenterCropTest, MatchesTorchvisionResizeThenCenterCrop) {
  // 500x375: Resize(256) -> 341x256; CenterCrop(224): top round(16) = 16, left round(58.5) = 58.
  RectF r = ResizeCenterCropRegion(500, 375, 256, 224);
  EXPECT_NEAR(r.x, 58 * 500.0 / 341, 1e-9);
  EXPECT_NEAR(r.y, 16 * 375.0 / 256, 1e-9);
  EXPECT_NEAR(r.w, 224 * 500.0 / 341, 1e-9);
  EXPECT_NEAR(r.h, 224 * 375.0 / 256, 1e-9);
  EXPECT_EQ(ValResizeFor(224), 256);
  EXPECT_EQ(ValResizeFor(32), 37);
}

TEST(ResampleTest, IdentityFlipAndNormalization) {
  // A 4x2 image whose red channel encodes the column.
  std::vector<uint8_t> px(4 * 2 * 3);
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 4; ++x) {
      px[(y * 4 + x) * 3 + 0] = static_cast<uint8_t>(50 * x);
      px[(y * 4 + x) * 3 + 1] = 255;
      px[(y * 4 + x) * 3 + 2] = 0;
    }
  }
  DecodedRegion src{px.data(), 12, 4, 2, RectF{0, 0, 4, 2}};
  std::vector<float> out(3 * 4 * 2);
  ResampleNormalize(src, 4, 2, false, out.data());
  for (int x = 0; x < 4; ++x) {
    EXPECT_NEAR(out[x], (50 * x / 255.0 - 0.485) / 0.229, 1e-5);
    EXPECT_NEAR(out[8 + x], (1 - 0.456) / 0.224, 1e-5);
    EXPECT_NEAR(out[16 + x], (0 - 0.406) / 0.225, 1e-5);
  }
  ResampleNormalize(src, 4, 2, true, out.data());
  for (int x = 0; x < 4; ++x) {
    EXPECT_NEAR(out[x], (50 * (3 - x) / 255.0 - 0.485) / 0.229, 1e-5);
  }
}

// A smooth (noise-free) test picture, so that resampling differences stay small.
std::vector<uint8_t> SmoothImage(int w, int h) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &rgb[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(255.0 * x / w);
      p[1] = static_cast<uint8_t>(255.0 * y / h);
      p[2] = static_cast<uint8_t>(127 + 100 * std::sin(x / 40.0) * std::cos(y / 55.0));
    }
  }
  return rgb;
}

TEST(JpegDecoderTest, RoiAndDctScaledDecodeAgreeWithFullDecode) {
  const int w = 517, h = 389;
  std::vector<uint8_t> jpeg;
  ASSERT_TRUE(EncodeJpeg(SmoothImage(w, h), w, h, 95, &jpeg));
  JpegDecoder roi;
  JpegDecoder full;
  full.set_allow_dct_scaling(false);
  for (const RectF r : {RectF{0, 0, 517, 389}, RectF{100, 50, 300, 300}, RectF{301, 211, 90, 70},
                        RectF{17.5, 3.25, 480.5, 380}}) {
    for (int out : {32, 64, 112}) {
      std::vector<float> a(3 * out * out), b(3 * out * out);
      DecodedRegion da, db;
      std::string err;
      ASSERT_TRUE(roi.Decode(
          jpeg.data(), jpeg.size(), out, out, [&](int, int) { return r; }, &da, &err))
          << err;
      ResampleNormalize(da, out, out, false, a.data());
      // Full decode of the whole image, same region.
      ASSERT_TRUE(full.Decode(
          jpeg.data(), jpeg.size(), 100000, 100000,
          [&](int, int) {
            return RectF{0, 0, 517, 389};
          },
          &db, &err));
      db.region = r;
      ResampleNormalize(db, out, out, false, b.data());
      double diff = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        diff += std::abs(a[i] - b[i]);
      }
      // DCT scaling averages pixels (mild antialiasing), so allow a little; ROI alone is exact.
      EXPECT_LT(diff / a.size(), 0.03)
          << r.x << "," << r.y << " " << r.w << "x" << r.h << " -> " << out;
    }
  }
}

TEST(JpegDecoderTest, RejectsGarbageAndTruncation) {
  std::vector<uint8_t> jpeg;
  ASSERT_TRUE(EncodeJpeg(SmoothImage(200, 150), 200, 150, 90, &jpeg));
  JpegDecoder d;
  DecodedRegion out;
  std::string err;
  auto whole = [](int w, int h) { return RectF{0, 0, double(w), double(h)}; };
  std::vector<uint8_t> garbage(1000, 0x42);
  EXPECT_FALSE(d.Decode(garbage.data(), garbage.size(), 32, 32, whole, &out, &err));
  EXPECT_FALSE(err.empty());
  EXPECT_FALSE(d.Decode(jpeg.data(), jpeg.size() / 2, 32, 32, whole, &out, &err));
  EXPECT_FALSE(d.Decode(jpeg.data(), 0, 32, 32, whole, &out, &err));
  // The decoder is still usable afterwards.
  EXPECT_TRUE(d.Decode(jpeg.data(), jpeg.size(), 32, 32, whole, &out, &err)) << err;
  EXPECT_EQ(out.height, 38);  // 150 rows at 1/4 DCT scale (38 >= 32), rounded up
}

TEST(LoaderTransformTest, ShapesRangesAndNormalization) {
  TempDir dir("tf");
  testing::MakeSmallTree(dir.path(), 3, 5, 0);
  ImageFolder data((dir.path() / "train").string());
  for (bool train : {true, false}) {
    LoaderOptions o;
    o.batch_size = 4;
    o.workers = 2;
    o.image_size = 40;
    o.train = train;
    Loader loader(data, o);
    loader.StartEpoch(0, 0);
    Batch b;
    int64_t seen = 0;
    while (loader.Next(&b)) {
      ASSERT_EQ(b.images.dim(), 4);
      EXPECT_EQ(b.images.size(1), 3);
      EXPECT_EQ(b.images.size(2), 40);
      EXPECT_EQ(b.images.size(3), 40);
      EXPECT_EQ(b.images.scalar_type(), at::kFloat);
      EXPECT_EQ(b.labels.scalar_type(), at::kLong);
      EXPECT_EQ(b.labels.size(0), b.images.size(0));
      for (int c = 0; c < 3; ++c) {
        at::Tensor ch = b.images.select(1, c);
        EXPECT_GE(ch.min().item<float>(), -kImageNetMean[c] / kImageNetStd[c] - 1e-4);
        EXPECT_LE(ch.max().item<float>(), (1 - kImageNetMean[c]) / kImageNetStd[c] + 1e-4);
      }
      seen += b.size;
    }
    EXPECT_EQ(seen, 15);
  }
}

TEST(LoaderTransformTest, ValTransformMatchesTorchvision) {
  if (!testing::PythonHasTorchvision()) {
    GTEST_SKIP() << "no torchvision for " << testing::kPython;
  }
  TempDir dir("tf-tv");
  const int w = 480, h = 360;
  std::vector<uint8_t> jpeg;
  ASSERT_TRUE(EncodeJpeg(SmoothImage(w, h), w, h, 95, &jpeg));
  testing::WriteFile(dir.path() / "t" / "c" / "img.jpg", std::string(jpeg.begin(), jpeg.end()));
  ImageFolder data((dir.path() / "t").string());
  LoaderOptions o;
  o.batch_size = 1;
  o.workers = 1;
  o.image_size = 224;
  o.train = false;
  Loader loader(data, o);
  loader.StartEpoch(0, 0);
  Batch b;
  ASSERT_TRUE(loader.Next(&b));
  const fs::path theirs = dir.path() / "theirs.pt";
  std::string out;
  const std::string cmd =
      std::string(testing::kPython) +
      " -c 'import sys, torch; from PIL import Image; import torchvision.transforms as T; "
      "t = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), "
      "T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]); "
      "x = t(Image.open(sys.argv[1]).convert(\"RGB\")); torch.save(x.contiguous(), sys.argv[2])' "
      "'" +
      (dir.path() / "t" / "c" / "img.jpg").string() + "' '" + theirs.string() + "'";
  ASSERT_EQ(testing::RunCommand(cmd, &out), 0) << out;
  const std::string bytes = testing::ReadFile(theirs);
  at::Tensor ref = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toTensor();
  ASSERT_EQ(ref.sizes(), b.images[0].sizes());
  const double mean_abs = (ref - b.images[0]).abs().mean().item<double>();
  const double max_abs = (ref - b.images[0]).abs().max().item<double>();
  // Pillow's bilinear resize is antialiased and rounds to uint8 before ToTensor; ours is plain
  // bilinear in float. On a smooth picture the two agree to within a grey level or two.
  EXPECT_LT(mean_abs, 0.02) << "max " << max_abs;
  EXPECT_LT(max_abs, 0.25);
}

TEST(JpegDecoderTest, GrayscaleAndCmykBecomeRgbAsInPillow) {
  if (!testing::PythonHasTorchvision()) {
    GTEST_SKIP() << "no Pillow/torch for " << testing::kPython;
  }
  TempDir dir("cmyk");
  // Pillow writes the JPEGs (CMYK ones with an Adobe marker, inverted, as Photoshop does) and
  // what convert("RGB") makes of them.
  std::string out;
  const std::string cmd =
      std::string(testing::kPython) +
      " -c 'import sys, numpy as np, torch; from PIL import Image; d = sys.argv[1]; "
      "y, x = np.mgrid[0:64, 0:80]; "
      "c = np.stack([x * 3, y * 4, (x + y) * 2 % 256, 40 + (x % 7) * 10], -1).astype(np.uint8); "
      "Image.fromarray(c, mode=\"CMYK\").save(d + \"/cmyk.jpg\", quality=95); "
      "Image.fromarray(((x * 3 + y) % 251).astype(np.uint8), mode=\"L\").save(d + \"/gray.jpg\", "
      "quality=95); "
      "[torch.save(torch.from_numpy(np.asarray(Image.open(d + "
      "f\"/{n}.jpg\").convert(\"RGB\")).copy()), "
      "d + f\"/{n}.pt\") for n in (\"cmyk\", \"gray\")]' '" +
      dir.str() + "'";
  ASSERT_EQ(testing::RunCommand(cmd + " 2>&1", &out), 0) << out;
  JpegDecoder d;
  d.set_allow_dct_scaling(false);
  for (const char* name : {"cmyk", "gray"}) {
    const std::string jpeg = testing::ReadFile(dir.path() / (std::string(name) + ".jpg"));
    const std::string ref_bytes = testing::ReadFile(dir.path() / (std::string(name) + ".pt"));
    at::Tensor ref =
        torch::pickle_load(std::vector<char>(ref_bytes.begin(), ref_bytes.end())).toTensor();
    DecodedRegion dec;
    std::string err;
    ASSERT_TRUE(d.Decode(
        reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), 80, 64,
        [](int w, int h) {
          return RectF{0, 0, double(w), double(h)};
        },
        &dec, &err))
        << name << ": " << err;
    ASSERT_EQ(dec.width, 80);
    ASSERT_EQ(dec.height, 64);
    double diff = 0;
    int64_t worst = 0;
    auto r = ref.accessor<uint8_t, 3>();
    for (int y = 0; y < 64; ++y) {
      for (int x = 0; x < 80; ++x) {
        for (int c = 0; c < 3; ++c) {
          const int64_t e = std::abs(int64_t{dec.pixels[y * dec.stride + 3 * x + c]} - r[y][x][c]);
          diff += static_cast<double>(e);
          worst = std::max(worst, e);
        }
      }
    }
    // Same libjpeg(-turbo) IDCT as Pillow; only the CMYK->RGB rounding may differ by one.
    EXPECT_LT(diff / (64 * 80 * 3), 0.5) << name;
    EXPECT_LE(worst, 2) << name;
  }
}

TEST(JpegDecoderTest, RegionOfBaselineAndProgressiveJpegsMatchesPillow) {
  if (!testing::PythonHasTorchvision()) {
    GTEST_SKIP() << "no Pillow/torch for " << testing::kPython;
  }
  TempDir dir("roi-pil");
  std::string out;
  const std::string cmd =
      std::string(testing::kPython) +
      " -c 'import sys, numpy as np, torch; from PIL import Image; d = sys.argv[1]; "
      "y, x = np.mgrid[0:301, 0:403]; "
      "a = np.stack([x * 255 // 403, y * 255 // 301, (127 + 100 * np.sin(x / 9.0) * np.cos(y / "
      "13.0))], "
      "-1).astype(np.uint8); im = Image.fromarray(a); "
      "im.save(d + \"/base.jpg\", quality=92); im.save(d + \"/prog.jpg\", quality=92, "
      "progressive=True); "
      "[torch.save(torch.from_numpy(np.asarray(Image.open(d + "
      "f\"/{n}.jpg\").convert(\"RGB\")).copy()), "
      "d + f\"/{n}.pt\") for n in (\"base\", \"prog\")]' '" +
      dir.str() + "'";
  ASSERT_EQ(testing::RunCommand(cmd + " 2>&1", &out), 0) << out;
  JpegDecoder d;
  for (const char* name : {"base", "prog"}) {
    const std::string jpeg = testing::ReadFile(dir.path() / (std::string(name) + ".jpg"));
    const std::string ref_bytes = testing::ReadFile(dir.path() / (std::string(name) + ".pt"));
    at::Tensor ref =
        torch::pickle_load(std::vector<char>(ref_bytes.begin(), ref_bytes.end())).toTensor();
    auto r = ref.accessor<uint8_t, 3>();
    for (const RectF want :
         {RectF{37, 23, 180, 100}, RectF{0, 0, 403, 301}, RectF{390, 290, 13, 11}}) {
      DecodedRegion dec;
      std::string err;
      // Output as large as the region: no DCT scaling, so pixels must equal Pillow's.
      ASSERT_TRUE(d.Decode(
          reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), static_cast<int>(want.w),
          static_cast<int>(want.h), [&](int, int) { return want; }, &dec, &err))
          << name << ": " << err;
      int64_t worst = 0;
      double sum = 0;
      for (int y = 0; y < static_cast<int>(want.h); ++y) {
        for (int x = 0; x < static_cast<int>(want.w); ++x) {
          const int bx = static_cast<int>(dec.region.x) + x;
          const int by = static_cast<int>(dec.region.y) + y;
          ASSERT_LT(bx, dec.width);
          ASSERT_LT(by, dec.height);
          for (int c = 0; c < 3; ++c) {
            const int64_t e =
                std::abs(int64_t{dec.pixels[by * dec.stride + 3 * bx + c]} -
                         r[static_cast<int>(want.y) + y][static_cast<int>(want.x) + x][c]);
            worst = std::max(worst, e);
            sum += static_cast<double>(e);
          }
        }
      }
      EXPECT_LE(worst, 1) << name << " region " << want.x << "," << want.y;
      EXPECT_LT(sum / (want.w * want.h * 3), 0.05) << name;
    }
  }
}

}  // namespace
}  // namespace perch::trainer
