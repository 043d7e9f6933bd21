#include "trainer/jpeg_decoder.h"

#include <csetjmp>
#include <cstdio>
// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>

#include <algorithm>
#include <cmath>

namespace perch::trainer {

namespace {

struct ErrorManager {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

// libjpeg calls this for fatal errors; it must not return. Unwind to the setjmp in DecodeImpl.
// Nothing with a destructor lives between the setjmp and these calls.
[[noreturn]] void OnError(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

// Warnings (level -1) are normally printed. Most are harmless ("extraneous bytes before
// marker", which Pillow also tolerates); a premature end of data means the file is truncated,
// which Pillow refuses, so it is remembered and turned into an error.
void OnMessage(j_common_ptr cinfo, int level) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    err->truncated = true;
  }
}

}  // namespace

struct JpegDecoder::State {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
};

JpegDecoder::JpegDecoder() : state_(std::make_unique<State>()) {
  state_->cinfo.err = jpeg_std_error(&state_->err.pub);
  state_->err.pub.error_exit = OnError;
  state_->err.pub.emit_message = OnMessage;
  jpeg_create_decompress(&state_->cinfo);
}

JpegDecoder::~JpegDecoder() { jpeg_destroy_decompress(&state_->cinfo); }

bool JpegDecoder::ReadSize(const uint8_t* data, size_t size, int* width, int* height,
                           std::string* error) {
  jpeg_decompress_struct* cinfo = &state_->cinfo;
  if (setjmp(state_->err.jump)) {
    jpeg_abort_decompress(cinfo);
    *error = state_->err.message;
    return false;
  }
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  *width = static_cast<int>(cinfo->image_width);
  *height = static_cast<int>(cinfo->image_height);
  jpeg_abort_decompress(cinfo);
  return true;
}

bool JpegDecoder::DecodeImpl(const uint8_t* data, size_t size, int out_w, int out_h,
                             RectF (*region_fn)(void*, int, int), void* fn, DecodedRegion* out,
                             std::string* error) {
  jpeg_decompress_struct* cinfo = &state_->cinfo;
  state_->err.truncated = false;
  // Everything the error path needs is in `state_` or plain locals set before any libjpeg call
  // that can fail; `volatile` is not needed because none of them is modified after setjmp and
  // read after longjmp.
  if (setjmp(state_->err.jump)) {
    jpeg_abort_decompress(cinfo);
    *error = state_->err.message;
    return false;
  }
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  const int width = static_cast<int>(cinfo->image_width);
  const int height = static_cast<int>(cinfo->image_height);
  const RectF r = region_fn(fn, width, height);

  const bool cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  cinfo->dct_method = JDCT_ISLOW;

  // The largest power-of-two reduction that keeps the crop at least as large as the output.
  int denom = 1;
  if (allow_dct_scaling_) {
    for (int d : {8, 4, 2}) {
      if (r.w / d >= out_w && r.h / d >= out_h) {
        denom = d;
        break;
      }
    }
  }
  cinfo->scale_num = 1;
  cinfo->scale_denom = static_cast<unsigned>(denom);
  jpeg_start_decompress(cinfo);
  const int scaled_w = static_cast<int>(cinfo->output_width);
  const int scaled_h = static_cast<int>(cinfo->output_height);
  // Pixels of the scaled image that bilinear sampling of the region can touch: the region
  // rounded out, plus one pixel on each side so that edge samples interpolate with the real
  // neighbour instead of a clamped copy.
  auto clampi = [](int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); };
  const double s = 1.0 / denom;
  int x0 = clampi(static_cast<int>(std::floor(r.x * s)) - 1, 0, scaled_w - 1);
  int x1 = clampi(static_cast<int>(std::ceil((r.x + r.w) * s)) + 1, x0 + 1, scaled_w);
  int y0 = clampi(static_cast<int>(std::floor(r.y * s)) - 1, 0, scaled_h - 1);
  int y1 = clampi(static_cast<int>(std::ceil((r.y + r.h) * s)) + 1, y0 + 1, scaled_h);

  JDIMENSION xoffset = static_cast<JDIMENSION>(x0);
  JDIMENSION crop_width = static_cast<JDIMENSION>(x1 - x0);
  if (crop_width < static_cast<JDIMENSION>(scaled_w)) {
    jpeg_crop_scanline(cinfo, &xoffset, &crop_width);  // widens to iMCU boundaries
  } else {
    xoffset = 0;
  }
  const int buf_w = static_cast<int>(cinfo->output_width);
  const int channels = cmyk ? 4 : 3;
  const size_t stride = static_cast<size_t>(buf_w) * channels;
  const int rows = y1 - y0;
  if (buffer_.size() < stride * rows) {
    buffer_.resize(stride * rows);
  }
  if (y0 > 0) {
    jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(y0));
  }
  for (int row = 0; row < rows;) {
    JSAMPROW ptr = buffer_.data() + stride * row;
    JDIMENSION got = jpeg_read_scanlines(cinfo, &ptr, 1);
    if (got == 0) {
      break;  // cannot happen with a memory source; guards against an endless loop
    }
    row += static_cast<int>(got);
  }
  // The rest of the image is not needed; abort instead of finishing (which would decode it).
  jpeg_abort_decompress(cinfo);
  if (state_->err.truncated) {
    *error = "premature end of JPEG data (truncated file)";
    return false;
  }
  if (cmyk) {
    // Pillow: Adobe JPEGs store inverted CMYK; RGB = (255 - C)(255 - K) / 255 on the
    // uninverted values, i.e. C' * K' / 255 on the stored ones. Convert in place to RGB rows
    // with the CMYK stride (3 of every 4 bytes used).
    const bool inverted = cinfo->saw_Adobe_marker;
    for (int row = 0; row < rows; ++row) {
      uint8_t* p = buffer_.data() + stride * row;
      for (int x = 0; x < buf_w; ++x) {
        int c = p[4 * x], m = p[4 * x + 1], y = p[4 * x + 2], k = p[4 * x + 3];
        if (!inverted) {
          c = 255 - c;
          m = 255 - m;
          y = 255 - y;
          k = 255 - k;
        }
        p[3 * x] = static_cast<uint8_t>(c * k / 255);
        p[3 * x + 1] = static_cast<uint8_t>(m * k / 255);
        p[3 * x + 2] = static_cast<uint8_t>(y * k / 255);
      }
    }
  }
  out->pixels = buffer_.data();
  out->stride = stride;
  out->width = buf_w;
  out->height = rows;
  out->region = RectF{r.x * s - static_cast<double>(xoffset), r.y * s - y0, r.w * s, r.h * s};
  return true;
}

}  // namespace perch::trainer
