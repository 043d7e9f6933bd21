#include "transfer/plugin.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "daemon/core/log_escape.h"
#include "transfer/classad.h"
#include "transfer/node_config.h"
#include "transfer/transferer.h"

namespace perch::transfer {
namespace {

using core::Result;
using core::Status;

// The output file: written from offset 0 without truncation, cut at the end.
class OutFile {
 public:
  static Result<OutFile> Open(const std::string& path) {
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return core::InternalError("cannot open the output file " + path + ": " +
                                 std::strerror(errno));
    }
    return OutFile(fd, path);
  }
  OutFile(OutFile&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)), offset_(o.offset_) {
    o.fd_ = -1;
  }
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;
  OutFile& operator=(OutFile&&) = delete;
  ~OutFile() {
    if (fd_ >= 0) close(fd_);
  }

  Status Append(const ClassAd& ad) {
    std::string text = ad.Unparse() + "\n";
    for (size_t done = 0; done < text.size();) {
      ssize_t n =
          pwrite(fd_, text.data() + done, text.size() - done, static_cast<off_t>(offset_ + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return core::InternalError("cannot write the output file " + path_ + ": " +
                                   std::strerror(n < 0 ? errno : ENOSPC));
      }
      done += static_cast<size_t>(n);
    }
    offset_ += text.size();
    return Status::Ok();
  }

  // Cuts the file after the last ad (what HTCondor pre-allocated beyond it).
  Status Finish() {
    if (ftruncate(fd_, static_cast<off_t>(offset_)) != 0 || close(fd_) != 0) {
      fd_ = -1;
      return core::InternalError("cannot finish the output file " + path_ + ": " +
                                 std::strerror(errno));
    }
    fd_ = -1;
    return Status::Ok();
  }

 private:
  OutFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
  uint64_t offset_ = 0;
};

// Writes `ads` (possibly none) and finishes the file; the exit status
// `status`, or kExitFailed if the file cannot be written.
int WriteAll(const std::string& outfile, const std::vector<ClassAd>& ads, int status) {
  auto out = OutFile::Open(outfile);
  Status s = out.ok() ? Status::Ok() : out.status();
  for (size_t i = 0; s.ok() && i < ads.size(); ++i) s = out->Append(ads[i]);
  if (s.ok()) s = out->Finish();
  if (!s.ok()) {
    std::cerr << "perch-transfer: " << s.message() << std::endl;
    return kExitFailed;
  }
  return status;
}

// Reads the input file, bounded. kInvalidArgument with the reason.
Result<std::string> ReadInput(const std::string& path) {
  std::error_code ec;
  uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return core::InvalidArgumentError("cannot read " + path + ": " + ec.message());
  if (size > kMaxClassAdInput) {
    return core::InvalidArgumentError(path + " is larger than 16 MiB");
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in) return core::InvalidArgumentError("cannot read " + path);
  return ss.str();
}

struct Request {
  std::string url, local_name;
};

// The transfer requests of the input ads: ads without Url and LocalFileName
// are not transfers (protocol 4 may add such ads) and are skipped.
Result<std::vector<Request>> RequestsOf(const std::vector<ClassAd>& ads) {
  std::vector<Request> out;
  for (size_t i = 0; i < ads.size(); ++i) {
    auto url = ads[i].GetString("Url");
    auto local = ads[i].GetString("LocalFileName");
    std::string which = "ad " + std::to_string(i + 1) + ": ";
    if (!url.ok()) return url.status().WithContext(which.substr(0, which.size() - 2));
    if (!local.ok()) return local.status().WithContext(which.substr(0, which.size() - 2));
    if (!url->has_value() && !local->has_value()) continue;
    if (!url->has_value() || !local->has_value()) {
      return core::InvalidArgumentError(which + "has " +
                                        (url->has_value() ? "Url" : "LocalFileName") + " but no " +
                                        (url->has_value() ? "LocalFileName" : "Url"));
    }
    out.push_back({**url, **local});
  }
  return out;
}

}  // namespace

Result<PluginArgs> ParsePluginArgs(const std::vector<std::string>& args, PluginArgs* partial) {
  PluginArgs a;
  a.mode = PluginArgs::Mode::kPositional;
  auto fail = [&](const std::string& why) -> Result<PluginArgs> {
    if (partial != nullptr) *partial = a;
    return core::InvalidArgumentError(why);
  };
  bool classad = false, version = false, help = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg.rfind("--", 0) == 0 && arg.size() > 2) arg = arg.substr(1);  // --name as -name
    if (arg == "-classad") {
      classad = true;
    } else if (arg == "-infile" || arg == "-outfile") {
      if (i + 1 >= args.size()) return fail(arg + " needs a file name");
      (arg == "-infile" ? a.infile : a.outfile) = args[++i];
    } else if (arg == "-upload") {
      a.upload = true;
    } else if (arg == "-d" || arg == "-debug") {
      a.debug = true;
    } else if (arg == "-version" || arg == "-v") {
      version = true;
    } else if (arg == "-h" || arg == "-help") {
      help = true;
    } else if (arg.size() > 1 && arg[0] == '-') {
      return fail("unknown option " + args[i]);
    } else {
      a.positional.push_back(args[i]);
    }
  }
  if (help || version || classad) {
    a.mode = help ? PluginArgs::Mode::kHelp
                  : (version ? PluginArgs::Mode::kVersion : PluginArgs::Mode::kClassAd);
    return a;
  }
  if (!a.infile.empty() || !a.outfile.empty()) {
    a.mode = PluginArgs::Mode::kTransfer;
    if (a.infile.empty() || a.outfile.empty()) return fail("-infile and -outfile go together");
    if (!a.positional.empty()) return fail("unexpected argument " + a.positional.front());
    return a;
  }
  if (a.upload) return fail("-upload needs -infile and -outfile");
  if (a.positional.size() < 2) return fail("expected URL... DEST, -infile/-outfile or -classad");
  return a;
}

