// perchd's settings, one row each: the one table that gives every setting's
// TOML key, command-line flag, default and help text. DaemonConfig's fields
// (daemon/config.h) are declared from it, the TOML reader reads its keys,
// perchd's command line (perchd/flags.cc) and `perchd --help` offer its flags,
// and docs/configuration.md's key table is checked against it
// (ConfigDocTest). Adding a setting is adding a row here (and a line in
// systemd/perchd.toml.example, which ConfigExampleTest asks for).
//
// A row: X(KIND, TYPE, FIELD, KEY, FLAG, DEFAULT, UNSET, HELP)
//   KIND     how the value is written, in the file and after the flag:
//            Str (text), Size ("4M", or bytes), Time ("30s", "500ms", or
//            seconds), Count (a positive integer), Real (a number), Flag (a
//            switch: true or false in the file; the flag takes no value and
//            sets true, or false when it is named --no-...).
//   TYPE     the field's C++ type; FIELD its name in DaemonConfig.
//   KEY      the TOML key; "" for a setting of the command line only.
//   FLAG     the CLI11 option name(s); "" for a setting of the file only.
//   DEFAULT  the field's initial value (no commas: it is a macro argument).
//   UNSET    what the default means, where its value alone does not say
//            ("" for a count of 0 or an empty text say nothing); "" = show
//            the value.
//   HELP     one sentence for --help and the docs' table.
// Cross-field rules and bounds are Validate()'s (daemon/config.cc); tables of
// the file ([[mount]], [tokens]) and the two positional arguments are read by
// hand beside these.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "daemon/core/defaults.h"

