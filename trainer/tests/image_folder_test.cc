// ImageFolder must give torchvision's labels and sample order for the same tree. The tree below
// has the cases where a naive implementation differs: upper-case class names (sort before
// lower-case), a hidden class, a non-ASCII class, a class that is a symlink, a file at the root,
// nested subdirectories whose names sort differently as paths than as names ("sub b" vs
// "sub/deeper"), extensions in mixed case, non-image files and a dangling symlink (torchvision
// only looks at names).
#include "trainer/image_folder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "trainer/tests/test_util.h"

namespace perch::trainer {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

void BuildTree(const fs::path& root, const fs::path& outside) {
  for (const char* f : {"a/x.jpg", "a/X.JPG", "a/y.jpeg", "a/z.Png", "a/note.txt", "a/noext",
                        "a/a.jpg.bak", "a/sub/q.jpg", "a/sub b/r.jpg", "a/sub/deeper/s.webp",
                        "a/sub.x/t.TIFF", "b/1.jpg", "b/10.jpg", "b/2.jpg", "B/img.bmp",
                        "c.d/p.ppm", ".hidden/h.jpg", "\xc3\xa4/u.pgm", "root.jpg"}) {
    testing::WriteFile(root / f, "not really an image");
  }
  testing::WriteFile(outside / "l.jpg", "x");
  fs::create_directory_symlink(outside, root / "link");
  fs::create_symlink(root / "a" / "missing-target", root / "a" / "broken.jpg");
}

TEST(ImageFolderTest, KnownOrderAndLabels) {
  TempDir dir("if");
  BuildTree(dir.path() / "tree", dir.path() / "outside");
  ImageFolder data((dir.path() / "tree").string());
  const std::vector<std::string> classes = {".hidden", "B", "a", "b", "c.d", "link", "\xc3\xa4"};
  EXPECT_EQ(data.classes(), classes);
  std::vector<std::string> rel;
  const std::string root = (dir.path() / "tree").string() + "/";
  for (const Sample& s : data.samples()) {
    rel.push_back(s.path.substr(root.size()) + ":" + std::to_string(s.label));
  }
  const std::vector<std::string> expected = {".hidden/h.jpg:0",
                                             "B/img.bmp:1",
                                             "a/X.JPG:2",
                                             "a/broken.jpg:2",
                                             "a/x.jpg:2",
                                             "a/y.jpeg:2",
                                             "a/z.Png:2",
                                             "a/sub/q.jpg:2",
                                             "a/sub b/r.jpg:2",
                                             "a/sub.x/t.TIFF:2",
                                             "a/sub/deeper/s.webp:2",
                                             "b/1.jpg:3",
                                             "b/10.jpg:3",
                                             "b/2.jpg:3",
                                             "c.d/p.ppm:4",
                                             "link/l.jpg:5",
                                             "\xc3\xa4/u.pgm:6"};
  EXPECT_EQ(rel, expected);
}

TEST(ImageFolderTest, SameAsTorchvision) {
  if (!testing::PythonHasTorchvision()) {
    GTEST_SKIP() << "no torchvision for " << testing::kPython;
  }
  TempDir dir("if-tv");
  BuildTree(dir.path() / "tree", dir.path() / "outside");
  // A second, larger tree from the synthesizer (real layout: synset dirs, .JPEG files).
  testing::MakeSmallTree(dir.path() / "synth", 12, 11, 0, 16, 24);
  for (const fs::path& root : {dir.path() / "tree", dir.path() / "synth" / "train"}) {
    ImageFolder data(root.string());
    nlohmann::json ours = nlohmann::json::object();
    ours["classes"] = data.classes();
    ours["samples"] = nlohmann::json::array();
    for (const Sample& s : data.samples()) {
      ours["samples"].push_back({s.path, s.label});
    }
    std::string out;
    const std::string cmd =
        std::string(testing::kPython) +
        " -c 'import json, sys; from torchvision.datasets import ImageFolder; "
        "d = ImageFolder(sys.argv[1]); "
        "print(json.dumps({\"classes\": d.classes, \"samples\": d.samples}))' '" +
        root.string() + "'";
    ASSERT_EQ(testing::RunCommand(cmd, &out), 0) << out;
    const nlohmann::json theirs = nlohmann::json::parse(out);
    EXPECT_EQ(ours["classes"], theirs["classes"]) << root;
    ASSERT_EQ(ours["samples"].size(), theirs["samples"].size()) << root;
    EXPECT_EQ(ours["samples"], theirs["samples"]) << root;
  }
}

TEST(ImageFolderTest, ExtensionsAreCaseInsensitive) {
  for (const char* yes : {"a.jpg", "a.JPEG", "a.Png", "a.ppm", "a.BMP", "a.pgm", "a.tif", "a.TIFF",
                          "a.webp", ".jpg"}) {
    EXPECT_TRUE(ImageFolder::HasImageExtension(yes)) << yes;
  }
  for (const char* no : {"a.jpg.bak", "a.gif", "a", "jpg", "a.jp", "a.txt"}) {
    EXPECT_FALSE(ImageFolder::HasImageExtension(no)) << no;
  }
}

TEST(ImageFolderTest, EmptyClassOrNoClassIsAnError) {
  TempDir dir("if-err");
  testing::WriteFile(dir.path() / "t" / "a" / "x.jpg", "x");
  testing::WriteFile(dir.path() / "t" / "empty" / "readme.txt", "x");
  EXPECT_THROW(ImageFolder((dir.path() / "t").string()), std::runtime_error);
  testing::WriteFile(dir.path() / "flat" / "x.jpg", "x");
  EXPECT_THROW(ImageFolder((dir.path() / "flat").string()), std::runtime_error);
  EXPECT_THROW(ImageFolder((dir.path() / "missing").string()), std::runtime_error);
}

}  // namespace
}  // namespace perch::trainer
