// Where a download lands, and how it gets there without a partial file.
//
// A transfer writes into a temporary file next to its destination (same
// directory, so the final rename is atomic and never crosses file systems)
// and renames it into place only once every byte is written. A failed
// transfer removes its temporary file; so does SIGTERM, SIGINT or SIGHUP (the
// starter stopping the plugin), through handlers InstallCleanupOnSignals()
// sets. Only a SIGKILL can leave a temporary file, named
// ".<name>.perch-XXXXXX", never a partial file under the destination's name.
//
// Thread-safety: a TempFile is used by one thread at a time; WriteAt may be
// called from several threads for disjoint ranges (pwrite).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/core/result.h"
#include "daemon/core/types.h"

namespace perch::transfer {

// The file to write for `local_name`: itself, or, if it names an existing
// directory, that directory plus the last segment of `object`.
// kInvalidArgument for an empty name, or a directory and an object without a name.
core::Result<std::string> ResolveDestination(const std::string& local_name,
                                             const core::ObjectPath& object);

class TempFile {
 public:
  // Creates a temporary file in the directory of `destination`.
  // kPermissionDenied / kNotFound / kNoSpace (kLocal) with the reason.
  static core::Result<TempFile> CreateFor(const std::string& destination);

  TempFile(TempFile&& other) noexcept;
  TempFile& operator=(TempFile&&) = delete;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile();  // removes the file unless committed

  // Writes `data` at `offset`. kNoSpace for a full disk or quota, else kInternal.
  core::Status WriteAt(uint64_t offset, std::string_view data) const;
  // Empties the file (a fetch starting over on another path).
  core::Status Reset() const;
  // Makes the file the destination: mode 0666 less the umask, then rename.
  core::Status Commit();

  const std::string& path() const { return path_; }

 private:
  TempFile(int fd, std::string path, std::string destination);

  int fd_ = -1;
  std::string path_;
  std::string destination_;
  bool committed_ = false;
};

// Installs SIGTERM, SIGINT and SIGHUP handlers that remove the temporary file
// being written, then die of the signal. Call once, from main.
void InstallCleanupOnSignals();

}  // namespace perch::transfer
