// Issue 31: the .deb upgrade path under a job that reads through the mount.
//
// Two packages of perch: the one cpack builds from this build, and the same package rebuilt as
// the next version with perchd_next (perchd built again, reporting PERCH_NEXT_VERSION;
// tests/package/next_deb.sh). The first is installed with dpkg into a scratch root, its perchd
// runs from there as the installed unit's ExecStart= says (the scratch root's paths for the
// unit's), mounting a perch-devfed federation, with a reader in the mount: its working directory
// there, a large file and the directory open, reading and checking every byte. Then the upgrade,
// step by step as dpkg and systemd take it on a node:
//   the old prerm `upgrade NEW`, dpkg -i of the new package (replacing /usr/sbin/perchd under
//   the running perchd), the old postrm `upgrade NEW`, the new postinst `configure OLD`;
// and what the scripts ask of systemd is done as systemd does it with the installed unit: a
// reload runs its ExecReload= line. The new perchd (the upgraded binary, the next version)
// serves the same mount, the old one exits, and the reader sees no error and no wrong byte.
// Then a remove stops perchd (unmounting) and purge leaves nothing.
//
// dpkg itself runs the maintainer scripts in the scratch root with DPKG_ROOT set (see
// --force-script-chrootless below), where they do nothing by design: the test checks that dpkg
// runs them with the right arguments and that they succeed, and then runs each script as dpkg
// runs it on a node that systemd booted (DPKG_ROOT unset, /run/systemd/system present), in a
// mount namespace of its own, with stand-ins for systemctl, deb-systemd-invoke and
// systemd-tmpfiles that write down what they are asked. What is not checked here: systemd
// itself (PID 1 here is not systemd).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/handoff_reader.h"
#include "tests/integration/mounted_federation.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kBigSize = 40 << 20;
constexpr int kSmallFiles = 8;
const std::string kVersion = PERCH_VERSION;
const std::string kNextVersion = PERCH_NEXT_VERSION;

std::vector<TreeFile> UpgradeTree() {
  std::vector<TreeFile> files = {{"data/big.bin", kBigSize}};
  for (int i = 0; i < kSmallFiles; ++i) {
    files.push_back({"data/s" + std::to_string(i) + ".bin", 1000 + 7919 * uint64_t(i)});
  }
  return files;
}

std::vector<std::string> SmallNames() {
  std::vector<std::string> out;
  for (int i = 0; i < kSmallFiles; ++i) out.push_back("s" + std::to_string(i) + ".bin");
  return out;
}

dev_t DeviceOf(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? st.st_dev : 0;
}

// Whether process `pid` runs (a zombie does not: a reload's perchd is not the test's child, and
// who reaps it is up to PID 1).
bool Running(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

std::string ExeOf(pid_t pid) {
  std::error_code ec;
  return fs::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec).string();
}

// The command line of the unit's `key=` line, split at spaces (the unit quotes nothing).
std::vector<std::string> UnitCommand(const fs::path& unit, const std::string& key) {
  std::string line;
  std::vector<std::string> argv;
  std::ifstream in(unit);
  for (std::string l; std::getline(in, l);) {
    if (l.rfind(key + "=", 0) == 0) line = l.substr(key.size() + 1);
  }
  std::istringstream words(line);
  for (std::string w; words >> w;) argv.push_back(w);
  return argv;
}

// The tokens of one line.
std::vector<std::string> Words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

class UpgradeTest : public MountedFederation {
 protected:
  void SetUp() override {
    StartFederation("upgrade", UpgradeTree());
    if (IsSkipped()) return;
    for (const char* tool : {"/usr/bin/dpkg", "/usr/bin/dpkg-deb", "/usr/bin/unshare"}) {
      if (access(tool, X_OK) != 0) GTEST_SKIP() << "needs " << tool;
    }
    root_ = work_->path() / "root";
    unit_ = root_ / "lib/systemd/system/perchd.service";
    stubs_ = work_->path() / "stubs";
    calls_ = work_->path() / "calls";
    fs::create_directories(stubs_);
    // Stand-ins for systemd's commands: each writes down how it was called and succeeds;
    // `systemctl is-active` answers that perchd runs.
    for (const char* name : {"systemctl", "deb-systemd-invoke", "systemd-tmpfiles"}) {
      const fs::path stub = stubs_ / name;
      std::ofstream(stub) << "#!/bin/sh\necho \"" << name << " $*\" >>\"$PERCH_TEST_CALLS\"\n"
                          << "exit 0\n";
      fs::permissions(stub, fs::perms::owner_all);
    }
    reader_ = std::make_unique<Reader>(mnt_ / "data", "big.bin", SmallNames());
    reader_->big_expected = Original("data/big.bin");
    for (const auto& n : SmallNames()) reader_->small_expected.push_back(Original("data/" + n));
  }

