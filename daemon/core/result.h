// Result<T>: a value or a non-OK Status (C++20 has no std::expected).
//
//   Result<FileAttr> r = ...;
//   if (!r.ok()) return r.status();
//   use(*r);
#pragma once

#include <optional>
#include <utility>

#include "daemon/core/status.h"

namespace perch::core {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (status_.ok()) {
      status_ = InternalError("Result constructed from an OK status without a value");
    }
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

  void IgnoreError() const {}

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace perch::core

// Evaluates `expr` (a Status); returns it from the current function if not OK.
#define PERCH_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::perch::core::Status perch_s_ = (expr); \
    if (!perch_s_.ok()) return perch_s_;     \
  } while (0)
