// Who is on the other end of a loopback TCP connection. perchd runs as root
// on a node shared by many users; its HTTP endpoint hands a protected
// namespace's bytes only to the users the mount would (root, perchd's own
// user, members of protected_group). A loopback peer's socket is one of this
// node's, so the kernel knows its owner: perch asks sock_diag (NETLINK) for
// the socket with exactly the connection's four-tuple and reads its uid.
//
// Group membership is the peer process's, as the kernel checks it for the
// mount: the process holding the peer socket is found among the peer user's
// processes (/proc/PID/fd), and its fsgid and supplementary groups are read
// from /proc/PID/status. Only when no such process is found (it exited) does
// the user database decide.
//
// Thread-safety: free functions, safe from any thread (one netlink socket
// per call).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace perch::peers {

struct Peer {
  uid_t uid = 0;        // the peer socket's owner
  unsigned long inode;  // the peer socket's inode (0 if unknown)
};

// The peer socket of connected TCP socket `fd`; nullopt when the peer is not
// on loopback or the kernel does not say.
std::optional<Peer> LoopbackPeer(int fd);

// The same for the connection from local_ip:local_port to peer_ip:peer_port
// (as libcurl names a connection's ends).
std::optional<Peer> LoopbackPeerOf(const std::string& local_ip, int local_port,
                                   const std::string& peer_ip, int peer_port);

// Whether the process of `peer` (see above) is in group `gid`.
bool PeerInGroup(const Peer& peer, gid_t gid);

// Whether user `uid` is a member of group `gid` (primary or supplementary)
// in the user database.
bool UserInGroup(uid_t uid, gid_t gid);

}  // namespace perch::peers