std::string PluginUsage() {
  return "perch-transfer: HTCondor file-transfer plugin for osdf://, pelican:// and stash:// "
         "URLs,\n"
         "reading through the node's perchd when it serves the federation, else directly.\n\n"
         "Usage:\n"
         "  perch-transfer -classad                            print the capability ad\n"
         "  perch-transfer -infile IN -outfile OUT [-upload]   HTCondor's multi-file mode\n"
         "  perch-transfer URL... DEST                         download by hand\n"
         "  perch-transfer -version | -h\n\n"
         "Options: -d (debug lines on stderr). Every option may also be written --name.\n\n"
         "Environment: PERCH_ENDPOINT (perchd's HTTP endpoint, e.g. http://127.0.0.1:8480),\n"
         "PERCH_CONFIG (perchd's config file, default /etc/perch/perchd.toml; its http and\n"
         "ca_file keys), PERCH_CA_FILE; tokens from BEARER_TOKEN, BEARER_TOKEN_FILE,\n"
         "XDG_RUNTIME_DIR/bt_u<uid>, /tmp/bt_u<uid>, TOKEN, _CONDOR_CREDS.\n\n"
         "Exit status: 0 all transfers done, 1 failure, 11 failure worth retrying.\n";
}

std::string CapabilityAd(const std::string& version) {
  return "MultipleFileSupport = true\n"
         "PluginVersion = " +
         QuoteClassAdString(version) + "\n" +
         "PluginType = \"FileTransfer\"\n"
         "ProtocolVersion = 2\n"
         "SupportedMethods = " +
         QuoteClassAdString(kSupportedMethods) + "\n";
}

void ReportUsageError(const std::string& outfile, const std::string& error,
                      const std::string& version) {
  if (outfile.empty()) return;
  WriteAll(outfile, {FailureAd("", "", "download", "perch-transfer: " + error, version)},
           kExitFailed);
}

int RunTransfers(const PluginArgs& args, const std::string& version) {
  std::string type = args.upload ? "upload" : "download";
  auto text = ReadInput(args.infile);
  auto ads = text.ok() ? ParseClassAds(*text) : Result<std::vector<ClassAd>>(text.status());
  auto requests = ads.ok() ? RequestsOf(*ads) : Result<std::vector<Request>>(ads.status());
  if (!requests.ok()) {
    std::string error =
        "perch-transfer: malformed input file " + args.infile + ": " + requests.status().message();
    std::cerr << error << std::endl;
    return WriteAll(args.outfile, {FailureAd("", "", type, error, version)}, kExitFailed);
  }
  if (args.upload) {
    std::string error =
        "perch-transfer does not upload: perch reads from federations and never writes to them "
        "(use Pelican's plugin for output files)";
    std::cerr << "perch-transfer: " << error << std::endl;
    std::vector<ClassAd> out;
    for (const Request& r : *requests) {
      out.push_back(FailureAd(r.url, r.local_name, type, error, version));
    }
    if (out.empty()) out.push_back(FailureAd("", "", type, error, version));
    return WriteAll(args.outfile, out, kExitFailed);
  }
  auto out = OutFile::Open(args.outfile);
  if (!out.ok()) {
    std::cerr << "perch-transfer: " << out.status().message() << std::endl;
    return kExitFailed;
  }
  Transferer transferer(ReadNodeConfig(), version);
  int status = kExitOk;
  for (const Request& r : *requests) {
    TransferOutcome o = transferer.Download(r.url, r.local_name);
    if (Status s = out->Append(o.ad); !s.ok()) {
      std::cerr << "perch-transfer: " << s.message() << std::endl;
      return kExitFailed;
    }
    if (!o.success) {
      std::cerr << "perch-transfer: " << o.error << std::endl;
      status = o.retryable ? kExitRetryable : kExitFailed;
      break;  // as Pelican's plugin: later downloads are not attempted
    }
  }
  if (Status s = out->Finish(); !s.ok()) {
    std::cerr << "perch-transfer: " << s.message() << std::endl;
    return kExitFailed;
  }
  return status;
}

int RunPositional(const PluginArgs& args, const std::string& version) {
  std::vector<std::string> urls(args.positional.begin(), args.positional.end() - 1);
  const std::string& dest = args.positional.back();
  std::error_code ec;
  if (urls.size() > 1 && !std::filesystem::is_directory(dest, ec)) {
    std::cerr << "perch-transfer: with several URLs, " << dest << " must be a directory"
              << std::endl;
    return kExitFailed;
  }
  Transferer transferer(ReadNodeConfig(), version);
  for (const std::string& url : urls) {
    TransferOutcome o = transferer.Download(url, dest);
    if (!o.success) {
      std::cerr << "perch-transfer: " << o.error << std::endl;
      return o.retryable ? kExitRetryable : kExitFailed;
    }
    std::cout << url << " -> " << o.destination << " (" << o.report.file_bytes << " bytes via "
              << (o.report.via == "perchd" ? "perchd" : "the federation") << ")" << std::endl;
  }
  return kExitOk;
}

}  // namespace perch::transfer
