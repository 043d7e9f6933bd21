// Issue #29 item 3: systemd/perchd.service, run. Its capability bounding set
// is enough for perchd, each capability in it is needed, and the system
// calls perchd makes pass the unit's seccomp settings.
//
// perchd runs under setpriv(1) with exactly the unit's
// CapabilityBoundingSet= (read from the unit file, so that the two cannot
// drift), no inheritable or ambient capabilities, and no_new_privs where the
// unit sets NoNewPrivileges=, as systemd would start it for root. Against a
// real federation (perch-devfed: a public and a protected namespace) it
// mounts with allow_other, reads byte-exact through the mount (also as user
// nobody, and through FUSE passthrough where the kernel offers it), gives its
// control socket to group `users` (control_group), serves the protected
// namespace over its HTTP endpoint to a process in group `users`
// (protected_group) and to no other, and stops cleanly, unmounted. Then once
// for each capability of the set, with the set less that one: what the
// capability is for fails (no mount, no start, or the endpoint refuses the
// group's member). A capability added to the unit without such a case here
// fails EveryCapabilityOfTheUnitHasACase.
//
// The seccomp settings (SystemCallFilter=, RestrictAddressFamilies=,
// MemoryDenyWriteExecute=, RestrictNamespaces=) only systemd as PID 1
// applies, so they are checked, not applied: perchd runs the same way under
// strace(1), and every call it makes after its execve must be one the unit's
// filter allows (its groups expanded by `systemd-analyze syscall-filter`),
// every socket of an allowed family, no mapping writable and executable, no
// namespace. That covers the paths the test takes, not every path. Not
// reproduced at all: the device cgroup (DevicePolicy=, DeviceAllow=) and the
// UTS namespace of ProtectHostname=.
#include <grp.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/devfed/devfed_harness.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/stats_json.h"
#include "tests/integration/test_tree.h"

#ifndef PERCH_UNIT_PATH
#error "PERCH_UNIT_PATH must name systemd/perchd.service"
#endif

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kSetpriv[] = "/usr/bin/setpriv";
constexpr char kRunuser[] = "/usr/sbin/runuser";
constexpr char kCurl[] = "/usr/bin/curl";
constexpr char kStrace[] = "/usr/bin/strace";
constexpr char kSystemdAnalyze[] = "/usr/bin/systemd-analyze";
// A group root is not in: giving it the control socket takes CAP_CHOWN.
constexpr char kGroup[] = "users";

// What a capability of the unit is for: how perchd fails without it.
enum class Without {
  kNoMount,           // mount(2) fails: perchd exits before mounting
  kNoControlGroup,    // chown(2) of the control socket fails: perchd exits
  kNoProtectedGroup,  // the endpoint cannot see the peer's groups: 403
};

struct Need {
  const char* name;  // as the unit writes it
  int number;        // <linux/capability.h>
  Without without;
};

constexpr Need kNeeds[] = {
    {"CAP_SYS_ADMIN", CAP_SYS_ADMIN, Without::kNoMount},
    {"CAP_CHOWN", CAP_CHOWN, Without::kNoControlGroup},
    {"CAP_DAC_READ_SEARCH", CAP_DAC_READ_SEARCH, Without::kNoProtectedGroup},
    {"CAP_SYS_PTRACE", CAP_SYS_PTRACE, Without::kNoProtectedGroup},
};

void PrintTo(const Need& need, std::ostream* os) { *os << need.name; }

const Need* FindNeed(const std::string& cap) {
  for (const Need& n : kNeeds) {
    if (cap == n.name) return &n;
  }
  return nullptr;
}

// What the unit's [Service] section asks of the kernel, as far as this test
// applies it (capabilities, no_new_privs) or checks it (seccomp).
struct UnitSettings {
  std::vector<std::string> bounding_set;  // "CAP_SYS_ADMIN", ...
  bool no_new_privileges = false;
  std::vector<std::string> syscall_filters;  // each SystemCallFilter= value, in order
  std::set<std::string> address_families;    // RestrictAddressFamilies= (allowed)
  bool memory_deny_write_execute = false;
  bool restrict_namespaces = false;
  std::string error;  // what the unit says that this test cannot apply
};

