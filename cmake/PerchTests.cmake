# How integration tests are registered with ctest (CONTRIBUTING.md "Tests").
#
# perch_integration_tests(TARGET [PROCESSORS n] [RESOURCE_LOCK name] [TIMEOUT s]
#                         [TEST_FILTER gtest-filter])
#
# Registers the gtest cases of TARGET as ctest tests labelled `integration`. These tests mostly
# wait (on servers, timeouts, the kernel), so scripts/test runs several at once, more than there
# are cores. That is safe because each test brings its own world: a temporary directory
# (TempDir), ports the kernel picks, its own control socket, mountpoint and federation.
#   PROCESSORS     the cores a test keeps busy while it runs (the trainer's: one per rank). Such
#                  a test also takes the lock `cores`: CPU-bound tests run one at a time, never
#                  more of them than cores (at 3 tests per core, six trainer runs started at
#                  once, and one ran past its 300 s timeout); the builds that scripts/test runs
#                  at nice 19 use the cores they leave.
#   RESOURCE_LOCK  something the test cannot share with the tests that name the same lock (a
#                  fixed port, a path outside its TempDir, a setting of the whole machine);
#                  ctest runs them one at a time. Say in a comment what is shared. One lock, and
#                  not with PROCESSORS.
#   TIMEOUT        seconds per test (default: ctest's --timeout).
#   TEST_FILTER    only the gtest cases matching this filter; call again with the negative
#                  filter to give the rest of TARGET other properties.
include(GoogleTest)

# perch_unoptimized_test_programs(): the targets defined after it in the calling directory are
# compiled without optimization in the optimized builds (release, tsan). A test program's own
# files only drive the code under test, which keeps its -O2 (perch's libraries, tests/fakes, the
# harness libraries; call this after defining those): a test file of gtest cases compiles in
# about 35 % less CPU at -O0 (control_test.cc 9.0 -> 5.7 s, filesystem_test.cc 5.0 -> 3.4 s;
# 2026-11-27, AMD EPYC), and ~90 of them are most of the release build's test code.
macro(perch_unoptimized_test_programs)
  add_compile_options($<$<CONFIG:RelWithDebInfo>:-O0>)
endmacro()

function(perch_integration_tests target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "PROCESSORS;RESOURCE_LOCK;TIMEOUT;TEST_FILTER" "")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "perch_integration_tests: unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  set(props LABELS integration)
  if(arg_PROCESSORS AND arg_RESOURCE_LOCK)
    message(FATAL_ERROR "perch_integration_tests(${target}): PROCESSORS takes the lock `cores`; "
      "RESOURCE_LOCK ${arg_RESOURCE_LOCK} would be a second")
  endif()
  if(arg_PROCESSORS)
    list(APPEND props PROCESSORS ${arg_PROCESSORS} RESOURCE_LOCK cores)
  endif()
  if(arg_RESOURCE_LOCK)
    list(APPEND props RESOURCE_LOCK ${arg_RESOURCE_LOCK})
  endif()
  if(arg_TIMEOUT)
    list(APPEND props TIMEOUT ${arg_TIMEOUT})
  endif()
  set(filter)
  if(arg_TEST_FILTER)
    set(filter TEST_FILTER ${arg_TEST_FILTER})
  endif()
  gtest_discover_tests(${target} ${filter} DISCOVERY_TIMEOUT 60 PROPERTIES ${props})
endfunction()
