#include "daemon/peers/peer_credentials.h"

#include <arpa/inet.h>
#include <grp.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace perch::peers {

namespace {

bool IsLoopback(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (a.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

// Copies the address and port of `a` into the sock_diag id fields.
void Fill(const sockaddr_storage& a, __be16* port, __be32 addr[4]) {
  std::memset(addr, 0, 16);
  if (a.ss_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    *port = in->sin_port;
    std::memcpy(addr, &in->sin_addr, 4);
  } else {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    *port = in6->sin6_port;
    std::memcpy(addr, &in6->sin6_addr, 16);
  }
}

// `ip` and `port` as a socket address; false if `ip` is no IP address.
bool Parse(const std::string& ip, int port, sockaddr_storage* a) {
  *a = {};
  if (port < 0 || port > 65535) return false;
  auto* in = reinterpret_cast<sockaddr_in*>(a);
  if (::inet_pton(AF_INET, ip.c_str(), &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(port));
    return true;
  }
  auto* in6 = reinterpret_cast<sockaddr_in6*>(a);
  if (::inet_pton(AF_INET6, ip.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    return true;
  }
  return false;
}

std::optional<Peer> PeerOf(const sockaddr_storage& local, const sockaddr_storage& peer);

}  // namespace

std::optional<Peer> LoopbackPeer(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t ll = sizeof(local), pl = sizeof(peer);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) {
    return std::nullopt;
  }
  return PeerOf(local, peer);
}

std::optional<Peer> LoopbackPeerOf(const std::string& local_ip, int local_port,
                                   const std::string& peer_ip, int peer_port) {
  sockaddr_storage local{}, peer{};
  if (!Parse(local_ip, local_port, &local) || !Parse(peer_ip, peer_port, &peer)) {
    return std::nullopt;
  }
  return PeerOf(local, peer);
}

namespace {

std::optional<Peer> PeerOf(const sockaddr_storage& local, const sockaddr_storage& peer) {
  if (local.ss_family != peer.ss_family || !IsLoopback(peer)) return std::nullopt;
  int nl = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) return std::nullopt;
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } msg{};
  msg.nlh.nlmsg_len = sizeof(msg);
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST;
  msg.req.sdiag_family = static_cast<__u8>(peer.ss_family);
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0u;
  // The peer's socket: its source is our peer, its destination is us.
  Fill(peer, &msg.req.id.idiag_sport, msg.req.id.idiag_src);
  Fill(local, &msg.req.id.idiag_dport, msg.req.id.idiag_dst);
  msg.req.id.idiag_cookie[0] = msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  std::optional<Peer> found;
  if (::sendto(nl, &msg, sizeof(msg), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) ==
      static_cast<ssize_t>(sizeof(msg))) {
    // One answer: the socket's inet_diag_msg, or an error message.
    alignas(nlmsghdr) char buf[8192];
    timeval tv{1, 0};
    ::setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ssize_t n = ::recv(nl, buf, sizeof(buf), 0);
    auto* h = reinterpret_cast<nlmsghdr*>(buf);
    if (n > 0 && NLMSG_OK(h, static_cast<unsigned>(n)) && h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
        h->nlmsg_len >= NLMSG_LENGTH(sizeof(inet_diag_msg))) {
      auto* d = static_cast<inet_diag_msg*>(NLMSG_DATA(h));
      found = Peer{static_cast<uid_t>(d->idiag_uid), static_cast<unsigned long>(d->idiag_inode)};
    }
  }
  ::close(nl);
  return found;
}

// The pid of a process of user `uid` holding socket `inode`; 0 if none.
pid_t ProcessOfSocket(uid_t uid, unsigned long inode) {
  const std::string target = "socket:[" + std::to_string(inode) + "]";
  std::error_code ec;
  for (const auto& proc : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = proc.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat st {};
    if (::stat(proc.path().c_str(), &st) != 0 || st.st_uid != uid) continue;
    std::error_code fd_ec;
    for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", fd_ec)) {
      char link[64];
      ssize_t n = ::readlink(fd.path().c_str(), link, sizeof(link));
      if (n > 0 && std::string_view(link, static_cast<size_t>(n)) == target)
        return static_cast<pid_t>(std::stol(name));
    }
  }
  return 0;
}

}  // namespace

bool PeerInGroup(const Peer& peer, gid_t gid) {
  pid_t pid = peer.inode != 0 ? ProcessOfSocket(peer.uid, peer.inode) : 0;
  if (pid == 0) return UserInGroup(peer.uid, gid);
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    std::istringstream fields(line);
    std::string key;
    fields >> key;
    if (key == "Gid:") {  // real, effective, saved, filesystem: the kernel checks the last
      long g = -1;
      for (int i = 0; i < 4 && (fields >> g); ++i) {
      }
      if (g == static_cast<long>(gid)) return true;
    } else if (key == "Groups:") {
      long g;
      while (fields >> g) {
        if (g == static_cast<long>(gid)) return true;
      }
    }
  }
  return false;
}

bool UserInGroup(uid_t uid, gid_t gid) {
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) return false;
  if (pw.pw_gid == gid) return true;
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  if (::getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) {
    if (n <= 0 || n > 65536) return false;
    groups.resize(static_cast<size_t>(n));
    if (::getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) return false;
  }
  for (int i = 0; i < n; ++i) {
    if (groups[static_cast<size_t>(i)] == gid) return true;
  }
  return false;
}

}  // namespace perch::peers
