// ImageFolder: the list of (file, label) samples of a directory tree laid out as
// torchvision.datasets.ImageFolder expects (one directory per class), in exactly the order and
// with exactly the labels torchvision 0.14 gives:
//   - classes are the names of the root's entries that are directories (symlinks followed),
//     sorted by code point; the label of a class is its index in that list;
//   - within a class, files are found recursively (os.walk, followlinks=True); directories are
//     visited in sorted order of their full path, files in sorted order of their name;
//   - a file is a sample when its name, lower-cased, ends with one of torchvision's
//     IMG_EXTENSIONS (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp); the file is not opened.
// A class directory without any sample is an error, as in torchvision.
//
// Immutable after construction; safe to share between threads.
#ifndef PERCH_TRAINER_IMAGE_FOLDER_H_
#define PERCH_TRAINER_IMAGE_FOLDER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace perch::trainer {

struct Sample {
  std::string path;  // root-relative paths joined onto root, as os.path.join would
  int64_t label = 0;
};

class ImageFolder {
 public:
  // Scans `root`. Throws std::runtime_error if root is not a directory, has no class
  // directories, or a class has no image file (torchvision raises FileNotFoundError then).
  explicit ImageFolder(const std::string& root);

  const std::string& root() const { return root_; }
  const std::vector<std::string>& classes() const { return classes_; }
  const std::vector<Sample>& samples() const { return samples_; }
  size_t size() const { return samples_.size(); }

  // True when `filename` has one of torchvision's image extensions (case-insensitive).
  static bool HasImageExtension(const std::string& filename);

 private:
  std::string root_;
  std::vector<std::string> classes_;
  std::vector<Sample> samples_;
};

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_IMAGE_FOLDER_H_