bool IsTrue(const std::string& v) { return v == "yes" || v == "true" || v == "1" || v == "on"; }

std::vector<std::string> Words(const std::string& value) {
  std::istringstream in(value);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Reads `unit`. CapabilityBoundingSet= lines merge (an empty one resets);
// an inverted set ("~CAP_...") or address family list is an error: the test
// states what the unit allows, not what it takes away.
UnitSettings ReadUnit(const fs::path& unit) {
  UnitSettings out;
  std::ifstream in(unit);
  if (!in) {
    out.error = "cannot read " + unit.string();
    return out;
  }
  bool service = false, bounded = false;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line[0] == '[') {
      service = line.rfind("[Service]", 0) == 0;
      continue;
    }
    const size_t eq = line.find('=');
    if (!service || eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "NoNewPrivileges") {
      out.no_new_privileges = IsTrue(value);
    } else if (key == "MemoryDenyWriteExecute") {
      out.memory_deny_write_execute = IsTrue(value);
    } else if (key == "RestrictNamespaces") {
      out.restrict_namespaces = IsTrue(value);
    } else if (key == "SystemCallFilter") {
      out.syscall_filters.push_back(value);
    } else if (key == "RestrictAddressFamilies" || key == "CapabilityBoundingSet") {
      if (value.find('~') != std::string::npos) {
        out.error = key + "=" + value + ": write what is allowed, not what is not";
        return out;
      }
      if (key == "RestrictAddressFamilies") {
        for (const std::string& f : Words(value)) out.address_families.insert(f);
        continue;
      }
      bounded = true;
      const std::vector<std::string> caps = Words(value);
      if (caps.empty()) out.bounding_set.clear();
      for (const std::string& c : caps) {
        if (std::find(out.bounding_set.begin(), out.bounding_set.end(), c) ==
            out.bounding_set.end()) {
          out.bounding_set.push_back(c);
        }
      }
    }
  }
  if (!bounded) out.error = "the unit has no CapabilityBoundingSet=";
  return out;
}

// Adds the system calls `name` stands for to `out`: itself, or a group's
// members as systemd-analyze lists them (nested groups expanded).
void ExpandSyscalls(const std::string& name, std::set<std::string>* out) {
  if (name.empty() || name[0] != '@') {
    out->insert(name);
    return;
  }
  RunResult r = RunToExit(kSystemdAnalyze, {"syscall-filter", "--no-pager", name});
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || (line[0] != ' ' && line[0] != '\t')) continue;  // the group's own name
    const std::vector<std::string> words = Words(line);
    if (words.empty() || words[0][0] == '#') continue;
    ExpandSyscalls(words[0], out);
  }
}

// The system calls the unit's SystemCallFilter= lines allow: an allow list
// (with @default, which systemd adds to every allow list), less every line
// that starts with '~'. "" and an error in `why` for a deny list.
std::set<std::string> AllowedSyscalls(const UnitSettings& unit, std::string* why) {
  std::set<std::string> allowed;
  if (unit.syscall_filters.empty() || unit.syscall_filters[0].rfind('~', 0) == 0) {
    *why = "the unit's first SystemCallFilter= is not an allow list";
    return allowed;
  }
  ExpandSyscalls("@default", &allowed);
  for (const std::string& line : unit.syscall_filters) {
    const bool deny = line.rfind('~', 0) == 0;
    for (const std::string& name : Words(deny ? line.substr(1) : line)) {
      std::set<std::string> calls;
      ExpandSyscalls(name, &calls);
      for (const std::string& c : calls) {
        if (deny) {
          allowed.erase(c);
        } else {
          allowed.insert(c);
        }
      }
    }
  }
  return allowed;
}

