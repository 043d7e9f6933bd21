// The state of one RangeReader read, probe or digest request, shared by
// range_reader.cc and range_reader_vouch.cc. Loop thread only.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/http/range_reader.h"

namespace perch::http {

struct RangeReader::Op {
  core::ObjectPath fed_path;
  core::ObjectVersion version;
  core::ByteRange range;
  core::Deadline deadline;
  std::function<void(core::Result<core::FetchedBytes>)> done;
  bool no_store = false;  // an answer said Cache-Control: no-store or private
  int64_t max_age = -1;   // the least freshness lifetime an answer gave (Cache-Control)
  std::function<void(core::Result<core::FileAttr>)> head_done;  // set for a probe (Head())
  HttpHead probe;  // a probe's answer head, kept when the transfer is cut short

  std::shared_ptr<const NamespaceEntry> ns;
  std::shared_ptr<const NamespaceEntry> direct;  // the origins, once the read went to them
  // The read went to the origins first (Start): the named servers come after
  // them if they fail it, whatever their answer.
  bool named_after_direct = false;
  std::set<std::string> failed;  // servers that failed this read by their fault
  FailoverPlan plan;
  std::string buffer;  // bytes of `range` received so far, in order
  std::vector<std::string> auth;
  std::map<std::string, std::string> etag_by_server;

  // The check of a whole object against a digest that vouches for it
  // (range_reader_vouch.cc).
  bool verify = false;      // a read of a whole object: checked before it is delivered
  bool body_ready = false;  // its body is whole and waits for the check
  bool vouching = false;    // a digest request is out, waits for a slot, or the origins
  uint64_t vouch_seq = 0;   // tells an answer which request it is
  struct Claim {
    std::string source;                                // the server that stated it
    bool origin = false;                               // one of the namespace's origins
    std::vector<core::ObjectDigest> digests;           // raw readings perch can check; empty: none
  } vouch;                                             // the last usable answer
  std::set<std::string> vouch_tried;                   // servers asked for the digest in this read
  std::shared_ptr<const NamespaceEntry> vouch_direct;  // the origins, once asked for
  bool vouch_direct_asked = false;
  int vouch_mismatches = 0;  // bodies that did not match `vouch`
  int mismatches_seen = 0;   // bodies of this read that failed a digest
  // Of each: its sender and the digests it failed (another server's). The
  // sender is blamed (ServerTally) once a body proves one of them right.
  std::vector<std::pair<std::string, std::vector<core::ObjectDigest>>> failed_bodies;
  int vouch_errors = 0;  // digest requests that failed (not a server's plain "no digest")
  std::set<std::string> vouch_errored;      // the servers of those, asked again (RetryVouch)
  int vouch_rounds = 0;                     // rounds of asking again
  std::vector<core::ObjectDigest> vouched;  // what the body matched, under its true name
  std::string unverified;                   // delivered with no digest to check it against: why
  // Vouch(): the digest alone, from a server other than `vouch_exclude`.
  std::function<void(core::Result<std::vector<core::ObjectDigest>>)> vouch_done;
  std::set<std::string> vouch_exclude;
  bool vouch_origin_first = false;            // Vouch(): the origins before the named servers
  std::vector<std::string> vouch_algorithms;  // Vouch(): what Want-Digest names
  // Per attempt.
  uint64_t attempt_seq = 0;  // tells a timer which attempt it was set for
  uint64_t transfer = 0;     // the CurlLoop's id, for Cancel
  core::Clock::time_point started;
  bool first_byte_late = false;  // abandoned: no answer within the first-byte time
  bool asked_fresh = false;      // the director was asked about this very path
  std::string url;
  std::string server;
  size_t server_index = 0;  // `server`'s index in the entry it was named in
  uint64_t attempt_start = 0;
  bool head_checked = false;
  core::Status head_error;
  std::string error_body;
};

}  // namespace perch::http
