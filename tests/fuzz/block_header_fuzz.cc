// Fuzzes the block-file header check (FileBlockStore::OpenChecked, through
// Read and Slice): the input is the whole block file of a fixed key, written
// where the store looks for it. A hostile or rotten file must give kCorrupt
// (and be removed), never a crash or an allocation the header asks for.
// Then the same bytes as a pack file (pack_files.h): as the record the index
// names for the key (read), and as a pack nothing names (the start-up walk
// looks for records in it to name again).
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "daemon/core/codec.h"
#include "daemon/core/index_keys.h"
#include "daemon/store/file_block_store.h"
#include "tests/fakes/mem_index.h"
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

  // As a pack: named as key 0's record (varints: format 1, pack 1, offset 0,
  // the input's length), then, unnamed, walked.
  const core::BlockKey small{key.object_id, 0};
  testing::MemIndex index;
  std::string loc;
  for (uint64_t v : {uint64_t{1}, uint64_t{1}, uint64_t{0}, uint64_t{size}})
    core::codec::PutVarint(&loc, v);
  FUZZ_CHECK(index.Apply({{core::index_keys::PackRecord(small.object_id), loc}}).ok());
  const std::string pack = Root() + "/packs/0000000000000001.pack";
  auto write_pack = [&] {
    std::filesystem::create_directories(Root() + "/packs");
    std::ofstream out(pack, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  };
  write_pack();
  {
    store::FileBlockStore packed(Root());
    packed.PackSmallObjects(index, 1 << 20, std::chrono::milliseconds(0));
    auto p = packed.Read(small, 0, 1ULL << 30);
    if (p.ok()) {
      FUZZ_CHECK(p->size() < size);
    } else {
      FUZZ_CHECK(p.status().code() == core::StatusCode::kCorrupt ||
                 p.status().code() == core::StatusCode::kNotFound);
    }
  }
  FUZZ_CHECK(index.Apply({{core::index_keys::PackRecord(small.object_id), std::nullopt}}).ok());
  write_pack();
  {
    store::FileBlockStore walker(Root());
    walker.PackSmallObjects(index, 1 << 20, std::chrono::milliseconds(0));
    uint64_t adopted = 0;
    auto scan = walker.ForEachBlock([&](const core::BlockKey&, uint64_t) { ++adopted; },
                                    [](const core::BlockKey&) { return false; });
    FUZZ_CHECK(scan.ok() && scan->blocks == adopted);
  }
  std::filesystem::remove_all(Root() + "/packs");
  return 0;
}
