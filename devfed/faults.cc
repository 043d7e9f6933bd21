#include "devfed/faults.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <utility>

namespace perch::devfed {

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The value of header `name` (lower case) in a header block, if present.
std::optional<std::string> HeaderValue(const std::string& lower_head, const std::string& name) {
  size_t at = lower_head.find("\r\n" + name + ":");
  if (at == std::string::npos) return std::nullopt;
  size_t start = at + 3 + name.size();
  size_t end = lower_head.find("\r\n", start);
  std::string v = lower_head.substr(start, end - start);
  v.erase(0, v.find_first_not_of(" \t"));
  v.erase(v.find_last_not_of(" \t") + 1);
  return v;
}

// The body length a header block announces; nullopt when it cannot be
// followed (chunked, or a Content-Length that is not a plain number).
std::optional<uint64_t> BodyLength(const std::string& head) {
  std::string lower = Lower(head);
  if (auto te = HeaderValue(lower, "transfer-encoding");
      te && te->find("chunked") != std::string::npos) {
    return std::nullopt;
  }
  auto cl = HeaderValue(lower, "content-length");
  if (!cl) return 0;
  if (cl->empty() || cl->size() > 18 || !std::all_of(cl->begin(), cl->end(), ::isdigit))
    return std::nullopt;
  return std::stoull(*cl);
}

// Appends `data` to `head` until a header block ends; returns how many bytes
// of `data` it took (0 if the block is still incomplete: then all were taken).
size_t TakeHeader(std::string& head, std::string_view data, bool* complete) {
  size_t before = head.size();
  head.append(data);
  size_t end = head.find("\r\n\r\n", before >= 3 ? before - 3 : 0);
  *complete = end != std::string::npos;
  if (!*complete) return data.size();
  head.resize(end + 4);
  return end + 4 - before;
}

}  // namespace

void ResponseFaults::OnRequestBytes(std::string_view data) {
  while (!data.empty() && !lost_) {
    if (req_body_left_ > 0) {
      uint64_t n = std::min<uint64_t>(data.size(), req_body_left_);
      req_body_left_ -= n;
      data.remove_prefix(n);
      continue;
    }
    bool complete = false;
    data.remove_prefix(TakeHeader(req_head_, data, &complete));
    if (!complete) {
      if (req_head_.size() > kMaxHeader) lost_ = true;
      return;
    }
    methods_.push_back(req_head_.substr(0, req_head_.find(' ')));
    auto len = BodyLength(req_head_);
    req_head_.clear();
    if (!len) {
      lost_ = true;
      return;
    }
    req_body_left_ = *len;
  }
}

bool ResponseFaults::StartResponse(std::string& head) {
  if (head.size() > kMaxHeader || head.rfind("HTTP/1.", 0) != 0 || head.size() < 12 ||
      methods_.empty()) {
    return false;
  }
  int status = std::atoi(head.c_str() + 9);
  if (status < 100 || status == 101) return false;  // garbage, or no longer HTTP
  if (status < 200) return true;  // an interim answer (100 Continue): the final one follows
  std::string method = methods_.front();
  methods_.pop_front();
  if (!options_.cache_control.empty()) {
    head.insert(head.size() - 2, "Cache-Control: " + options_.cache_control + "\r\n");
  }
  body_left_ = 0;
  if (method == "HEAD" || status == 204 || status == 304) return true;
  auto len = BodyLength(head);
  if (!len) return false;
  body_left_ = *len;
  if (body_left_ > 0) Draw(method == "GET" && status / 100 == 2);
  return true;
}

void ResponseFaults::Draw(bool corruptible) {
  const FaultOptions& f = options_.faults;
  double u = std::uniform_real_distribution<double>(0, 1)(rng_);
  if (u < f.cut) {
    pending_ = Fault::kCut;
  } else if (u < f.cut + f.reset) {
    pending_ = Fault::kReset;
  } else if (u < f.cut + f.reset + f.stall) {
    pending_ = Fault::kStall;
  } else if (u < f.cut + f.reset + f.stall + f.corrupt && corruptible) {
    pending_ = Fault::kCorrupt;
  } else {
    return;
  }
  uint64_t offset = std::uniform_int_distribution<uint64_t>(0, body_left_ - 1)(rng_);
  fault_at_ = body_left_ - offset;
}

void ResponseFaults::Count(uint64_t body_bytes, Fault fault) {
  if (counters_ == nullptr) return;
  counters_->body_bytes += body_bytes;
  if (fault == Fault::kCut) counters_->cut++;
  if (fault == Fault::kReset) counters_->reset++;
  if (fault == Fault::kStall) counters_->stall++;
  if (fault == Fault::kCorrupt) counters_->corrupt++;
}

ResponseFaults::Output ResponseFaults::OnResponseBytes(std::string_view data) {
  Output out;
  std::string_view rest = data;
  while (!rest.empty() && !lost_) {
    if (body_left_ > 0) {
      uint64_t n = std::min<uint64_t>(rest.size(), body_left_);
      uint64_t hit = body_left_ - fault_at_;  // body bytes before the pending fault's point
      bool breaks =
          pending_ == Fault::kCut || pending_ == Fault::kReset || pending_ == Fault::kStall;
      if (breaks && hit <= n) {
        out.bytes.append(rest.substr(0, hit));
        out.fault = std::exchange(pending_, Fault::kNone);
        lost_ = true;  // the connection ends (or hangs) here
        Count(hit, out.fault);
        return out;
      }
      out.bytes.append(rest.substr(0, n));
      if (pending_ == Fault::kCorrupt && hit < n) {
        out.bytes[out.bytes.size() - n + hit] ^= static_cast<char>(0xFF);
        Count(n, std::exchange(pending_, Fault::kNone));
      } else {
        Count(n, Fault::kNone);
      }
      body_left_ -= n;
      rest.remove_prefix(n);
      continue;
    }
    bool complete = false;
    rest.remove_prefix(TakeHeader(resp_head_, rest, &complete));
    if (!complete && resp_head_.size() <= kMaxHeader) break;  // held for the next bytes
    if (!complete || !StartResponse(resp_head_)) lost_ = true;
    out.bytes += resp_head_;
    resp_head_.clear();
  }
  if (lost_) {  // the rest passes untouched, with a header block held before it was lost
    out.bytes.insert(0, resp_head_);
    resp_head_.clear();
    out.bytes.append(rest);
  }
  return out;
}

std::string ResponseFaults::OnResponseEnd() { return std::exchange(resp_head_, {}); }

}  // namespace perch::devfed
