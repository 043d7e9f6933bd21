#include "transfer/transferer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>
#include <iostream>

#include "daemon/core/log_escape.h"
#include "daemon/http/digest.h"

namespace perch::transfer {
namespace {

using core::Result;
using core::Status;
using core::StatusCode;
using Value = ClassAdValue;

// Checks the downloaded file `path` against the digests its server states,
// as Pelican's plugin does: every algorithm perch knows is computed over the
// file's bytes and one must equal a stated digest (under any name of its
// length: an XRootD 5.5 cache mislabels them). `*checked` gets the digest
// that matched, "" when none was stated. kCorrupt on a mismatch: the caller
// then keeps no file.
Status CheckDigests(const std::string& path, const std::vector<core::ObjectDigest>& claims,
                    std::string* checked) {
  checked->clear();
  if (claims.empty()) return Status::Ok();
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return core::InternalError("cannot read " + path + " back to check its digest");
  std::unique_ptr<core::DigestHasher> hasher = http::NewDigestHasher(core::DigestAlgorithms());
  std::string buf(4 << 20, '\0');
  for (;;) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return core::InternalError("cannot read " + path + " back to check its digest");
    }
    if (n == 0) break;
    hasher->Update(std::string_view(buf.data(), static_cast<size_t>(n)));
  }
  close(fd);
  std::vector<core::ObjectDigest> computed = hasher->Finish();
  core::ObjectDigest matched;
  switch (core::MatchDigests(claims, computed, &matched)) {
    case core::DigestMatch::kMatch:
      *checked = core::DigestText(matched);
      return Status::Ok();
    case core::DigestMatch::kNone:
      return Status::Ok();  // of no algorithm perch computes: unchecked, as Pelican's plugin
    case core::DigestMatch::kMismatch:
      break;
  }
  std::string mine;
  for (const core::ObjectDigest& c : computed) {
    if (c.raw.size() == claims.front().raw.size()) {
      mine = core::DigestText(c);
      break;
    }
  }
  return core::CorruptError(
      "the downloaded bytes do not match the object's digest (the server "
      "states " +
      core::EscapeForLog(core::DigestText(claims.front())) + ", the bytes have " + mine +
      "); the file was not kept");
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "myvo+OSDF:///x" -> "osdf"; "" when the URL has no scheme.
std::string SchemeOf(const std::string& url) {
  size_t colon = url.find("://");
  if (colon == std::string::npos) return "";
  std::string scheme = Lower(url.substr(0, colon));
  size_t plus = scheme.rfind('+');
  return plus == std::string::npos ? scheme : scheme.substr(plus + 1);
}

// Pelican's ?recursive and ?pack= change what a download means; refused rather
// than ignored. Other parameters (directread, ...) are hints and are dropped.
Status CheckQuery(const std::string& url) {
  size_t q = url.find('?');
  if (q == std::string::npos) return Status::Ok();
  size_t hash = url.find('#', q);
  std::string query = url.substr(q + 1, hash == std::string::npos ? hash : hash - q - 1);
  for (size_t start = 0; start <= query.size();) {
    size_t amp = query.find('&', start);
    std::string item = query.substr(start, amp == std::string::npos ? amp : amp - start);
    std::string key = Lower(item.substr(0, item.find('=')));
    if (key == "recursive" || key == "pack") {
      return core::InvalidArgumentError(
          "?" + key + " is not supported by perch-transfer (single objects only)");
    }
    if (amp == std::string::npos) break;
    start = amp + 1;
  }
  return Status::Ok();
}

std::string Describe(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kPermissionDenied:
      return "permission denied";
    case StatusCode::kUnavailable:
      return "the federation did not answer";
    case StatusCode::kDeadlineExceeded:
      return "timed out";
    case StatusCode::kCorrupt:
      return "inconsistent data from the servers";
    case StatusCode::kStale:
      return "the object changed at the origin while it was read";
    case StatusCode::kNoSpace:
      return "no space left on the local disk";
    case StatusCode::kInvalidArgument:
      return "bad request";
    default:
      return "failed";
  }
}

