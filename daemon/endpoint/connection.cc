#include "daemon/endpoint/connection.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <climits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "daemon/core/log_escape.h"
#include "daemon/core/object_digest.h"
#include "daemon/core/wait.h"
#include "daemon/endpoint/dav.h"
#include "daemon/endpoint/request.h"

namespace perch::endpoint {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;

std::string_view Sv(beast::string_view s) { return std::string_view(s.data(), s.size()); }

core::ClientCounters& HttpEndpoint::Shared::Counters(const std::string& label) {
  {
    core::MutexLock l(mu);
    if (!labels.count(label)) {
      if (labels.size() >= options.max_client_labels) return metrics.clients().Get("other");
      labels.insert(label);
    }
  }
  return metrics.clients().Get(label);
}

void SendAndForget(int fd, std::string_view status, std::string_view headers,
                   std::string_view text) {
  std::string answer = "HTTP/1.1 " + std::string(status) + "\r\nServer: perchd\r\n" +
                       std::string(headers) +
                       "Content-Type: text/plain\r\nConnection: close\r\nContent-Length: " +
                       std::to_string(text.size()) + "\r\n\r\n" + std::string(text);
  if (::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
    // The client is gone or reads nothing: it goes without the answer.
  }
}

namespace {

using Clock = std::chrono::steady_clock;

// A blocking socket as a Beast SyncReadStream/SyncWriteStream. The socket's
// SO_RCVTIMEO/SO_SNDTIMEO bound every wait, and reads wait no longer than a
// deadline when one is set; a timeout is an error.
class FdStream {
 public:
  explicit FdStream(int fd) : fd_(fd) {}

  // Reads that follow fail with beast::error::timeout once `deadline` has
  // passed, however slowly the bytes trickle in (nullopt: no deadline).
  void set_deadline(std::optional<Clock::time_point> deadline) { deadline_ = deadline; }

  template <class Buffers>
  size_t read_some(const Buffers& buffers, beast::error_code& ec) {
    ec = {};
    if (deadline_ && !WaitReadable(ec)) return 0;
    for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers);
         ++it) {
      asio::mutable_buffer b = *it;
      if (b.size() == 0) continue;
      ssize_t n;
      do n = ::recv(fd_, b.data(), b.size(), 0);
      while (n < 0 && errno == EINTR);
      if (n > 0) return static_cast<size_t>(n);
      ec = n == 0 ? beast::error_code(asio::error::eof) : Error();
      return 0;
    }
    return 0;
  }
  template <class Buffers>
  size_t read_some(const Buffers& buffers) {
    beast::error_code ec;
    size_t n = read_some(buffers, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }
  template <class Buffers>
  size_t write_some(const Buffers& buffers, beast::error_code& ec) {
    ec = {};
    for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers);
         ++it) {
      asio::const_buffer b = *it;
      if (b.size() == 0) continue;
      ssize_t n;
      do n = ::send(fd_, b.data(), b.size(), MSG_NOSIGNAL);
      while (n < 0 && errno == EINTR);
      if (n > 0) return static_cast<size_t>(n);
      ec = Error();
      return 0;
    }
    return 0;
  }
  template <class Buffers>
  size_t write_some(const Buffers& buffers) {
    beast::error_code ec;
    size_t n = write_some(buffers, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }

 private:
  static beast::error_code Error() {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return asio::error::timed_out;
    return beast::error_code(errno, boost::system::system_category());
  }
  // Waits until the socket has bytes, an end or an error; false (and `ec`)
  // when the deadline passes first.
  bool WaitReadable(beast::error_code& ec) {
    for (;;) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline_ - Clock::now());
      pollfd p{fd_, POLLIN, 0};
      int n = left.count() <= 0
                  ? 0
                  : ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), INT_MAX)));
      if (n > 0) return true;
      if (n == 0) {
        ec = beast::error::timeout;
        return false;
      }
      if (errno != EINTR) {
        ec = Error();
        return false;
      }
    }
  }
  int fd_;
  std::optional<Clock::time_point> deadline_;
};

