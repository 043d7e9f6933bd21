// Fuzzes the block-file header check (FileBlockStore::OpenChecked, through
// Read and Slice): the input is the whole block file of a fixed key, written
// where the store looks for it. A hostile or rotten file must give kCorrupt
// (and be removed), never a crash or an allocation the header asks for.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "daemon/store/file_block_store.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

// A directory of its own, removed at exit (kept in a leaked string: a static
// std::string may be destroyed before atexit handlers run).
const std::string& Root() {
  static const std::string* root = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "perch-fuzz-XXXXXX").string();
    FUZZ_CHECK(::mkdtemp(tmpl.data()) != nullptr);
    auto* dir = new std::string(tmpl);
    std::atexit([] { std::filesystem::remove_all(Root()); });
    return dir;
  }();
  return *root;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  perch::fuzz::QuietLogs();
  using namespace perch;
  store::FileBlockStore store(Root());
  const core::BlockKey key{"0123456789abcdef0123456789abcdef", 3};
  const std::string path = store.PathOf(key);
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  auto r = store.Read(key, 0, 1ULL << 30);
  if (r.ok()) {
    FUZZ_CHECK(r->size() < size);                    // the data follows a header
    auto again = store.Read(key, r->size() / 2, 1);  // verified now: header only
    FUZZ_CHECK(again.ok());
    auto slice = store.Slice(key, 1, UINT64_MAX);
    FUZZ_CHECK(slice.ok() && slice->length() + 1 >= r->size() && slice->length() <= r->size());
  } else {
    FUZZ_CHECK(r.status().code() == core::StatusCode::kCorrupt);
  }
  std::filesystem::remove(path);
  return 0;
}
