// How perchctl shows what perchd answers: sizes, counts and durations for
// people, tables, and the stats and warm messages as text or JSON.
// Pure functions of their arguments (PrintStats and Table write to stdout).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "proto/perch.pb.h"

namespace perch::ctl {

std::string Size(uint64_t bytes);                   // "1.5 MiB"
std::string Count(uint64_t n);                      // "1,234,567"
std::string Ratio(uint64_t hits, uint64_t misses);  // "87.5 %" ("-" with neither)
std::string Duration(double seconds);               // "1.2 ms"
// The upper bound of the bucket holding quantile `q` (0 when empty).
double Quantile(const v1::Histogram& h, double q);
// Prints rows with each column padded to its widest cell; `align` has an 'l'
// (left) or 'r' (right, for numbers) per column.
void Table(const std::vector<std::vector<std::string>>& rows, std::string_view align);

// `m` in the proto3 JSON mapping (field names as in perch.proto, zeros
// included), except that 64-bit integers are JSON numbers, not strings.
nlohmann::json ProtoJson(const google::protobuf::Message& m);
// `perchctl stats` for people.
void PrintStats(const v1::Stats& s);

}  // namespace perch::ctl
