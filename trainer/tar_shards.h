// Tar shards as WebDataset writes them: a training set split into tar files
// (train-000000.tar, ...), each holding samples as consecutive members that share a key:
//   n01440764_10026.jpg  n01440764_10026.cls  n01440764_10027.jpg  n01440764_10027.cls ...
// The key of a member is its path up to the first '.' of its basename, the rest (lower-cased)
// its extension, exactly as webdataset's base_plus_ext splits "dir/a.b.c" into ("dir/a", "b.c").
// A sample is a run of consecutive members with one key; it is used when it has an image
// (.jpg .jpeg .png) and a label: the decimal integer of its .cls member, or, for the per-class
// tars of ImageNet's ILSVRC2012_img_train.tar (n01440764.tar holding n01440764_10026.JPEG ...),
// the label the caller fixes for the whole shard.
//
// Reading goes through libarchive (tar formats, optionally gzip-compressed); nothing here parses
// tar headers. Everything a shard says is bounded by ShardLimits before it drives an allocation
// or a loop; a member that breaks a limit, a sample without image or valid label, and a shard
// that is corrupt or truncated are dropped and counted (bad()), never thrown.
//
// Thread-safety: a TarShardReader is used by one thread at a time; the free functions are pure.
#ifndef PERCH_TRAINER_TAR_SHARDS_H_
#define PERCH_TRAINER_TAR_SHARDS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct archive;

namespace perch::trainer {

struct ShardLimits {
  int64_t max_member_bytes = 64 << 20;  // a larger member is skipped (and counted)
  size_t max_key_bytes = 1024;
  int64_t max_samples = 1 << 20;  // per shard; the rest of a larger shard is dropped
  int64_t max_members = 4 << 20;  // per shard, including directories and ignored members
  int64_t max_cls_bytes = 32;
};

struct ShardSample {
  std::string key;
  std::vector<uint8_t> image;
  int64_t label = -1;
};

// Expands WebDataset's brace notation: "{000..099}" (numeric range, inclusive, either direction;
// zero-padded to the wider bound when a bound has a leading zero) and "{a,b,c}" (alternatives),
// any number of non-nested groups, left to right as braceexpand orders them. Throws
// std::invalid_argument on unbalanced or nested braces, an empty or malformed group, or more
// than `max_results` names.
std::vector<std::string> ExpandBraces(const std::string& pattern, size_t max_results = 1 << 20);

// The shard files a --data-shards pattern names: braces expanded; a name holding '*' or '?'
// globbed (sorted; none matching is an error); a relative name resolved against `base` (when
// not empty). Throws std::invalid_argument when nothing is named.
std::vector<std::string> ResolveShardPattern(const std::string& pattern, const std::string& base);

// Splits a member path into (key, lower-cased extension); false when its basename has no '.'
// or nothing before it.
bool SplitMemberName(const std::string& path, std::string* key, std::string* extension);

// The label of a .cls member's text: a decimal integer, surrounding whitespace allowed.
bool ParseClassLabel(const std::string& text, int64_t* label);

class TarShardReader {
 public:
  // Opens nothing yet. fixed_label >= 0: every sample of the shard has it (per-class tars) and
  // .cls members are ignored; else a sample's label is its .cls, which must be < classes.
  TarShardReader(std::string path, ShardLimits limits, int64_t fixed_label, int64_t classes);
  ~TarShardReader();
  TarShardReader(const TarShardReader&) = delete;
  TarShardReader& operator=(const TarShardReader&) = delete;

  // The next usable sample of the shard: true; false at its end, also after an error (error()
  // says which; the samples before it were delivered).
  bool Next(ShardSample* out);

  // Members, samples and shard failures dropped so far (a failed open or a corrupt archive
  // counts once).
  int64_t bad() const { return bad_; }
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

 private:
  enum class MemberResult { kMember, kSkipped, kEnd };
  struct Member {
    std::string key;
    std::string extension;
    std::vector<uint8_t> data;
  };
  bool Open();
  MemberResult ReadMember(Member* m);
  void Fail(const std::string& what);
  // Moves the sample gathered so far to `out` when it is usable; counts it when not.
  bool Finish(ShardSample* out);
  void Add(Member&& m);

  const std::string path_;
  const ShardLimits limits_;
  const int64_t fixed_label_;
  const int64_t classes_;
  archive* archive_ = nullptr;
  bool opened_ = false;
  bool done_ = false;
  int64_t members_ = 0;
  int64_t samples_ = 0;
  int64_t bad_ = 0;
  std::string error_;
  // The sample being gathered.
  bool has_current_ = false;
  bool current_bad_ = false;
  ShardSample current_;
  std::string current_cls_;
  bool has_cls_ = false;
};

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_TAR_SHARDS_H_