// One element of TransferErrorData (HTCondor's transfer_error_data.rst).
ClassAd ErrorData(const Status& s, const std::string& server, const std::string& version) {
  ClassAd e;
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      e.Set("ErrorType", Value::String("Parameter"));
      e.Set("PluginVersion", Value::String(version));
      e.Set("PluginLaunched", Value::Bool(true));
      break;
    case StatusCode::kNotFound:
      e.Set("ErrorType", Value::String("Specification"));
      e.Set("FailedServer", Value::String(server));
      break;
    case StatusCode::kPermissionDenied:
      e.Set("ErrorType", Value::String("Authorization"));
      e.Set("FailedServer", Value::String(server));
      e.Set("FailureType", Value::String("Authorization"));
      e.Set("ShouldRefresh", Value::Bool(false));
      break;
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kNoSpace:
      e.Set("ErrorType", Value::String("Transfer"));
      e.Set("FailedServer", Value::String(server));
      e.Set("FailureType",
            Value::String(s.code() == StatusCode::kNoSpace ? "NoSpace" : "TimedOut"));
      break;
    default:
      e.Set("ErrorType", Value::String("Contact"));
      e.Set("FailedServer", Value::String(server));
  }
  e.Set("Retryable", Value::Integer(s.retryable() ? 0 : -1));
  e.Set("ErrorCode", Value::Integer(static_cast<int>(s.code())));
  e.Set("ErrorString", Value::String(s.message()));
  return e;
}

ClassAd BaseAd(const std::string& url, const std::string& local_name, const std::string& type) {
  ClassAd ad;
  ad.Set("TransferUrl", Value::String(url));
  ad.Set("TransferFileName", Value::String(local_name));
  ad.Set("TransferType", Value::String(type));
  ad.Set("TransferProtocol", Value::String(SchemeOf(url)));
  return ad;
}

}  // namespace

std::string LocalMachineName() {
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "";
  return host;
}

ClassAd FailureAd(const std::string& url, const std::string& local_name, const std::string& type,
                  const std::string& error, const std::string& version) {
  ClassAd ad = BaseAd(url, local_name, type);
  int64_t now = static_cast<int64_t>(std::time(nullptr));
  ad.Set("TransferSuccess", Value::Bool(false));
  ad.Set("TransferError", Value::String(error));
  ad.Set("TransferRetryable", Value::Bool(false));
  ad.Set("TransferFileBytes", Value::Integer(0));
  ad.Set("TransferTotalBytes", Value::Integer(0));
  ad.Set("TransferStartTime", Value::Integer(now));
  ad.Set("TransferEndTime", Value::Integer(now));
  ad.Set("TransferLocalMachineName", Value::String(LocalMachineName()));
  ad.Set("TransferErrorData",
         Value::ListOf({ErrorData(core::InvalidArgumentError(error), "", version)}));
  return ad;
}

Transferer::Transferer(NodeConfig node, std::string version)
    : node_(std::move(node)), version_(std::move(version)) {
  http::CurlLoop::Options opts;
  opts.ca_file = node_.ca_file;
  opts.user_agent = "perch-transfer/" + version_;
  loop_ = std::make_unique<http::CurlLoop>(opts);
  direct_ = std::make_unique<DirectFetcher>(*loop_);
}

Transferer::~Transferer() {
  loop_->Shutdown();  // callbacks in flight point into the fetchers
}

const std::vector<PerchdMount>* Transferer::Mounts(std::string* why) {
  if (!endpoint_asked_) {
    endpoint_asked_ = true;
    if (node_.endpoint.empty()) {
      endpoint_problem_ = node_.endpoint_problem;
    } else {
      endpoint_ = std::make_unique<PerchdEndpoint>(*loop_, node_.endpoint);
      auto m = endpoint_->LoadMounts();
      if (m.ok()) {
        mounts_ = *std::move(m);
      } else {
        endpoint_problem_ = "perchd's endpoint " + node_.endpoint + " (from " +
                            node_.endpoint_source + ") is not usable: " + m.status().message();
      }
    }
  }
  if (!endpoint_problem_.empty()) {
    *why = endpoint_problem_;
    return nullptr;
  }
  return &mounts_;
}

