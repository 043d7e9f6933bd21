#include "devfed/faults.h"

#include <algorithm>
#include <cctype>
#include <optional>

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

bool ResponseFaults::StartResponse(const std::string& head) {
  if (head.rfind("HTTP/1.", 0) != 0 || head.size() < 12 || methods_.empty()) return false;
  int status = std::atoi(head.c_str() + 9);
  if (status < 200) return false;  // 1xx interim answers: not followed
  std::string method = methods_.front();
  methods_.pop_front();
  body_left_ = 0;
  if (method == "HEAD" || status == 204 || status == 304) return true;
  auto len = BodyLength(head);
  if (!len) return false;
  body_left_ = *len;
  if (body_left_ == 0) return true;
  double u = std::uniform_real_distribution<double>(0, 1)(rng_);
  if (u < options_.cut) {
    pending_ = Fault::kCut;
  } else if (u < options_.cut + options_.reset) {
    pending_ = Fault::kReset;
  } else if (u < options_.cut + options_.reset + options_.stall) {
    pending_ = Fault::kStall;
  } else {
    return true;
  }
  uint64_t offset = std::uniform_int_distribution<uint64_t>(0, body_left_ - 1)(rng_);
  fault_at_ = body_left_ - offset;
  return true;
}

void ResponseFaults::Count(uint64_t body_bytes, Fault fault) {
  if (counters_ == nullptr) return;
  counters_->body_bytes += body_bytes;
  if (fault == Fault::kCut) counters_->cut++;
  if (fault == Fault::kReset) counters_->reset++;
  if (fault == Fault::kStall) counters_->stall++;
}

ResponseFaults::Decision ResponseFaults::OnResponseBytes(std::string_view data) {
  size_t pass = 0;
  std::string_view rest = data;
  while (!rest.empty() && !lost_) {
    if (body_left_ > 0) {
      uint64_t n = std::min<uint64_t>(rest.size(), body_left_);
      if (pending_ != Fault::kNone && n >= body_left_ - fault_at_) {
        Fault f = pending_;
        pending_ = Fault::kNone;
        lost_ = true;  // the connection ends (or hangs) here
        Count(body_left_ - fault_at_, f);
        return {pass + static_cast<size_t>(body_left_ - fault_at_), f};
      }
      Count(n, Fault::kNone);
      body_left_ -= n;
      pass += n;
      rest.remove_prefix(n);
      continue;
    }
    bool complete = false;
    size_t took = TakeHeader(resp_head_, rest, &complete);
    pass += took;
    rest.remove_prefix(took);
    if (!complete) {
      if (resp_head_.size() > kMaxHeader) lost_ = true;
      break;
    }
    if (!StartResponse(resp_head_)) lost_ = true;
    resp_head_.clear();
  }
  return {data.size(), Fault::kNone};
}

}  // namespace perch::devfed
