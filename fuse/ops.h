// FuseServer::Ops: the low-level callbacks libfuse calls, over the server's
// state (FuseServer declares them its friend). Private to fuse/.
//
//   ops.cc       the callback table; INIT; names, attributes, extended
//                attributes, statfs, and the refusals of a read-only mount
//   dir_ops.cc   open directories: opendir, readdir(plus), releasedir
//   read_ops.cc  open, read and release of files, and the replies of bytes
//
// Every request is answered exactly once (a reply, an error, or, for a read
// answered later, by PendingReplies); every callback runs inside the one
// guard (guard.h), which hands what it throws to Unexpected. No callback holds a lock across a
// FileSystem call or a fuse_reply_*.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "daemon/core/filesystem.h"
#include "daemon/core/metrics.h"
#include "daemon/core/status.h"
#include "fuse/fuse_server.h"
#include "fuse/guard.h"

struct fuse_conn_info;
struct fuse_file_info;
struct fuse_forget_data;

namespace perch::fuse {

struct FuseServer::Ops {
  static FuseServer* Self(fuse_req* req);
  // ReplyError, counted in the server's metrics.
  static void ReplyStatus(fuse_req* req, const char* op, const core::Status& s);

  // ops.cc
  // What a callback threw (guard.h): logged; the request answered EIO
  // (FORGET: no answer), INIT's session ended.
  static void Unexpected(const Thrown& t) noexcept;
  static void Init(void* userdata, struct fuse_conn_info* conn);
  static void Lookup(fuse_req* req, uint64_t parent, const char* name);
  static void Forget(fuse_req* req, uint64_t ino, uint64_t nlookup);
  static void ForgetMulti(fuse_req* req, size_t count, struct fuse_forget_data* forgets);
  static void GetAttr(fuse_req* req, uint64_t ino, struct fuse_file_info* fi);
  static void StatFs(fuse_req* req, uint64_t ino);
  // The path and attributes of `ino` for an xattr call; false with `*err` set.
  static bool XattrTarget(FuseServer* self, uint64_t ino, core::ObjectPath* path,
                          core::FileAttr* attr, int* err);
  static std::map<std::string, std::string> Xattrs(fuse_req* req, uint64_t ino, int* err);
  // The value of attribute `name` of `ino`, or an errno (ENODATA: none such).
  static std::string Xattr(fuse_req* req, uint64_t ino, const char* name, int* err);
  static void GetXattr(fuse_req* req, uint64_t ino, const char* name, size_t size);
  static void ListXattr(fuse_req* req, uint64_t ino, size_t size);

  // dir_ops.cc
  static void OpenDir(fuse_req* req, uint64_t ino, struct fuse_file_info* fi);
  static void ReadDirCommon(fuse_req* req, uint64_t ino, size_t size, off_t off,
                            struct fuse_file_info* fi, bool plus);
  static void ReadDir(fuse_req* req, uint64_t ino, size_t size, off_t off,
                      struct fuse_file_info* fi);
  static void ReadDirPlus(fuse_req* req, uint64_t ino, size_t size, off_t off,
                          struct fuse_file_info* fi);
  static void ReleaseDir(fuse_req* req, uint64_t ino, struct fuse_file_info* fi);

  // read_ops.cc
  static void Open(fuse_req* req, uint64_t ino, struct fuse_file_info* fi);
  static void Read(fuse_req* req, uint64_t ino, size_t size, off_t off, struct fuse_file_info* fi);
  // Reads `size` bytes at `off` of `file` (inode `ino`) and replies: here if
  // the bytes are at hand when FileSystem::Read returns, else from the thread
  // that completes the read, or EIO from PendingReplies at the deadline.
  static void ReadAndReply(FuseServer* self, fuse_req* req, uint64_t ino, const core::FileRef& file,
                           uint64_t off, size_t size,
                           std::chrono::steady_clock::time_point started);
  static void Release(fuse_req* req, uint64_t ino, struct fuse_file_info* fi);
};

}  // namespace perch::fuse