Result<FetchReport> Transferer::Fetch(const http::FederationUrl& fu, const std::string& url,
                                      const TempFile& file, std::string* fallback,
                                      std::string* via) {
  std::string why;
  if (const auto* mounts = Mounts(&why)) {
    const PerchdMount* mount = MountServing(*mounts, fu);
    if (mount == nullptr) {
      why =
          "no mount of perchd at " + node_.endpoint + " serves " + fu.discovery_url + fu.path.str();
    } else {
      *via = "perchd";
      auto r = endpoint_->Fetch(fu, *mount, file);
      if (r.ok()) return r;
      if (r.status().code() == StatusCode::kNotFound ||
          r.status().where() == core::FailureSite::kLocal) {
        return r.status();
      }
      why = "perchd at " + node_.endpoint + " could not serve it: " + r.status().message();
      PERCH_RETURN_IF_ERROR(file.Reset());
    }
    std::cerr << "perch-transfer: " << core::EscapeForLog(url, 500) << ": " << why
              << "; fetching from the federation directly" << std::endl;
  } else if (!endpoint_problem_said_) {
    endpoint_problem_said_ = true;
    std::cerr << "perch-transfer: " << why << "; fetching from the federation directly"
              << std::endl;
  }
  *fallback = why;
  *via = "federation";
  return direct_->Fetch(fu, file);
}

TransferOutcome Transferer::Download(const std::string& url, const std::string& local_name) {
  TransferOutcome out;
  int64_t start = static_cast<int64_t>(std::time(nullptr));
  std::string fallback, via;
  std::string failed_server;
  std::string checked_digest;
  Status status = [&]() -> Status {
    std::string scheme = SchemeOf(url);
    if (scheme != "osdf" && scheme != "stash" && scheme != "pelican" && scheme != "http" &&
        scheme != "https") {
      return core::InvalidArgumentError("unsupported URL '" + core::EscapeForLog(url, 500) +
                                        "': perch-transfer handles " + kSupportedMethods);
    }
    auto fu = http::ParseFederationUrl(url);
    if (!fu.ok()) return fu.status();
    PERCH_RETURN_IF_ERROR(CheckQuery(url));
    auto dest = ResolveDestination(local_name, fu->path);
    if (!dest.ok()) return dest.status();
    out.destination = *dest;
    auto tmp = TempFile::CreateFor(*dest);
    if (!tmp.ok()) return tmp.status();
    auto report = Fetch(*fu, url, *tmp, &fallback, &via);
    failed_server = via == "perchd" ? node_.endpoint : fu->discovery_url;
    if (!report.ok()) return report.status();
    PERCH_RETURN_IF_ERROR(CheckDigests(tmp->path(), report->digests, &checked_digest));
    PERCH_RETURN_IF_ERROR(tmp->Commit());
    out.report = *std::move(report);
    return Status::Ok();
  }();

  out.success = status.ok();
  out.retryable = !status.ok() && status.retryable();
  if (!status.ok()) {
    out.error = "cannot download " + core::EscapeForLog(url, 500) + ": " + Describe(status) + ": " +
                status.message() + " (perch-transfer " + version_ + " on " + LocalMachineName() +
                ")";
  }
  ClassAd& ad = out.ad;
  ad = BaseAd(url, local_name, "download");
  ad.Set("TransferSuccess", Value::Bool(out.success));
  if (!out.success) ad.Set("TransferError", Value::String(out.error));
  ad.Set("TransferRetryable", Value::Bool(out.retryable));
  ad.Set("TransferFileBytes", Value::Integer(static_cast<int64_t>(out.report.file_bytes)));
  ad.Set("TransferTotalBytes", Value::Integer(static_cast<int64_t>(out.report.network_bytes)));
  ad.Set("TransferStartTime", Value::Integer(start));
  ad.Set("TransferEndTime", Value::Integer(static_cast<int64_t>(std::time(nullptr))));
  ad.Set("TransferLocalMachineName", Value::String(LocalMachineName()));
  if (!out.success) {
    ad.Set("TransferErrorData", Value::ListOf({ErrorData(status, failed_server, version_)}));
  }
  ClassAd dev;
  dev.Set("PerchTransferVersion", Value::String(version_));
  dev.Set("PerchVia", Value::String(via));
  dev.Set("PerchServer", Value::String(out.report.server));
  dev.Set("PerchResumes", Value::Integer(static_cast<int64_t>(out.report.resumes)));
  dev.Set("PerchFailovers", Value::Integer(static_cast<int64_t>(out.report.failovers)));
  if (!fallback.empty()) dev.Set("PerchFallbackReason", Value::String(fallback));
  if (!checked_digest.empty()) dev.Set("PerchDigest", Value::String(checked_digest));
  ad.Set("DeveloperData", Value::Nested(dev));
  return out;
}

}  // namespace perch::transfer
