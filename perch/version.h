// perch's version: project(VERSION) in the top-level CMakeLists.txt, the one place the number is
// written. Each installed program prints it (`<program> --version`) and perchd reports it over
// the control API.
//
// Defined in a generated file of its own (cmake/version.cc.in, the library perch_version), not
// here, so that a program can be linked again with another version without compiling anything
// else: the upgrade test's perchd_next (tests/integration/CMakeLists.txt) is perchd's objects
// and one other definition of this symbol.
#pragma once

namespace perch {

extern const char kVersion[];

}  // namespace perch
