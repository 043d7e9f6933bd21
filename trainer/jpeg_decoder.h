// JpegDecoder: decodes the part of a JPEG that a crop needs, with libjpeg-turbo.
//
// Training crops (RandomResizedCrop) cover 8-100 % of an image, so decoding all of it wastes
// work. The decoder (1) lets libjpeg scale the DCT by 1/2, 1/4 or 1/8 when the crop stays at
// least as large as the output after scaling, (2) cuts the columns to the crop with
// jpeg_crop_scanline (rounded out to iMCU boundaries), (3) skips the rows above the crop with
// jpeg_skip_scanlines and (4) stops after the crop's last row. Grayscale becomes RGB; CMYK and
// YCCK (Adobe) are converted to RGB as Pillow does.
//
// Not thread-safe: one decoder per thread. It keeps its libjpeg state and pixel buffer between
// calls so that steady-state decoding allocates nothing.
#ifndef PERCH_TRAINER_JPEG_DECODER_H_
#define PERCH_TRAINER_JPEG_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace perch::trainer {

// A rectangle in continuous pixel-edge coordinates: pixel i spans [i, i + 1).
struct RectF {
  double x = 0;
  double y = 0;
  double w = 0;
  double h = 0;
};

// Decoded pixels of (a superset of) the requested region.
struct DecodedRegion {
  const uint8_t* pixels = nullptr;  // RGB, 3 bytes per pixel, rows `stride` bytes apart
  size_t stride = 0;
  int width = 0;  // of the decoded buffer
  int height = 0;
  RectF region;  // the requested region, in the buffer's pixel-edge coordinates
};

class JpegDecoder {
 public:
  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Reads only the header. Returns false (with `error`) if `data` is not a JPEG.
  bool ReadSize(const uint8_t* data, size_t size, int* width, int* height, std::string* error);

  // Decodes `data` so that `region` (original-image coordinates) can be resampled to
  // out_w x out_h without upsampling that the original would not need. `region_for` is called
  // once with the image's width and height, after the header is read, and returns the region
  // (this lets random crops depend on the image size without parsing the header twice).
  // Returns false with `error` for a corrupt or truncated JPEG; `out` then is unspecified.
  // `out` points into this decoder and is valid until the next call.
  template <typename RegionFn>
  bool Decode(const uint8_t* data, size_t size, int out_w, int out_h, RegionFn&& region_for,
              DecodedRegion* out, std::string* error) {
    using Fn = std::remove_reference_t<RegionFn>;
    struct Thunk {
      static RectF Call(void* fn, int w, int h) { return (*static_cast<Fn*>(fn))(w, h); }
    };
    return DecodeImpl(data, size, out_w, out_h, &Thunk::Call,
                      const_cast<void*>(static_cast<const void*>(&region_for)), out, error);
  }

  // Set to false to always decode at full scale (for tests and comparisons).
  void set_allow_dct_scaling(bool allow) { allow_dct_scaling_ = allow; }

 private:
  struct State;
  bool DecodeImpl(const uint8_t* data, size_t size, int out_w, int out_h,
                  RectF (*region_fn)(void*, int, int), void* fn, DecodedRegion* out,
                  std::string* error);

  std::unique_ptr<State> state_;
  std::vector<uint8_t> buffer_;
  bool allow_dct_scaling_ = true;
};

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_JPEG_DECODER_H_