// setpriv's spelling of a capability: CAP_SYS_ADMIN -> sys_admin.
std::string SetprivName(const std::string& cap) {
  std::string s = cap.substr(4);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// The value of `key` ("CapBnd") in /proc/PID/status ("" if none).
std::string ProcStatus(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream v(line.substr(key.size() + 1));
      std::string word;
      v >> word;
      return word;
    }
  }
  return "";
}

class SystemdUnitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unit_ = ReadUnit(PERCH_UNIT_PATH);
    ASSERT_EQ(unit_.error, "") << PERCH_UNIT_PATH;
    if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    for (const char* tool : {kSetpriv, kRunuser, kCurl}) {
      if (access(tool, X_OK) != 0) GTEST_SKIP() << tool << " is not installed";
    }
    const group* g = getgrnam(kGroup);
    if (g != nullptr) gid_ = g->gr_gid;  // before getgrnam's buffer is reused
    if (g == nullptr || getpwnam("nobody") == nullptr || getgrnam("nogroup") == nullptr) {
      GTEST_SKIP() << "needs group " << kGroup << ", user nobody and group nogroup";
    }
    work_ = std::make_unique<TempDir>("systemd-unit");
    const fs::path w = work_->path();
    CreateTestTree(w / "pub", {{"big.bin", 6 * 1024 * 1024 + 4321}, {"d/one.txt", 1000}});
    WriteLocalFile(w / "p/secret.txt", "protected bytes of /p\n");
    MakeReadableByXrootd(w);
    DevFed::Options opts;
    opts.exports.push_back({"/pub", (w / "pub").string(), false});
    opts.exports.push_back({"/p", (w / "p").string(), true});
    fed_ = std::make_unique<DevFed>(opts);
    ASSERT_EQ(fed_->Start(), "");
    mnt_ = w / "mnt";
    fs::create_directories(mnt_);
  }

  // The unit's bounding set less `drop` ("" drops nothing).
  std::vector<std::string> BoundingSet(const std::string& drop = "") const {
    std::vector<std::string> caps;
    for (const std::string& c : unit_.bounding_set) {
      if (c != drop) caps.push_back(c);
    }
    return caps;
  }

  // Starts perchd under setpriv with bounding set `caps` and everything the
  // unit's features need: control_group, the endpoint, protected_group;
  // `tracer` (a program and its arguments) runs setpriv if it is given.
  // Returns Start's answer ("" once mounted).
  std::string StartPerchd(const std::vector<std::string>& caps,
                          std::vector<std::string> tracer = {}) {
    std::string bounding = "-all";
    for (const std::string& c : caps) bounding += ",+" + SetprivName(c);
    const bool traced = !tracer.empty();
    std::vector<std::string> wrapper = std::move(tracer);
    wrapper.insert(wrapper.end(), {kSetpriv, "--bounding-set", bounding, "--inh-caps", "-all",
                                   "--ambient-caps", "-all"});
    if (unit_.no_new_privileges) wrapper.push_back("--no-new-privs");
    // The harness stops the tracer (strace blocks SIGTERM, then gets
    // SIGKILL), and a tracer killed leaves its tracee running: perchd dies
    // with it instead.
    if (traced) wrapper.insert(wrapper.end(), {"--pdeathsig", "KILL"});
    wrapper.push_back("--");
    perchd_.set_wrapper(wrapper);
    std::vector<std::string> args = {"--cache-dir",
                                     (work_->path() / "cache").string(),
                                     "--op-timeout",
                                     "20s",
                                     "--log-level",
                                     "info",
                                     "--namespace-token",
                                     "/p=" + fed_->TokenFile(),
                                     "--control",
                                     "unix:" + Socket(),
                                     "--control-group",
                                     kGroup,
                                     "--http",
                                     "127.0.0.1:0",
                                     "--protected-group",
                                     kGroup,
                                     fed_->FederationUrl() + "/",
                                     mnt_.string()};
    return perchd_.Start(args, mnt_, work_->path() / "perchd.log");
  }

  std::string Socket() const { return (work_->path() / "ctl.sock").string(); }

  nlohmann::json Ctl(std::vector<std::string> args) {
    return PerchctlJson(Socket(), std::move(args));
  }

  // The endpoint's answer to user nobody in group `group` for `path`: the
  // body, a space and the status code.
  std::string CurlAsNobody(const std::string& group, const std::string& path) {
    const std::string addr = Ctl({"health", "--json"})["http_address"].get<std::string>();
    RunResult r =
        RunToExit(kRunuser, {"-u", "nobody", "-g", group, "--", kCurl, "-sS", "--max-time", "60",
                             "-w", " %{http_code}", "http://" + addr + path});
    return r.output;
  }

  uint64_t WholeFiles() {
    nlohmann::json s = Ctl({"stats", "--json"});
    return s.contains("whole_files") ? s["whole_files"].get<uint64_t>() : 0;
  }

  bool PassthroughOffered() {
    return perchd_.Log().find("passthrough for complete cached objects") != std::string::npos;
  }

  // Reads pub/big.bin (cached complete by an earlier read) until an open of
  // it passes through: the kernel reads it from the cache, after the FUSE
  // device's backing-file ioctl. (The release of an earlier open reaches
  // perchd after close returns: until then the file is in cached mode.)
  bool ReadUntilPassthrough() {
    for (int i = 0; i < 50; ++i) {
      const uint64_t before = WholeFiles();
      EXPECT_TRUE(ReadLocalFile(mnt_ / "pub/big.bin") == Original("pub/big.bin"));
      if (WholeFiles() > before) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  std::string Original(const std::string& rel) { return ReadLocalFile(work_->path() / rel); }

  UnitSettings unit_;
  gid_t gid_ = 0;
  std::unique_ptr<TempDir> work_;
  std::unique_ptr<DevFed> fed_;
  fs::path mnt_;
  PerchdProcess perchd_;  // stopped (unmounted) before fed_ and work_ go
};

TEST(SystemdUnitFileTest, EveryCapabilityOfTheUnitHasACase) {
  const UnitSettings unit_privileges = ReadUnit(PERCH_UNIT_PATH);
  ASSERT_EQ(unit_privileges.error, "") << PERCH_UNIT_PATH;
  std::set<std::string> unit(unit_privileges.bounding_set.begin(),
                             unit_privileges.bounding_set.end()),
      cases;
  for (const Need& n : kNeeds) cases.insert(n.name);
  for (const std::string& c : unit) {
    EXPECT_TRUE(cases.count(c)) << c << " is in the unit's CapabilityBoundingSet= but no case "
                                << "here shows what fails without it (kNeeds)";
  }
  for (const std::string& c : cases) {
    EXPECT_TRUE(unit.count(c)) << c << " has a case here but is not in the unit's set";
  }
}

TEST_F(SystemdUnitTest, MountsReadsAndServesWithExactlyTheUnitsBoundingSet) {
  ASSERT_EQ(StartPerchd(BoundingSet()), "") << fed_->ErrLog();
  const pid_t pid = perchd_.pid();
  // The kernel's view of perchd: the unit's set, no more, in effect.
  uint64_t mask = 0;
  for (const std::string& c : unit_.bounding_set) {
    const Need* n = FindNeed(c);
    ASSERT_NE(n, nullptr) << c;
    mask |= uint64_t{1} << n->number;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(mask));
  EXPECT_EQ(ProcStatus(pid, "CapBnd"), hex);
  EXPECT_EQ(ProcStatus(pid, "CapEff"), hex);
  EXPECT_EQ(ProcStatus(pid, "CapInh"), "0000000000000000");
  EXPECT_EQ(ProcStatus(pid, "NoNewPrivs"), unit_.no_new_privileges ? "1" : "0");

  // The mount, for root and (allow_other) for every user.
  EXPECT_TRUE(ReadLocalFile(mnt_ / "pub/d/one.txt") == Original("pub/d/one.txt"));
  EXPECT_TRUE(ReadLocalFile(mnt_ / "pub/big.bin") == Original("pub/big.bin"));
  RunResult cat =
      RunToExit(kRunuser, {"-u", "nobody", "--", "/bin/cat", (mnt_ / "pub/d/one.txt").string()});
  EXPECT_EQ(cat.exit_code, 0) << cat.output;
  EXPECT_TRUE(cat.output == Original("pub/d/one.txt")) << cat.output.substr(0, 200);

  // Passthrough's ioctls on /dev/fuse.
  if (PassthroughOffered()) {
    EXPECT_TRUE(ReadUntilPassthrough()) << "no open passed through\n" << perchd_.Log();
    EXPECT_EQ(perchd_.Log().find("no passthrough"), std::string::npos) << perchd_.Log();
  } else {
    std::cout << "the kernel offers no FUSE passthrough here: not checked\n";
  }

  // control_group: the socket is the group's.
  struct stat st {};
  ASSERT_EQ(::stat(Socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, gid_);

  // protected_group, as the kernel sees the peer process's groups.
  EXPECT_EQ(CurlAsNobody(kGroup, "/p/secret.txt"), "protected bytes of /p\n 200");
  EXPECT_EQ(CurlAsNobody("nogroup", "/p/secret.txt").find("protected bytes"), std::string::npos);
  EXPECT_EQ(CurlAsNobody("nogroup", "/pub/d/one.txt"), Original("pub/d/one.txt") + " 200");

  EXPECT_EQ(perchd_.Stop(), 0) << perchd_.Log();
  EXPECT_FALSE(IsMounted(mnt_));
  // Nothing failed on the way (perchd logs "<time> <level> <message>"),
  // and the mount's bdi took the read-ahead (a root-owned sysfs file).
  const std::string log = perchd_.Log();
  EXPECT_EQ(log.find(" error "), std::string::npos) << log;
  EXPECT_EQ(log.find(" critical "), std::string::npos) << log;
  EXPECT_NE(log.find("fuse: kernel read-ahead of"), std::string::npos) << log;
}

// The state letter of process `pid` in /proc/PID/stat ('\0' if it is gone).
char ProcessState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? '\0' : stat[paren + 2];
}

// The first child of `parent` ("children" of its main thread), -1 if none.
pid_t FirstChild(pid_t parent) {
  std::ifstream in("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) +
                   "/children");
  pid_t child = -1;
  in >> child;
  return child;
}

// The unit's seccomp settings against the calls of one traced run (strace
// -f lines "PID name(args) = result"), from perchd's own execve on: what
// systemd's filters would have refused, one line per kind of call.
std::set<std::string> Refused(const std::string& trace, const UnitSettings& unit,
                              const std::set<std::string>& allowed) {
  std::set<std::string> refused;
  std::istringstream lines(trace);
  bool perchd = false;
  for (std::string line; std::getline(lines, line);) {
    const size_t start = line.find_first_not_of("0123456789 ");
    if (start == std::string::npos) continue;
    const std::string call = line.substr(start);
    const size_t paren = call.find('(');
    if (paren == std::string::npos || call[0] == '<' || call[0] == '-' || call[0] == '+') {
      continue;  // "<... x resumed>", "--- SIGxxx", "+++ exited"
    }
    const std::string name = call.substr(0, paren), args = call.substr(paren + 1);
    if (!perchd) {
      // setpriv's calls come first; systemd filters only perchd's.
      perchd = name == "execve" && args.find("/perchd\"") != std::string::npos &&
               call.find(") = 0") != std::string::npos;
      continue;
    }
    if (!allowed.count(name)) refused.insert(name + ": not in SystemCallFilter=");
    if (name == "socket") {
      const std::string family = args.substr(0, args.find(','));
      if (!unit.address_families.count(family)) {
        refused.insert("socket(" + family + "): not in RestrictAddressFamilies=");
      }
    }
    const bool exec = args.find("PROT_EXEC") != std::string::npos;
    if (unit.memory_deny_write_execute &&
        ((name == "mmap" && exec && args.find("PROT_WRITE") != std::string::npos) ||
         ((name == "mprotect" || name == "pkey_mprotect") && exec))) {
      refused.insert(name + " with PROT_EXEC: MemoryDenyWriteExecute=");
    }
    if (unit.restrict_namespaces &&
        (name == "unshare" || name == "setns" ||
         (name.rfind("clone", 0) == 0 && args.find("CLONE_NEW") != std::string::npos))) {
      refused.insert(name + ": RestrictNamespaces=");
    }
  }
  if (!perchd) refused.insert("no execve of perchd in the trace");
  return refused;
}

// The check itself, on a made-up trace: what each setting refuses, and
// nothing of setpriv's before perchd's execve.
TEST(SystemdUnitFileTest, SeccompCheckRefusesWhatEachSettingWould) {
  UnitSettings unit;
  unit.address_families = {"AF_UNIX"};
  unit.memory_deny_write_execute = true;
  unit.restrict_namespaces = true;
  const std::set<std::string> allowed = {"execve", "mmap",   "mprotect", "socket",
                                         "read",   "clone3", "unshare"};
  const std::string trace =
      "7 execve(\"/usr/bin/setpriv\", [\"setpriv\"], 0x7ffc /* 9 vars */) = 0\n"
      "7 prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) = 0\n"
      "7 execve(\"/b/perchd\", [\"/b/perchd\"], 0x7ffd /* 9 vars */) = 0\n"
      "7 mmap(NULL, 8192, PROT_READ|PROT_EXEC, MAP_PRIVATE|MAP_DENYWRITE, 3, 0) = 0x7f00\n"
      "7 mmap(NULL, 4096, PROT_READ|PROT_WRITE|PROT_EXEC, MAP_PRIVATE, -1, 0) = 0x7f01\n"
      "8 socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0) = 4\n"
      "8 socket(AF_PACKET, SOCK_RAW, 768) = 5\n"
      "8 read(3,  <unfinished ...>\n"
      "9 clone3({flags=CLONE_VM|CLONE_THREAD, exit_signal=0}, 88) = 10\n"
      "9 clone3({flags=CLONE_NEWNET, exit_signal=SIGCHLD}, 88) = 11\n"
      "8 <... read resumed>\"x\", 1) = 1\n"
      "9 ptrace(PTRACE_TRACEME) = 0\n"
      "9 --- SIGCHLD {si_signo=SIGCHLD} ---\n"
      "9 +++ exited with 0 +++\n";
  EXPECT_EQ(Refused(trace, unit, allowed),
            (std::set<std::string>{
                "clone3: RestrictNamespaces=", "mmap with PROT_EXEC: MemoryDenyWriteExecute=",
                "ptrace: not in SystemCallFilter=",
                "socket(AF_PACKET): not in RestrictAddressFamilies="}));
  EXPECT_EQ(Refused("7 read(0, \"\", 1) = 0\n", unit, allowed),
            std::set<std::string>{"no execve of perchd in the trace"});
}

TEST_F(SystemdUnitTest, ItsSystemCallsPassTheUnitsSeccompSettings) {
  for (const char* tool : {kStrace, kSystemdAnalyze}) {
    if (access(tool, X_OK) != 0) GTEST_SKIP() << tool << " is not installed";
  }
  std::string why;
  const std::set<std::string> allowed = AllowedSyscalls(unit_, &why);
  ASSERT_EQ(why, "");
  ASSERT_GT(allowed.size(), 100u) << "systemd-analyze syscall-filter expanded no group";
  const fs::path trace = work_->path() / "strace.out";
  ASSERT_EQ(StartPerchd(BoundingSet(), {kStrace, "-f", "-qq", "-o", trace.string(), "--"}), "")
      << fed_->ErrLog();
  // What the other tests do: reads (cold, warm, as another user, passed
  // through), the control API, the endpoint and its peer check, an eviction.
  EXPECT_TRUE(ReadLocalFile(mnt_ / "pub/big.bin") == Original("pub/big.bin"));
  RunResult cat =
      RunToExit(kRunuser, {"-u", "nobody", "--", "/bin/cat", (mnt_ / "pub/d/one.txt").string()});
  EXPECT_TRUE(cat.output == Original("pub/d/one.txt")) << cat.output.substr(0, 200);
  if (PassthroughOffered()) {
    EXPECT_TRUE(ReadUntilPassthrough());
  }
  EXPECT_EQ(CurlAsNobody(kGroup, "/p/secret.txt"), "protected bytes of /p\n 200");
  EXPECT_FALSE(Ctl({"evict", "--json", "/pub/big.bin"}).is_null());
  EXPECT_TRUE(ReadLocalFile(mnt_ / "pub/big.bin") == Original("pub/big.bin"));

  // Stopped as systemd stops it: SIGTERM to perchd (strace's child), which
  // unmounts and exits; then strace, its last tracee gone, exits too.
  const pid_t strace = perchd_.pid(), perchd = FirstChild(strace);
  ASSERT_GT(perchd, 0);
  ASSERT_EQ(::kill(perchd, SIGTERM), 0);
  for (int i = 0; i < 300 && ProcessState(strace) != 'Z'; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(ProcessState(strace), 'Z') << "strace (and perchd) still running";
  EXPECT_EQ(perchd_.Stop(), 0) << perchd_.Log();
  EXPECT_FALSE(IsMounted(mnt_));

  const std::string calls = ReadLocalFile(trace);
  const std::set<std::string> refused = Refused(calls, unit_, allowed);
  std::string list;
  for (const std::string& r : refused) list += "  " + r + "\n";
  EXPECT_TRUE(refused.empty()) << "systemd would refuse (EPERM) what perchd did here:\n"
                               << list << perchd_.Log();
}

class WithoutOneCapability : public SystemdUnitTest, public ::testing::WithParamInterface<Need> {};

TEST_P(WithoutOneCapability, WhatItIsForFails) {
  const Need& need = GetParam();
  ASSERT_TRUE(std::find(unit_.bounding_set.begin(), unit_.bounding_set.end(), need.name) !=
              unit_.bounding_set.end())
      << need.name << " is not in the unit's set";
  const std::string started = StartPerchd(BoundingSet(need.name));
  switch (need.without) {
    case Without::kNoMount:
      EXPECT_NE(started, "");
      EXPECT_NE(started.find("cannot mount at"), std::string::npos) << started;
      EXPECT_FALSE(IsMounted(mnt_));
      break;
    case Without::kNoControlGroup:
      EXPECT_NE(started, "");
      EXPECT_NE(started.find("cannot give control socket"), std::string::npos) << started;
      EXPECT_FALSE(IsMounted(mnt_));
      break;
    case Without::kNoProtectedGroup: {
      ASSERT_EQ(started, "") << fed_->ErrLog();
      // The group's member is refused, for that reason: perchd cannot find
      // its process and falls back to the user database, where nobody is
      // not in the group. (With the whole set it reads the bytes.)
      const std::string answer = CurlAsNobody(kGroup, "/p/secret.txt");
      EXPECT_EQ(answer.find("protected bytes"), std::string::npos) << answer;
      EXPECT_NE(answer.find("members of its protected_group only\n 403"), std::string::npos)
          << answer;
      EXPECT_TRUE(ReadLocalFile(mnt_ / "pub/d/one.txt") == Original("pub/d/one.txt"));
      EXPECT_EQ(perchd_.Stop(), 0) << perchd_.Log();
      EXPECT_FALSE(IsMounted(mnt_));
      break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(UnitsSet, WithoutOneCapability, ::testing::ValuesIn(kNeeds),
                         [](const ::testing::TestParamInfo<Need>& info) {
                           std::string name = info.param.name;
                           name.erase(std::remove(name.begin(), name.end(), '_'), name.end());
                           return name;
                         });

}  // namespace
}  // namespace perch::testing
