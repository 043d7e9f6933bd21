// Fuzzes the decoding of index records (docs/design.md "On-disk format"): namespace
// attribute and listing entries ("na"/"nl" + path, NamespaceCache) and the
// block, object and pin records ("b/", "o/", "pin/", CacheCatalog::Load).
// The input is records separated by '\x1e', each "key=value" (binary values
// allowed). A damaged index must be ignored record by record, never crash.
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/core/cache_catalog.h"
#include "daemon/core/namespace_cache.h"
#include "tests/fakes/fake_origin.h"
#include "tests/fakes/mem_block_store.h"
#include "tests/fakes/mem_index.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  perch::fuzz::QuietLogs();
  using namespace perch;
  testing::MemIndex index;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<core::Index::Write> batch;
  std::vector<std::string> keys;
  while (!in.empty() && batch.size() < 256) {
    size_t end = in.find('\x1e');
    std::string_view rec = in.substr(0, end);
    in.remove_prefix(end == std::string_view::npos ? in.size() : end + 1);
    size_t eq = rec.find('=');
    if (eq == std::string_view::npos) continue;
    keys.emplace_back(rec.substr(0, eq));
    batch.push_back({keys.back(), std::string(rec.substr(eq + 1))});
  }
  FUZZ_CHECK(index.Apply(batch).ok());
  testing::FakeOrigin origin;  // empty: whatever the index does not answer is not found
  core::NamespaceCache names(origin, index, core::NamespaceOptions{});
  const auto deadline = core::DeadlineAfter(std::chrono::seconds(5));
  for (const std::string& k : keys) {
    if (k.size() < 3 || (k.rfind("na", 0) != 0 && k.rfind("nl", 0) != 0)) continue;
    auto path = core::ObjectPath::Parse(std::string_view(k).substr(2));
    if (!path.ok()) continue;
    if (auto attr = names.GetAttr(*path, deadline); attr.ok()) (void)attr->size;
    if (auto list = names.ReadDir(*path, deadline); list.ok()) {
      for (const core::DirEntry& e : *list) (void)e.name.size();
    }
  }
  testing::MemBlockStore store;
  testing::InlineExecutor disk;
  core::CacheCatalog catalog(index, store, disk, core::CatalogOptions{},
                             [](const core::BlockKey&) { return false; });
  if (catalog.Load().ok()) {
    for (const core::CachedObject& o : catalog.List(core::ObjectPath(), "", 64))
      (void)o.cached_bytes;
  }
  return 0;
}
