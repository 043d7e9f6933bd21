#include "daemon/core/types.h"

namespace perch::core {

Result<ObjectPath> ObjectPath::Parse(std::string_view path) {
  if (path.empty() || path.front() != '/') {
    return InvalidArgumentError("object path must be absolute: '" + std::string(path) + "'");
  }
  if (path.find('\0') != std::string_view::npos) {
    return InvalidArgumentError("object path contains a NUL byte");
  }
  std::string out;
  out.reserve(path.size());
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') {
      ++i;
    }
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) {
      j = path.size();
    }
    std::string_view seg = path.substr(i, j - i);
    if (!seg.empty()) {
      if (seg == "." || seg == "..") {
        return InvalidArgumentError("object path may not contain '.' or '..' segments: '" +
                                    std::string(path) + "'");
      }
      out += '/';
      out += seg;
    }
    i = j;
  }
  if (out.empty()) {
    out = "/";
  }
  return ObjectPath(std::move(out));
}

std::string_view ObjectPath::Name() const {
  if (IsRoot()) {
    return {};
  }
  return std::string_view(path_).substr(path_.rfind('/') + 1);
}

ObjectPath ObjectPath::Parent() const {
  size_t pos = path_.rfind('/');
  if (pos == 0) {
    return ObjectPath();
  }
  return ObjectPath(path_.substr(0, pos));
}

Result<ObjectPath> ObjectPath::Child(std::string_view name) const {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos) {
    return InvalidArgumentError("invalid path segment '" + std::string(name) + "'");
  }
  std::string p = IsRoot() ? std::string() : path_;
  p += '/';
  p += name;
  return ObjectPath(std::move(p));
}

std::optional<ObjectPath> ObjectPath::RelativeTo(const ObjectPath& prefix) const {
  if (!HasPrefix(prefix)) return std::nullopt;
  if (prefix.IsRoot()) return *this;
  // Both are normalised: what follows the prefix is "" or starts with '/'.
  if (path_.size() == prefix.path_.size()) return ObjectPath();
  return ObjectPath(path_.substr(prefix.path_.size()));
}

bool ObjectPath::HasPrefix(const ObjectPath& prefix) const {
  if (prefix.IsRoot()) {
    return true;
  }
  if (path_.size() < prefix.path_.size() || path_.compare(0, prefix.path_.size(), prefix.path_)) {
    return false;
  }
  return path_.size() == prefix.path_.size() || path_[prefix.path_.size()] == '/';
}

std::vector<std::string_view> ObjectPath::Segments() const {
  std::vector<std::string_view> out;
  std::string_view p(path_);
  size_t i = 1;
  while (i < p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string_view::npos) {
      j = p.size();
    }
    out.push_back(p.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

}  // namespace perch::core
