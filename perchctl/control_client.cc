#include "perchctl/control_client.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "proto/control_address.h"

namespace perch::ctl {

namespace {

// connect(2)'s errno for unix socket `path` (0 when it connects). gRPC only
// reports a failed connection as "unavailable"; the errno tells a socket that
// refuses this user (EACCES) from one nobody listens on.
int ProbeUnixSocket(const std::string& path) {
  if (path.size() >= sizeof(sockaddr_un::sun_path)) return ENAMETOOLONG;
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  int err = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

}  // namespace

ControlClient::ControlClient(std::string address) : address_(std::move(address)) {
  std::string target;
  if (address_.starts_with("tcp:")) {
    target = address_.substr(4);
  } else {
    socket_path_ = address_.starts_with("unix:") ? address_.substr(5) : address_;
    target = "unix:" + socket_path_;
  }
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(512 << 20);  // the daemon says when a hint list is too large
  channel_ = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  stub_ = v1::Perch::NewStub(channel_);
}

int ControlClient::Connect() {
  if (!socket_path_.empty() && ProbeUnixSocket(socket_path_) == EACCES) {
    // The socket (mode 0660) or a directory above it refuses this user.
    struct stat st {};
    std::string who = "root or allowed into the socket's directory";
    if (::stat(socket_path_.c_str(), &st) == 0) {
      who = st.st_gid == 0 ? "root; perchd's control_group setting can let a group in"
                           : "root or in group " + GroupName(st.st_gid);
    }
    std::cerr << "perchctl: permission denied: " << socket_path_ << " (perchctl needs to be " << who
              << ")\n";
    return kExitPermission;
  }
  auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(3);
  if (channel_->WaitForConnected(deadline)) return 0;
  std::cerr << "perchctl: no perchd answers at " << address_
            << " (is perchd running? choose its socket with --socket PATH or $PERCH_SOCKET)\n";
  return kExitNoDaemon;
}

int ControlClient::Fail(const grpc::Status& s, const std::string& what) const {
  std::cerr << "perchctl: " << what << ": " << s.error_message() << "\n";
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return kExitNoDaemon;
    case grpc::StatusCode::NOT_FOUND:
      return kExitNotFound;
    case grpc::StatusCode::INVALID_ARGUMENT:
      return kExitUsage;
    default:
      return kExitFailed;
  }
}

std::unique_ptr<grpc::ClientContext> ControlClient::Context(std::chrono::seconds timeout) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  return ctx;
}

}  // namespace perch::ctl