// clang-format off
#define PERCH_CONFIG_KEYS(X)                                                                     \
  X(Str, std::string, federation_url, "federation", "", "", "none",                              \
    "the federation to mount: pelican://host/path, osdf:///path or http(s)://host:port/path "    \
    "(or the first argument, or [[mount]] tables)")                                              \
  X(Str, std::string, mountpoint, "mountpoint", "", "", "none",                                  \
    "an existing empty directory to mount it at (or the second argument)")                       \
  X(Str, std::string, cache_dir, "cache_dir", "--cache-dir", "/var/cache/perch", "",             \
    "cache directory (block files and index)")                                                   \
  X(Size, uint64_t, cache_size, "cache_size", "--cache-size", 10ULL << 30, "",                   \
    "cache quota, e.g. 50G; capped to what the disk holds")                                      \
  X(Size, uint64_t, block_size, "block_size", "--block-size",                                    \
    ::perch::core::kDefaultBlockSize, "",                                                        \
    "large objects are cached in blocks of this size, 64K to 256M")                              \
  X(Real, double, high_watermark, "high_watermark", "", 0.95, "",                                \
    "eviction starts when the cache holds more than this share of its quota")                    \
  X(Real, double, low_watermark, "low_watermark", "", 0.85, "",                                  \
    "eviction stops when the cache holds this share of its quota")                               \
  X(Time, std::chrono::milliseconds, op_timeout, "op_timeout", "--op-timeout",                   \
    ::perch::core::kDefaultOpTimeout, "",                                                        \
    "every filesystem request is answered within this, at least 100ms")                          \
  X(Count, unsigned, fuse_threads, "fuse_threads", "", 32, "", "FUSE worker threads")            \
  X(Count, unsigned, net_threads, "net_threads", "", 0, "one per 2 cores, 2 to 8",               \
    "network loops (threads that run HTTP transfers); reads spread over them by path")           \
  X(Count, size_t, max_requests_in_flight, "max_requests_in_flight", "",                         \
    ::perch::core::kDefaultMaxRequestsInFlight, "",                                              \
    "the fetch budget in requests (demand reads first; prefetch gets at most 3/4)")              \
  X(Size, uint64_t, max_bytes_in_flight, "max_bytes_in_flight", "", 1ULL << 30, "",              \
    "the fetch budget in bytes")                                                                 \
  X(Flag, bool, prefetch, "prefetch", "--no-prefetch", true, "",                                 \
    "read-ahead, directory prefetch and hints (--no-prefetch: none, for benchmarks)")            \
  X(Size, uint64_t, readahead, "readahead", "", 64ULL << 20, "",                                 \
    "largest read-ahead window per open file")                                                   \
  X(Count, size_t, prefetch_dir_max_entries, "prefetch_dir_max_entries", "", 4096, "",           \
    "larger directories are not prefetched")                                                     \
  X(Count, size_t, hint_window, "hint_window", "", 512, "",                                      \
    "hinted files fetched ahead of the reader")                                                  \
  X(Flag, bool, fuse_no_open, "fuse_no_open", "", true, "",                                      \
    "the kernel opens files without asking perchd when it can")                                  \
  X(Flag, bool, fuse_passthrough, "fuse_passthrough", "", true, "",                              \
    "the kernel reads complete cached large objects itself")                                     \
  X(Size, uint64_t, fuse_read_ahead, "fuse_read_ahead", "", 1ULL << 20, "",                      \
    "the mount's kernel read-ahead, at most 256M (root only; 0 keeps the kernel's 128K)")        \
  X(Flag, bool, verify_digests, "verify_digests", "--no-verify-digests", true, "",               \
    "check every object against a digest another server (or its origin) states: small ones as "  \
    "fetched, larger ones whole before their last byte is served")                               \
  X(Count, uint64_t, digest_requests_per_origin, "digest_requests_per_origin", "", 3, "",        \
    "digest requests (Want-Digest) in flight at once per origin, its caches' relays included "   \
    "(below XRootD's xrootd.chksum max, docs/quirks.md)")                                        \
  X(Count, uint64_t, digest_requests_per_server, "digest_requests_per_server", "", 1, "",        \
    "digest requests in flight at once at any one server (XRootD 5.5 may crash computing a "    \
    "digest it has not stored; two at once crash it within a few hundred, docs/quirks.md)")     \
  X(Size, uint64_t, scrub_rate, "scrub_rate", "--scrub-rate", 4ULL << 20, "",                    \
    "the background scrub reads cached blocks again at this many bytes a second and drops bad "  \
    "ones (0: off)")                                                                             \
  X(Time, std::chrono::seconds, scrub_start_delay, "scrub_start_delay", "",                      \
    std::chrono::seconds{300}, "", "the background scrub begins this long after start")          \
  X(Time, std::chrono::milliseconds, version_check_interval, "version_check_interval", "",       \
    std::chrono::milliseconds{5000}, "",                                                         \
    "confirm a partly cached file's version with the origin before fetching more of it, at "     \
    "most this often (0: every time)")                                                           \
  X(Time, std::chrono::seconds, dir_ttl, "dir_ttl", "", std::chrono::seconds{300}, "",           \
    "how long a directory listing is trusted")                                                   \
  X(Time, std::chrono::seconds, file_ttl, "file_ttl", "", std::chrono::seconds{3600}, "",        \
    "how long a file's attributes are trusted")                                                  \
  X(Time, std::chrono::seconds, negative_ttl, "negative_ttl", "", std::chrono::seconds{30}, "",  \
    "how long a missing name is trusted")                                                        \
  X(Str, std::string, token_file, "token_file", "--token-file", "", "none",                      \
    "bearer token file for protected namespaces")                                                \
  X(Str, std::string, protected_group, "protected_group", "--protected-group", "", "root only",  \
    "group that may read namespaces requiring a token")                                          \
  X(Str, std::string, ca_file, "ca_file", "--ca-file", "", "system CAs",                         \
    "extra CA bundle for the federation's https servers")                                        \
  X(Str, std::string, log_level, "log_level", "--log-level", "info", "",                         \
    "trace, debug, info, warn, error, critical or off")                                          \
  X(Str, std::string, control_address, "control", "--control", "",                              \
    "unix:/run/perch/perchd.sock as root, else in $XDG_RUNTIME_DIR/perch",                       \
    "control API address (perchctl's): unix:PATH or tcp:127.0.0.1:PORT")                         \
  X(Str, std::string, control_group, "control_group", "--control-group", "", "perchd's group",   \
    "group owning the control socket (mode 0660): its members may use perchctl")                 \
  X(Str, std::string, metrics_address, "metrics", "--metrics", "", "off",                        \
    "serve Prometheus metrics at http://IP:PORT/metrics (loopback)")                             \
  X(Flag, bool, metrics_allow_remote, "metrics_allow_remote", "--metrics-allow-remote", false,   \
    "", "allow metrics on a non-loopback address (the endpoint has no authentication)")          \
  X(Str, std::string, http_address, "http", "--http", "", "off",                                 \
    "serve the mounts over HTTP at IP:PORT (loopback; GET, HEAD, PROPFIND)")                     \
  X(Flag, bool, http_allow_remote, "http_allow_remote", "--http-allow-remote", false, "",        \
    "allow the HTTP endpoint on a non-loopback address (protected namespaces stay refused)")     \
  X(Count, size_t, http_connections_per_user, "http_connections_per_user",                       \
    "--http-connections-per-user", 16, "",                                                       \
    "connections to the HTTP endpoint one user may hold at once")                                \
  X(Time, std::chrono::milliseconds, http_request_timeout, "http_request_timeout",               \
    "--http-request-timeout", std::chrono::milliseconds{10000}, "",                              \
    "a request to the HTTP endpoint must arrive whole within this, 100ms to 1h")                 \
  X(Flag, bool, allow_nonempty_mountpoint, "allow_nonempty_mountpoint",                          \
    "--allow-nonempty-mountpoint", false, "",                                                    \
    "mount over a directory that has entries (they are hidden while mounted)")                   \
  X(Flag, bool, foreground, "", "-f,--foreground", false, "",                                    \
    "stay in the foreground (systemd, debugging)")
// clang-format on