bool SendAll(int fd, const char* data, size_t len) {
  while (len > 0) {
    ssize_t n = ::send(fd, data, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// Reads exactly `len` bytes at `offset` of `fd`; false on an error or a
// file that ends first.
bool PreadAll(int fd, char* buf, size_t len, uint64_t offset) {
  while (len > 0) {
    ssize_t n = ::pread(fd, buf, len, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buf += n;
    len -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

// The most of a cached block copied (and sent as one chunk) at a time: a
// connection's buffer (64 connections: 16 MiB at most).
constexpr uint64_t kCopyBytes = 256 << 10;

bhttp::status StatusOf(const core::Status& s) {
  switch (s.code()) {
    case core::StatusCode::kNotFound:
      return bhttp::status::not_found;
    case core::StatusCode::kPermissionDenied:
      return bhttp::status::forbidden;
    case core::StatusCode::kInvalidArgument:
      return bhttp::status::bad_request;
    case core::StatusCode::kUnavailable:
    case core::StatusCode::kCancelled:
    case core::StatusCode::kStale:  // the object changed while read: a retry reads the new one
      return bhttp::status::service_unavailable;
    case core::StatusCode::kDeadlineExceeded:
      return bhttp::status::gateway_timeout;
    case core::StatusCode::kCorrupt:
      return bhttp::status::bad_gateway;
    default:
      return bhttp::status::internal_server_error;
  }
}

using Request = bhttp::request<bhttp::string_body>;
using Response = bhttp::response<bhttp::string_body>;

class Connection {
 public:
  Connection(HttpEndpoint::Shared& shared, int fd, std::optional<Peer> peer)
      : s_(shared), fd_(fd), peer_(peer), stream_(fd) {}

  void Run() {
    beast::flat_buffer buffer(16 * 1024);
    for (bool first = true;; first = false) {
      bhttp::request_parser<bhttp::string_body> parser;
      parser.header_limit(8 * 1024);
      parser.body_limit(64 * 1024);
      beast::error_code ec;
      // The whole request in time, not just each byte: a client sending a
      // byte every few seconds would otherwise hold its slot for as long as
      // it likes (issue 29). An idle keep-alive connection ends then too.
      stream_.set_deadline(Clock::now() + s_.options.request_timeout);
      bhttp::read(stream_, buffer, parser, ec);
      stream_.set_deadline(std::nullopt);
      if (ec == beast::error::timeout) {
        if (first || buffer.size() > 0 || parser.got_some()) {  // not an idle keep-alive one
          s_.metrics.endpoint().request_timeouts.fetch_add(1, std::memory_order_relaxed);
          SendAndForget(fd_, "408 Request Timeout", "",
                        "perchd: the request did not arrive in time\n");
        }
        return;
      }
      if (ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
          ec == asio::error::timed_out || ec == asio::error::connection_reset) {
        return;
      }
      if (ec) {
        counters_ = &s_.Counters("unknown");
        head_ = false;
        Response res{bhttp::status::bad_request, 11};
        Finish(res, "bad request: " + ec.message() + "\n", false);
        return;
      }
      if (!Handle(parser.get())) return;
    }
  }

 private:
  // Answers one request; false when the connection must close.
  bool Handle(const Request& req) {
    counters_ = &s_.Counters(ClientLabel(Sv(req[bhttp::field::user_agent])));
    counters_->requests.fetch_add(1, std::memory_order_relaxed);
    keep_alive_ = req.keep_alive();
    version_ = req.version();
    head_ = req.method() == bhttp::verb::head;
    federation_.clear();
    std::string_view target = Sv(req.target());
    spdlog::debug("http {} {}", std::string(req.method_string()), core::EscapeForLog(target, 300));
    if (target == "/.perch/mounts" &&
        (req.method() == bhttp::verb::get || req.method() == bhttp::verb::head)) {
      return Mounts();  // HEAD: the same header, no body (Finish)
    }
    bhttp::verb m = req.method();
    if (m == bhttp::verb::options) {
      Response res{bhttp::status::ok, version_};
      res.set(bhttp::field::allow, "GET, HEAD, PROPFIND, OPTIONS");
      res.set("DAV", "1");
      return Finish(res, "", keep_alive_);
    }
    if (m != bhttp::verb::get && m != bhttp::verb::head && m != bhttp::verb::propfind) {
      Response res{bhttp::status::method_not_allowed, version_};
      res.set(bhttp::field::allow, "GET, HEAD, PROPFIND, OPTIONS");
      return Finish(res, "perchd's endpoint is read-only: GET, HEAD, PROPFIND\n", keep_alive_);
    }
    auto path = PathOfTarget(target);
    if (!path.ok()) return Error(bhttp::status::bad_request, path.status().message());
    core::ObjectPath rel;
    core::Mount* mount = core::MostSpecificMount(s_.stack.mounts(), *path, &rel);
    if (mount == nullptr)
      return Error(bhttp::status::not_found, path->str() + " is below no federation perchd mounts");
    core::FileSystem& fs = mount->fs();
    if (!MayReadRestricted()) {
      // The kernel walks a path through the mount one directory at a time
      // and stops at a protected one (mode 0500/0550); so does the endpoint,
      // so that a 404 or a 403 below it tells such a user nothing of its
      // names, and perchd looks nothing up there for them.
      const std::vector<std::string_view> segments = rel.Segments();
      core::ObjectPath dir;  // the root, then each directory down to rel's parent
      for (std::string_view segment : segments) {
        auto above = fs.GetAttr(dir);
        if (!above.ok()) return Error(StatusOf(above.status()), above.status().message());
        if (above->restricted) return Protected(*path);
        dir = *dir.Child(segment);
      }
    }
    auto attr = fs.GetAttr(rel);
    if (!attr.ok()) return Error(StatusOf(attr.status()), attr.status().message());
    if (attr->restricted && !MayReadRestricted()) return Protected(*path);
    federation_ = mount->spec().federation_id;
    if (m == bhttp::verb::propfind) return Propfind(req, fs, *path, rel, *attr);
    if (attr->is_dir) return Index(fs, *path, rel);
    return Object(req, *mount, rel, *attr);
  }

  bool Protected(const core::ObjectPath& path) {
    return Error(bhttp::status::forbidden,
                 path.str() + " is in a protected namespace: perchd serves it to root and " +
                     "members of its protected_group only");
  }

  bool Mounts() {
    nlohmann::json mounts = nlohmann::json::array();
    for (core::Mount* m : s_.stack.mounts()) {
      const core::MountSpec& spec = m->spec();
      mounts.push_back(
          {{"federation", spec.federation_id},
           {"discovery", spec.federation.empty() ? spec.federation_id : spec.federation},
           {"prefix", spec.federation_prefix.str()},
           {"mountpoint", spec.mountpoint}});
    }
    Response res{bhttp::status::ok, version_};
    res.set(bhttp::field::content_type, "application/json");
    return Finish(res, nlohmann::json{{"mounts", mounts}}.dump() + "\n", keep_alive_);
  }

  bool Propfind(const Request& req, core::FileSystem& fs, const core::ObjectPath& path,
                const core::ObjectPath& rel, const core::FileAttr& attr) {
    std::vector<DavEntry> children;
    if (attr.is_dir && req["Depth"] != "0") {
      auto list = fs.ReadDir(rel);
      if (!list.ok()) return Error(StatusOf(list.status()), list.status().message());
      for (const core::DirEntry& e : *list) {
        auto child = path.Child(e.name);
        if (child.ok()) children.push_back(DavEntry{*child, e.attr});
      }
    }
    Response res{bhttp::status::multi_status, version_};
    res.set(bhttp::field::content_type, "text/xml; charset=utf-8");
    return Finish(res, Multistatus(DavEntry{path, attr}, children), keep_alive_);
  }

  bool Index(core::FileSystem& fs, const core::ObjectPath& path, const core::ObjectPath& rel) {
    auto list = fs.ReadDir(rel);
    if (!list.ok()) return Error(StatusOf(list.status()), list.status().message());
    Response res{bhttp::status::ok, version_};
    res.set(bhttp::field::content_type, "text/html; charset=utf-8");
    std::string body = HtmlIndex(path, *list);
    return Finish(res, std::move(body), keep_alive_);
  }

  bool Object(const Request& req, core::Mount& mount, const core::ObjectPath& rel,
              const core::FileAttr& attr) {
    core::FileSystem& fs = mount.fs();
    // Want-Digest (RFC 3230, as Pelican's client asks after a download): the
    // object's digests perch checked against the origin's (DigestKeeper),
    // before any byte is sent; none when no server offers one.
    std::string digest;
    if (auto want = req.find("Want-Digest"); want != req.end()) {
      std::vector<std::string> wanted = core::ParseWantDigest(Sv(want->value()));
      if (!wanted.empty()) {
        auto d = mount.Digests(rel, attr, wanted);
        if (d.ok()) {
          digest = core::DigestHeaderValue(*d);
        } else if (d.status().code() == core::StatusCode::kCorrupt) {
          return Error(StatusOf(d.status()), d.status().message());
        } else if (d.status().code() != core::StatusCode::kNotFound) {
          spdlog::warn("http: no digest of {}: {}", core::EscapeForLog(federation_ + rel.str()),
                       d.status().message());
        }
      }
    }
    RangeAnswer range{RangeAnswer::kWhole, 0, attr.size};
    if (auto r = req.find(bhttp::field::range); r != req.end()) {
      if (IfRangeHolds(Sv(req[bhttp::field::if_range]), attr))
        range = AnswerRange(Sv(r->value()), attr.size);
    }
    if (range.kind == RangeAnswer::kUnsatisfiable) {
      Response res{bhttp::status::range_not_satisfiable, version_};
      res.set(bhttp::field::content_range, "bytes */" + std::to_string(attr.size));
      return Finish(res, "", keep_alive_, /*error=*/true);
    }
    Response res{
        range.kind == RangeAnswer::kPart ? bhttp::status::partial_content : bhttp::status::ok,
        version_};
    res.set(bhttp::field::content_type, "application/octet-stream");
    res.set(bhttp::field::accept_ranges, "bytes");
    res.set(bhttp::field::etag, EntityTag(attr));
    if (attr.mtime != 0) res.set(bhttp::field::last_modified, HttpDate(attr.mtime));
    if (!digest.empty()) res.set("Digest", digest);
    if (range.kind == RangeAnswer::kPart) {
      res.set(bhttp::field::content_range, "bytes " + std::to_string(range.offset) + "-" +
                                               std::to_string(range.offset + range.length - 1) +
                                               "/" + std::to_string(attr.size));
    }
    // Pelican's client: failures mid-body reported in a trailer (XRootD's way).
    bool trailer = req["X-Transfer-Status"] == "true" &&
                   Sv(req[bhttp::field::te]).find("trailers") != std::string_view::npos &&
                   req.method() == bhttp::verb::get && version_ == 11;
    if (trailer) {
      res.set(bhttp::field::transfer_encoding, "chunked");
      res.set(bhttp::field::trailer, "X-Transfer-Status");
    } else {
      res.content_length(range.length);
    }
    if (req.method() == bhttp::verb::head) return SendHeader(res) && keep_alive_;
    auto handle = fs.Open(rel);
    if (!handle.ok()) return Error(StatusOf(handle.status()), handle.status().message());
    // The first piece (up to the first block's end) is read before the
    // status line: a read that fails at once (the federation down, a name
    // the origin cannot serve) answers with its error status, never 200 and
    // an empty body. Its pieces go on to SendBody.
    std::optional<std::vector<core::ReadPiece>> first;
    if (range.length > 0) {
      const uint64_t block = s_.stack.options().reader.block_size;
      const uint64_t n = std::min(range.length, block - range.offset % block);
      auto pieces = ReadPieces(fs, *handle, range.offset, n);
      if (!pieces.ok()) {
        fs.Release(*handle);
        return Error(StatusOf(pieces.status()), pieces.status().message());
      }
      first = *std::move(pieces);
    }
    if (!SendHeader(res)) {
      fs.Release(*handle);
      return false;
    }
    core::Status sent =
        SendBody(fs, *handle, range.offset, range.length, trailer, std::move(first));
    fs.Release(*handle);
    if (trailer && sent.code() != core::StatusCode::kCancelled) {
      std::string end = "0\r\nX-Transfer-Status: " +
                        (sent.ok() ? std::string("200: OK")
                                   : std::to_string(static_cast<unsigned>(StatusOf(sent))) + ": " +
                                         core::EscapeForLog(sent.message(), 200)) +
                        "\r\n\r\n";
      if (!SendAll(fd_, end.data(), end.size())) return false;
    }
    if (!sent.ok()) {
      counters_->errors.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("http: {} cut short: {}", federation_ + rel.str(), sent.message());
      return false;  // a Content-Length body cut short: the client sees the connection end
    }
    return keep_alive_;
  }

  // Sends `length` bytes at `offset` of open file `handle`, a block at a time:
  // cache hits copied out of the block's file, fetched bytes as they are;
  // `first`, when given, is the first block's pieces, read already.
  // kCancelled when the client went away.
  //
  // Each piece is in hand before its chunk's size goes out: a failure to get
  // it ends the body with the trailer (Object), never inside a chunk that
  // promised more (the client would read the trailer as body bytes).
  //
  // Hits are copied (pread, then send), not sent with sendfile: sendfile
  // leaves the socket's queues holding the cache's pages, and a hole punched
  // later (eviction, a pack record's grace) zeroes them in place where the
  // page cache keeps a larger folio than the hole (Linux 6.18, ext4: a
  // stalled client received zeros for bytes queued before the punch). A
  // copy is the client's as soon as it is made; the slice keeps the block in
  // use (BlockSlice) only until then.
  core::Status SendBody(core::FileSystem& fs, uint64_t handle, uint64_t offset, uint64_t length,
                        bool chunked, std::optional<std::vector<core::ReadPiece>> first) {
    const uint64_t block = s_.stack.options().reader.block_size;
    while (length > 0) {
      const uint64_t n = std::min(length, block - offset % block);
      std::optional<std::vector<core::ReadPiece>> pieces;
      pieces.swap(first);
      if (!pieces) {
        auto read = ReadPieces(fs, handle, offset, n);
        if (!read.ok()) return read.status();
        pieces = *std::move(read);
      }
      uint64_t got = 0;
      for (const core::ReadPiece& p : *pieces) got += p.length();
      if (got != n)
        return core::CorruptError("the object ended early at " + std::to_string(offset));
      uint64_t at = offset;
      for (const core::ReadPiece& p : *pieces) {
        if (core::Status s = SendPiece(p, at, chunked); !s.ok()) return s;
        at += p.length();
      }
      offset += n;
      length -= n;
    }
    return core::Status::Ok();
  }

  // `size` bytes at `offset` of open file `handle` (FileSystem::Read),
  // waiting for them as long as the read's deadline allows.
  static core::Result<std::vector<core::ReadPiece>> ReadPieces(core::FileSystem& fs,
                                                               uint64_t handle, uint64_t offset,
                                                               uint64_t size) {
    return core::WaitFor<std::vector<core::ReadPiece>>(fs.NewDeadline(), [&](auto done) {
      fs.Read(core::FileRef::Handle(handle), offset, size, std::move(done));
    });
  }

  // Sends piece `p` (at `offset` in the object) of the body: a slice copied
  // out of its file a buffer at a time, bytes in memory as they are.
  core::Status SendPiece(const core::ReadPiece& p, uint64_t offset, bool chunked) {
    if (const core::SharedBytes* bytes = p.bytes()) {
      return SendPiece(bytes->view().data(), bytes->length, chunked);
    }
    const core::BlockSlice& slice = *p.slice();
    for (uint64_t done = 0; done < slice.length();) {
      const uint64_t m = std::min(slice.length() - done, kCopyBytes);
      buffer_.resize(m);
      if (!PreadAll(slice.fd(), buffer_.data(), m, slice.file_offset() + done)) {
        return core::InternalError("reading the cache's copy at " + std::to_string(offset + done) +
                                   " failed");
      }
      if (core::Status s = SendPiece(buffer_.data(), m, chunked); !s.ok()) return s;
      done += m;
    }
    return core::Status::Ok();
  }

  // Sends `len` bytes of the body (as one chunk if `chunked`); kCancelled
  // when the client went away.
  core::Status SendPiece(const char* data, uint64_t len, bool chunked) {
    if (chunked) {
      char head[32];
      int n = std::snprintf(head, sizeof(head), "%llx\r\n", static_cast<unsigned long long>(len));
      if (!SendAll(fd_, head, static_cast<size_t>(n))) return core::CancelledError("client");
    }
    if (!SendAll(fd_, data, len) || (chunked && !SendAll(fd_, "\r\n", 2)))
      return core::CancelledError("client");
    counters_->bytes.fetch_add(len, std::memory_order_relaxed);
    return core::Status::Ok();
  }

  // Whether the peer may read a protected namespace (decided once per connection).
  bool MayReadRestricted() {
    if (!may_read_restricted_) {
      may_read_restricted_ =
          peer_ && (peer_->uid == 0 || peer_->uid == ::geteuid() ||
                    (s_.options.restricted_gid >= 0 &&
                     PeerInGroup(*peer_, static_cast<gid_t>(s_.options.restricted_gid))));
    }
    return *may_read_restricted_;
  }

  bool Error(bhttp::status status, const std::string& message) {
    Response res{status, version_};
    res.set(bhttp::field::content_type, "text/plain; charset=utf-8");
    return Finish(res, "perchd: " + message + "\n", keep_alive_, true);
  }

  bool SendHeader(Response& res) {
    res.set(bhttp::field::server, "perchd");
    if (!federation_.empty()) res.set("X-Perch-Federation", federation_);
    res.keep_alive(keep_alive_);
    std::ostringstream head;
    head << res.base();
    std::string text = head.str();
    return SendAll(fd_, text.data(), text.size());
  }

  // Sends `res` with `body`; returns `keep_alive` if that worked.
  bool Finish(Response& res, std::string body, bool keep_alive, bool error = false) {
    if (error || static_cast<unsigned>(res.result()) >= 400)
      counters_->errors.fetch_add(1, std::memory_order_relaxed);
    keep_alive_ = keep_alive;
    res.content_length(body.size());
    if (!SendHeader(res)) return false;
    if (head_) return keep_alive;  // the length of what GET would send, no body
    if (!body.empty() && !SendAll(fd_, body.data(), body.size())) return false;
    counters_->bytes.fetch_add(body.size(), std::memory_order_relaxed);
    return keep_alive;
  }

  HttpEndpoint::Shared& s_;
  const int fd_;
  const std::optional<Peer> peer_;
  FdStream stream_;
  core::ClientCounters* counters_ = nullptr;
  unsigned version_ = 11;
  bool keep_alive_ = false;
  bool head_ = false;
  std::string federation_;
  std::optional<bool> may_read_restricted_;
  std::string buffer_;  // a cached piece on its way to the client (SendBody)
};

}  // namespace

void ServeConnection(HttpEndpoint::Shared& shared, int fd, std::optional<Peer> peer) {
  try {
    Connection(shared, fd, peer).Run();
  } catch (const std::exception& e) {
    spdlog::warn("http: connection ended: {}", e.what());
  }
}

}  // namespace perch::endpoint