  void TearDown() override {
    if (reader_ != nullptr) reader_->Stop();
    perchd_.Stop();
    // Any other perchd running the scratch root's binary is this test's (a reload's perchd is
    // not its child): none may outlive it.
    if (root_.empty()) return;
    const std::string ours = (root_ / "usr/sbin/perchd").string();
    for (int round = 0; round < 2; ++round) {
      for (const auto& e : fs::directory_iterator("/proc")) {
        const std::string name = e.path().filename();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        const pid_t pid = std::stoi(name);
        if (ExeOf(pid).rfind(ours, 0) != 0) continue;
        ADD_FAILURE() << "a perchd of the scratch root still ran: " << pid;
        kill(pid, round == 0 ? SIGTERM : SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    if (IsMounted(mnt_)) {
      (void)std::system(("fusermount3 -u -z '" + mnt_.string() + "' 2>/dev/null").c_str());
    }
  }

  // dpkg on the scratch root. --force-script-chrootless: the scratch root has no shell to chroot
  // into; dpkg runs the maintainer scripts from the host with DPKG_ROOT set, where they leave
  // the host alone. No --force-depends: the scratch root's database holds the host's packages
  // (scratch_root.sh), which satisfy the Depends and provide the libraries the installed
  // binaries load. No --force-not-root: the test runs as root (FUSE and dpkg's file owners).
  // -D2 logs each maintainer script dpkg runs, with its arguments.
  RunResult Dpkg(std::vector<std::string> args) {
    args.insert(args.begin(), {"--root=" + root_.string(), "--force-script-chrootless", "-D2"});
    return RunToExit("/usr/bin/dpkg", args, std::chrono::seconds(300));
  }

  std::string InstalledVersion() {
    auto r =
        RunToExit("/usr/bin/dpkg-query", {"--admindir=" + (root_ / "var/lib/dpkg").string(), "-W",
                                          "-f", "${db:Status-Abbrev}${Version}", "perch"});
    return r.output;
  }

  // A command line of the installed unit as systemd would run it with the scratch root for /.
  std::vector<std::string> InRoot(std::vector<std::string> argv) {
    for (auto& a : argv) {
      if (!a.empty() && a[0] == '/') a = (root_ / a.substr(1)).string();
    }
    return argv;
  }

  // Runs the maintainer script `script` with `args` as dpkg runs it on a node that systemd
  // booted: DPKG_ROOT unset, in a mount namespace of its own (private: nothing propagates to
  // the host) whose /run is an empty tmpfs holding /run/systemd/system, which is how the
  // scripts tell that systemd runs; the stand-ins first in PATH. Returns the calls the stand-ins
  // saw, one a line, and fails the test unless the script exits 0.
  std::vector<std::string> RunMaintainerScript(const fs::path& script,
                                               const std::vector<std::string>& args) {
    fs::remove(calls_);
    std::vector<std::string> argv = {
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        "mount -t tmpfs perch-test /run && mkdir -p /run/systemd/system && exec \"$@\"",
        "sh",
        "/usr/bin/env",
        "-u",
        "DPKG_ROOT",
        "PATH=" + stubs_.string() + ":/usr/sbin:/usr/bin:/sbin:/bin",
        "PERCH_TEST_CALLS=" + calls_.string(),
        "DPKG_MAINTSCRIPT_PACKAGE=perch",
        "DPKG_MAINTSCRIPT_NAME=" + script.extension().string().substr(1),
        "/bin/sh",
        script.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = RunToExit("/usr/bin/unshare", argv, std::chrono::seconds(60));
    EXPECT_EQ(r.exit_code, 0) << script << ": " << r.output;
    std::vector<std::string> calls;
    std::ifstream in(calls_);
    for (std::string l; std::getline(in, l);) calls.push_back(l);
    return calls;
  }

  // Does what `calls` ask of systemd for perchd.service, as systemd would.
  void Act(const std::vector<std::string>& calls) {
    for (const auto& call : calls) {
      auto w = Words(call);
      if (w.empty() || (w[0] != "systemctl" && w[0] != "deb-systemd-invoke")) continue;
      bool perchd = false;
      std::string action;
      for (size_t i = 1; i < w.size(); ++i) {
        if (w[i] == "perchd" || w[i] == "perchd.service") perchd = true;
        if (action.empty() && w[i][0] != '-') action = w[i];
      }
      if (!perchd) continue;
      if (action == "reload" || action == "reload-or-restart" ||
          action == "try-reload-or-restart") {
        Reload();
      } else if (action == "stop") {
        EXPECT_EQ(perchd_.Stop(), 0) << perchd_.Log();
      } else if (action == "start") {
        Start();
      } else if (action == "restart" || action == "try-restart") {
        EXPECT_EQ(perchd_.Stop(), 0) << perchd_.Log();
        Start();
      } else if (action != "is-active" && action != "is-enabled") {
        ADD_FAILURE() << "what systemd would do is not known here: " << call;
      }
    }
  }

  // ExecStart=: perchd in the foreground, the test's child.
  void Start() {
    auto argv = InRoot(UnitCommand(unit_, "ExecStart"));
    ASSERT_FALSE(argv.empty()) << "the installed perchd.service has no ExecStart=";
    ASSERT_EQ(perchd_.StartCommand(argv, mnt_, work_->path() / "perchd.log"), "");
  }

  // ExecReload=: returns once the new perchd serves, which tells systemd (NOTIFY_SOCKET, the
  // test's socket here) that it is the main process now; the old perchd then exits 0.
  void Reload() {
    auto argv = InRoot(UnitCommand(unit_, "ExecReload"));
    ASSERT_FALSE(argv.empty()) << "the installed perchd.service has no ExecReload=";
    const fs::path notify = work_->path() / "notify.sock";
    fs::remove(notify);
    int sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(sock, 0);
    struct sockaddr_un addr {};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, notify.c_str(), sizeof(addr.sun_path) - 1);
    ASSERT_EQ(bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    setenv("NOTIFY_SOCKET", notify.c_str(), 1);
    const auto started = std::chrono::steady_clock::now();
    RunResult r = RunToExit(argv.front(), std::vector<std::string>(argv.begin() + 1, argv.end()),
                            std::chrono::seconds(120));
    reload_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    unsetenv("NOTIFY_SOCKET");
    pid_t main_pid = -1;
    char msg[4096];
    for (ssize_t n; (n = recv(sock, msg, sizeof(msg) - 1, MSG_DONTWAIT)) > 0;) {
      msg[n] = '\0';
      std::string m(msg);
      if (auto at = m.find("MAINPID="); at != std::string::npos) {
        main_pid = std::stoi(m.substr(at + 8));
      }
    }
    close(sock);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    ASSERT_GT(main_pid, 0) << "the reload named no new main process: " << r.output;
    ASSERT_EQ(perchd_.HandedTo(main_pid, work_->path() / "reloaded.log"), "");
  }

  // The installed perchctl's `health --json`.
  nlohmann::json Health() {
    RunResult r = RunToExit((root_ / "usr/bin/perchctl").string(),
                            {"--socket", Socket(), "health", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output, nullptr, false);
  }

  static bool Called(const std::vector<std::string>& calls, const std::string& call) {
    for (const auto& c : calls) {
      if (c == call) return true;
    }
    return false;
  }

  static std::string Joined(const std::vector<std::string>& calls) {
    std::string out;
    for (const auto& c : calls) out += "  " + c + "\n";
    return out;
  }

  void ExpectNoStop(const std::vector<std::string>& calls, const std::string& what) {
    for (const auto& c : calls) {
      for (const char* action : {" stop", " restart", " try-restart", " kill"}) {
        EXPECT_EQ(c.find(action), std::string::npos) << what << " asked: " << c;
      }
    }
  }

  fs::path root_, unit_, stubs_, calls_;
  std::unique_ptr<Reader> reader_;
  double reload_s_ = 0;
};

TEST_F(UpgradeTest, DpkgUpgradeHandsTheMountToTheNewPerchdUnderAReader) {
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point since) {
    return std::chrono::duration<double>(Clock::now() - since).count();
  };
  // --- the two packages ----------------------------------------------------------------------
  auto t = Clock::now();
  const fs::path debs = work_->path() / "debs";
  RunResult r = RunToExit(CPACK_COMMAND,
                          {"--config", std::string(PERCH_BUILD_DIR) + "/CPackConfig.cmake", "-B",
                           debs.string(), "-D", "CPACK_COMPONENTS_ALL=perch"},
                          std::chrono::seconds(300));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path deb = debs / ("perch_" + kVersion + "_amd64.deb");
  const fs::path next_deb = debs / ("perch_" + kNextVersion + "_amd64.deb");
  ASSERT_TRUE(fs::exists(deb)) << r.output;
  r = RunToExit(PERCH_PACKAGE_TESTS "/next_deb.sh",
                {deb.string(), PERCHD_NEXT, kNextVersion, next_deb.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double packages_s = seconds(t);

  // --- the first installed into the scratch root ----------------------------------------------
  t = Clock::now();
  r = RunToExit(PERCH_PACKAGE_TESTS "/scratch_root.sh", {root_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Dpkg({"-i", deb.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("perch.postinst ( configure  )"), std::string::npos) << r.output;
  ASSERT_EQ(InstalledVersion(), "ii " + kVersion);
  const fs::path perchd = root_ / "usr/sbin/perchd";
  EXPECT_EQ(RunToExit(perchd.string(), {"--version"}).output, "perchd " + kVersion + "\n");
  // The configuration of this node (the admin's edit of the conffile), and the cache directory
  // as the installed tmpfiles.d/perch.conf makes it.
  const fs::path config = root_ / "etc/perch/perchd.toml";
  const fs::path cache = root_ / "var/cache/perch";
  {
    std::ofstream out(config);
    out << "federation = \"" << fed_->FederationUrl() << "/test\"\n"
        << "mountpoint = \"" << mnt_.string() << "\"\n"
        << "cache_dir = \"" << cache.string() << "\"\n"
        << "op_timeout = \"20s\"\n"
        << "control = \"unix:" << Socket() << "\"\n";
  }
  const std::string config_text = ReadLocalFile(config);
  r = RunToExit("/usr/bin/systemd-tmpfiles",
                {"--root=" + root_.string(), "--create", "perch.conf"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::is_directory(cache));
  const double install_s = seconds(t);

  // --- perchd as the unit starts it, a job reading --------------------------------------------
  ASSERT_NO_FATAL_FAILURE(Start());
  const pid_t old_pid = perchd_.pid();
  EXPECT_EQ(ExeOf(old_pid), perchd.string());
  auto health = Health();
  EXPECT_EQ(health.value("version", ""), kVersion) << health.dump();
  EXPECT_EQ(health.value("pid", 0), old_pid) << health.dump();
  const dev_t dev = DeviceOf(mnt_);
  ASSERT_NE(dev, 0u);
  reader_->Start();
  ASSERT_TRUE(reader_->Progress(60)) << reader_->Failure();

  // --- the upgrade ---------------------------------------------------------------------------
  t = Clock::now();
  // dpkg runs the old package's prerm and postrm: kept from before the new one replaces them.
  const fs::path old_scripts = work_->path() / "old-scripts";
  fs::create_directories(old_scripts);
  for (const char* s : {"prerm", "postrm"}) {
    fs::copy_file(root_ / "var/lib/dpkg/info" / (std::string("perch.") + s),
                  old_scripts / (std::string("perch.") + s));
  }
  auto calls = RunMaintainerScript(old_scripts / "perch.prerm", {"upgrade", kNextVersion});
  ExpectNoStop(calls, "the old prerm upgrade");
  Act(calls);
  r = Dpkg({"-i", next_deb.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& run : {"perch.prerm ( upgrade " + kNextVersion + " )",
                                 "perch.postrm ( upgrade " + kNextVersion + " )",
                                 "perch.postinst ( configure " + kVersion + " )"}) {
    EXPECT_NE(r.output.find(run), std::string::npos) << "dpkg did not run " << run << r.output;
  }
  EXPECT_EQ(InstalledVersion(), "ii " + kNextVersion);
  EXPECT_EQ(RunToExit(perchd.string(), {"--version"}).output, "perchd " + kNextVersion + "\n");
  EXPECT_EQ(ReadLocalFile(config), config_text) << "dpkg replaced the node's configuration";
  // The running perchd is untouched: its binary was replaced under it.
  EXPECT_EQ(perchd_.pid(), old_pid);
  EXPECT_TRUE(Running(old_pid));
  EXPECT_EQ(ExeOf(old_pid), perchd.string() + " (deleted)");
  ASSERT_TRUE(reader_->Progress(20)) << reader_->Failure();
  EXPECT_EQ(reader_->shared().failed.load(), 0u) << "after dpkg -i: " << reader_->Failure();
  calls = RunMaintainerScript(old_scripts / "perch.postrm", {"upgrade", kNextVersion});
  ExpectNoStop(calls, "the old postrm upgrade");
  Act(calls);
  ASSERT_EQ(perchd_.pid(), old_pid);
  calls = RunMaintainerScript(root_ / "var/lib/dpkg/info/perch.postinst", {"configure", kVersion});
  ExpectNoStop(calls, "the new postinst configure");
  EXPECT_TRUE(Called(calls, "deb-systemd-invoke reload perchd.service")) << Joined(calls);
  EXPECT_TRUE(Called(calls, "systemctl --system daemon-reload")) << Joined(calls);
  ASSERT_NO_FATAL_FAILURE(Act(calls));
  const double upgrade_s = seconds(t);

  // --- the new perchd serves the same mount ---------------------------------------------------
  const pid_t new_pid = perchd_.pid();
  EXPECT_NE(new_pid, old_pid);
  EXPECT_FALSE(Running(old_pid)) << "the old perchd still runs";
  EXPECT_EQ(ExeOf(new_pid), perchd.string());
  health = Health();
  EXPECT_EQ(health.value("version", ""), kNextVersion) << health.dump();
  EXPECT_EQ(health.value("pid", 0), new_pid) << health.dump();
  EXPECT_EQ(DeviceOf(mnt_), dev);
  ASSERT_TRUE(reader_->Progress(60)) << reader_->Failure();
  const uint64_t opens = reader_->shared().opens;
  ASSERT_TRUE(reader_->Progress(20)) << reader_->Failure();
  EXPECT_GT(reader_->shared().opens.load(), opens);
  EXPECT_TRUE(ReadFile("data/s3.bin") == Original("data/s3.bin"));
  EXPECT_EQ(reader_->Stop(), 0) << reader_->Failure();
  EXPECT_EQ(reader_->shared().failed.load(), 0u) << reader_->Failure();
  EXPECT_EQ(reader_->shared().wrong.load(), 0u);

  // --- remove stops perchd, purge leaves nothing ----------------------------------------------
  calls = RunMaintainerScript(root_ / "var/lib/dpkg/info/perch.prerm", {"remove"});
  EXPECT_TRUE(Called(calls, "deb-systemd-invoke stop perchd.service")) << Joined(calls);
  Act(calls);
  EXPECT_FALSE(IsMounted(mnt_));
  EXPECT_FALSE(Running(new_pid)) << "perchd still runs after remove";
  r = Dpkg({"--purge", "perch"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("perch.prerm ( remove )"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("perch.postrm ( purge )"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(perchd));
  EXPECT_FALSE(fs::exists(cache));

  std::printf(
      "packages %.1f s, install %.1f s, upgrade with reload %.1f s (ExecReload %.2f s); "
      "reads %lu, longest read of the large file %.3f s\n",
      packages_s, install_s, upgrade_s, reload_s_,
      static_cast<unsigned long>(reader_->shared().reads.load()),
      reader_->shared().longest_read_us.load() / 1e6);
}

}  // namespace
}  // namespace perch::testing
