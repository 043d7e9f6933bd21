// Issue 31: a perchd hands its mounts to the next one (`perchd --takeover`)
// without unmounting, while a job reads through the mount: a reader with its
// working directory inside the mount, holding a large file and a directory
// open, opening and listing as it goes, sees no error and no wrong byte
// across handoffs; a successor that fails to start leaves the running perchd
// serving. The successor is a copy of perchd at another path (an upgrade).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/handoff_reader.h"
#include "tests/integration/mounted_federation.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kBigSize = 40 << 20;
constexpr int kSmallFiles = 16;

std::vector<TreeFile> HandoffTree() {
  std::vector<TreeFile> files = {{"data/big.bin", kBigSize}, {"whole/cached.bin", 9 << 20}};
  for (int i = 0; i < kSmallFiles; ++i) {
    files.push_back({"data/s" + std::to_string(i) + ".bin", 1000 + 7919 * uint64_t(i)});
  }
  return files;
}

size_t OpenDescriptors(pid_t pid) {
  size_t n = 0;
  for (auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    (void)e;
    ++n;
  }
  return n;
}

dev_t DeviceOf(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? st.st_dev : 0;
}

class HandoffTest : public MountedFederation {
 protected:
  void SetUp() override {
    StartFederation("handoff", HandoffTree());
    if (IsSkipped()) return;
    Mount({"--log-level", "info"});
    // The upgrade: the same build at another path.
    next_binary_ = work_->path() / "bin-next" / "perchd";
    fs::create_directories(next_binary_.parent_path());
    fs::copy_file(PERCHD_BINARY, next_binary_);
    fs::permissions(next_binary_, fs::perms::owner_all);
    reader_ = std::make_unique<Reader>(mnt_ / "data", "big.bin", SmallNames());
    reader_->big_expected = Original("data/big.bin");
    for (const auto& n : SmallNames()) reader_->small_expected.push_back(Original("data/" + n));
  }
  void TearDown() override {
    if (reader_ != nullptr) reader_->Stop();
  }

  static std::vector<std::string> SmallNames() {
    std::vector<std::string> out;
    for (int i = 0; i < kSmallFiles; ++i) out.push_back("s" + std::to_string(i) + ".bin");
    return out;
  }

  // The arguments of Mount, for a successor.
  std::vector<std::string> Args(std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(), {"--log-level", "info"});
    return MountArgs(extra);
  }

  // A handoff; it takes well under a second. Requests wait in the kernel meanwhile: a handoff
  // that waited 31 s for a prefetch listing asked after the network loops had stopped (fixed:
  // CurlLoop::StopTransfers) fails here.
  std::string Next(const std::string& tag) {
    const auto started = std::chrono::steady_clock::now();
    std::string err =
        perchd_.HandOver(((++handoffs_ % 2) ? next_binary_ : fs::path(PERCHD_BINARY)).string(),
                         Args(), work_->path() / ("perchd-" + tag + ".log"));
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10))
        << "handoff " << tag << " took that long:\n"
        << perchd_.Log();
    return err;
  }

  void ExpectNoReadFailed() {
    EXPECT_EQ(reader_->shared().failed.load(), 0u) << reader_->Failure();
    EXPECT_EQ(reader_->shared().wrong.load(), 0u);
  }

  fs::path next_binary_;
  std::unique_ptr<Reader> reader_;
  int handoffs_ = 0;
};

TEST_F(HandoffTest, ReadersListingsAndOpensContinueAcrossAHandoff) {
  const dev_t dev = DeviceOf(mnt_);
  ASSERT_NE(dev, 0u);
  // A file whose every block is cached opens in passthrough (as root): the
  // kernel reads it from the cache's file, registered on this connection,
  // which the next perchd must keep and let go of at the release.
  const std::string whole = Original("whole/cached.bin");
  ASSERT_TRUE(ReadFile("whole/cached.bin") == whole);
  int direct = -1;
  for (int i = 0; i < 50 && direct < 0; ++i) {
    // The release of the last open reaches perchd after close returns: until
    // then a new open is still in the kernel's cached mode.
    const uint64_t before = CtlJson({"stats", "--json"}).value("whole_files", 0u);
    int fd = open((mnt_ / "whole/cached.bin").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    if (CtlJson({"stats", "--json"}).value("whole_files", 0u) > before) {
      direct = fd;
    } else {
      close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  const bool passthrough = direct >= 0;
  if (!passthrough) direct = open((mnt_ / "whole/cached.bin").c_str(), O_RDONLY);
  ASSERT_GE(direct, 0);
  reader_->Start();
  ASSERT_TRUE(reader_->Progress(60)) << reader_->Failure();
  const pid_t old_pid = perchd_.pid();
  ASSERT_EQ(Next("next"), "");
  EXPECT_NE(perchd_.pid(), old_pid);
  EXPECT_NE(perchd_.Log().find("took over 1 mount(s)"), std::string::npos) << perchd_.Log();
  // Reads, listings and opens go on, served by the new perchd.
  ASSERT_TRUE(reader_->Progress(120)) << reader_->Failure();
  const uint64_t opens = reader_->shared().opens;
  ASSERT_TRUE(reader_->Progress(40)) << reader_->Failure();
  EXPECT_GT(reader_->shared().opens.load(), opens);
  // The same mount (a remount would be another FUSE connection, another device).
  EXPECT_EQ(DeviceOf(mnt_), dev);
  std::vector<std::string> names;
  for (auto& e : fs::directory_iterator(mnt_ / "data")) names.push_back(e.path().filename());
  EXPECT_EQ(names.size(), static_cast<size_t>(kSmallFiles + 1));
  EXPECT_TRUE(ReadFile("data/s3.bin") == Original("data/s3.bin"));
  if (passthrough) {
    // The new perchd holds the file the kernel reads: an evict leaves it.
    EXPECT_EQ(CtlJson({"evict", "/test/whole/cached.bin", "--json"}).value("objects", 0u), 0u);
  }
  std::string got(whole.size(), '\0');
  EXPECT_EQ(pread(direct, got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
  EXPECT_TRUE(got == whole);
  EXPECT_EQ(close(direct), 0);
  EXPECT_TRUE(ReadFile("whole/cached.bin") == whole);  // opened again after its release
  EXPECT_EQ(reader_->Stop(), 0) << reader_->Failure();
  ExpectNoReadFailed();
  // Issue 44: with the file that was open across the handoff closed, nothing
  // of it is held any more: an evict frees its bytes (the release reaches
  // perchd shortly after close returns).
  uint64_t evicted = 0;
  std::string evict_reply;
  for (int i = 0; i < 50 && evicted == 0; ++i) {
    const auto e = CtlJson({"evict", "/test/whole/cached.bin", "--json"});
    evict_reply = e.dump();
    evicted = e.value("bytes", 0u);
    if (evicted == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(evicted, whole.size()) << evict_reply;
  // perchctl reaches the new perchd.
  auto stats = Ctl({"stats", "--json"});
  EXPECT_EQ(stats.exit_code, 0) << stats.output;
  EXPECT_EQ(perchd_.Stop(), 0) << perchd_.Log();
  EXPECT_FALSE(IsMounted(mnt_));
}

// A perchd started (without --takeover) on a mountpoint that the perchd of
// the same cache directory still serves takes the mount over instead of
// failing (or stacking a second mount).
TEST_F(HandoffTest, APerchdStartedOnItsLiveMountTakesItOver) {
  const dev_t dev = DeviceOf(mnt_);
  reader_->Start();
  ASSERT_TRUE(reader_->Progress(60)) << reader_->Failure();
  ASSERT_EQ(perchd_.HandOver(PERCHD_BINARY, Args(), work_->path() / "perchd-again.log",
                             /*explicit_takeover=*/false),
            "");
  EXPECT_NE(perchd_.Log().find("taking its mounts over"), std::string::npos) << perchd_.Log();
  ASSERT_TRUE(reader_->Progress(60)) << reader_->Failure();
  EXPECT_EQ(DeviceOf(mnt_), dev);
  EXPECT_EQ(reader_->Stop(), 0) << reader_->Failure();
  ExpectNoReadFailed();
  EXPECT_EQ(perchd_.Stop(), 0) << perchd_.Log();
}

TEST_F(HandoffTest, RefusedCleanlyWhenTheSuccessorFailsToStart) {
  // The successor cannot open its control socket (its directory is a file):
  // it fails after the running perchd let go of everything, which then
  // serves again. (A side port it cannot have no longer fails it: issue 42.)
  const fs::path not_a_dir = work_->path() / "not-a-dir";
  std::ofstream(not_a_dir) << "a file\n";
  std::vector<std::string> args = Args();
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--control") args[i + 1] = "unix:" + (not_a_dir / "perchd.sock").string();
  }

  const dev_t dev = DeviceOf(mnt_);
  reader_->Start();
  ASSERT_TRUE(reader_->Progress(60)) << reader_->Failure();
  const pid_t pid = perchd_.pid();
  std::string err =
      perchd_.HandOver(next_binary_.string(), args, work_->path() / "perchd-failing.log");
  EXPECT_NE(err.find("serves on"), std::string::npos) << err;
  EXPECT_EQ(perchd_.pid(), pid);
  // The successor's exit ended HandOver; the running perchd says so once it serves again, which
  // the reader's progress shows.
  ASSERT_TRUE(reader_->Progress(120)) << reader_->Failure() << perchd_.Log();
  EXPECT_NE(perchd_.Log().find("handoff: refused; serving the mounts again"), std::string::npos)
      << perchd_.Log();
  EXPECT_EQ(DeviceOf(mnt_), dev);
  // And a handoff after that works.
  ASSERT_EQ(Next("after"), "");
  ASSERT_TRUE(reader_->Progress(60)) << reader_->Failure();
  EXPECT_EQ(reader_->Stop(), 0) << reader_->Failure();
  ExpectNoReadFailed();
  EXPECT_EQ(perchd_.Stop(), 0) << perchd_.Log();
}

// `systemctl reload perchd`, as the package's upgrade runs it: the unit's
// ExecReload= command line (its binary a copy standing for the upgraded
// one, its configuration the test's) returns once the new perchd serves,
// which has told systemd (NOTIFY_SOCKET, a socket of the test's here) that
// it is the main process now; the old perchd exits 0; the reader sees no
// error.
TEST_F(HandoffTest, TheUnitsExecReloadHandsOverAndNamesTheNewMainPid) {
  std::string reload;
  {
    std::ifstream unit(PERCH_UNIT_PATH);
    for (std::string line; std::getline(unit, line);) {
      if (line.rfind("ExecReload=", 0) == 0) reload = line.substr(11);
    }
  }
  ASSERT_FALSE(reload.empty()) << "perchd.service has no ExecReload=";
  std::vector<std::string> argv;
  for (size_t at = 0; at < reload.size();) {
    size_t end = reload.find(' ', at);
    if (end == std::string::npos) end = reload.size();
    if (end > at) argv.push_back(reload.substr(at, end - at));
    at = end + 1;
  }
  ASSERT_EQ(argv.front(), "/usr/sbin/perchd");
  const fs::path config = work_->path() / "perchd.toml";
  std::ofstream(config) << "federation = \"" << fed_->FederationUrl() << "/test\"\n"
                        << "mountpoint = \"" << mnt_.string() << "\"\n"
                        << "cache_dir = \"" << (work_->path() / "cache").string() << "\"\n"
                        << "op_timeout = \"20s\"\n"
                        << "control = \"unix:" << Socket() << "\"\n";
  argv.front() = next_binary_.string();
  for (auto& a : argv) {
    if (a == "/etc/perch/perchd.toml") a = config.string();
  }
  // systemd's notification socket, played by the test.
  const fs::path notify = work_->path() / "notify.sock";
  int sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(sock, 0);
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, notify.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);

  reader_->Start();
  ASSERT_TRUE(reader_->Progress(60)) << reader_->Failure();
  setenv("NOTIFY_SOCKET", notify.c_str(), 1);
  RunResult r = RunToExit(argv.front(), std::vector<std::string>(argv.begin() + 1, argv.end()),
                          std::chrono::seconds(120));
  unsetenv("NOTIFY_SOCKET");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // What the new perchd told "systemd".
  pid_t main_pid = -1;
  bool ready = false;
  char msg[4096];
  for (ssize_t n; (n = recv(sock, msg, sizeof(msg) - 1, MSG_DONTWAIT)) > 0;) {
    msg[n] = '\0';
    std::string m(msg);
    if (auto at = m.find("MAINPID="); at != std::string::npos) {
      main_pid = std::stoi(m.substr(at + 8));
      ready = ready || m.find("READY=1") != std::string::npos;
    }
  }
  close(sock);
  ASSERT_GT(main_pid, 0) << r.output;
  EXPECT_TRUE(ready);
  EXPECT_EQ(fs::read_symlink("/proc/" + std::to_string(main_pid) + "/exe"), next_binary_);
  ASSERT_EQ(perchd_.HandedTo(main_pid, work_->path() / "reloaded.log"), "");
  ASSERT_TRUE(reader_->Progress(60)) << reader_->Failure();
  EXPECT_EQ(reader_->Stop(), 0) << reader_->Failure();
  ExpectNoReadFailed();
  EXPECT_EQ(Ctl({"stats"}).exit_code, 0);
  EXPECT_EQ(perchd_.Stop(), 0);
  for (int i = 0; i < 250 && IsMounted(mnt_); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(IsMounted(mnt_));
}

// Only perchd's own user (root for the node's perchd) may ask for the
// mounts: the socket is in the private cache directory, and perchd checks
// the peer's uid as well.
TEST_F(HandoffTest, OnlyItsOwnUserMayAskForTheMounts) {
  const fs::path sock = work_->path() / "cache" / "handoff.sock";
  ASSERT_TRUE(fs::is_socket(sock));
  EXPECT_EQ(fs::status(sock).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr {};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, sock.c_str(), sizeof(addr.sun_path) - 1);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) _exit(1);
    _exit(errno == EACCES ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(ReadFile("data/s1.bin") == Original("data/s1.bin"));
  EXPECT_EQ(perchd_.Log().find("asks to take over"), std::string::npos) << perchd_.Log();
  ASSERT_EQ(Next("after"), "");
}

// Every mount of a perchd goes over, each with its own open files.
TEST_F(HandoffTest, TwoMountsGoOverTogether) {
  ASSERT_EQ(perchd_.Stop(), 0);
  const fs::path second = work_->path() / "mnt2";
  fs::create_directories(second);
  const fs::path config = work_->path() / "two.toml";
  std::ofstream(config) << "[[mount]]\nfederation = \"" << fed_->FederationUrl()
                        << "/test\"\nmountpoint = \"" << mnt_.string() << "\"\n\n"
                        << "[[mount]]\nfederation = \"" << fed_->FederationUrl()
                        << "/test/whole\"\nmountpoint = \"" << second.string() << "\"\n";
  const std::vector<std::string> args = {
      "--config",     config.string(), "--cache-dir", (work_->path() / "cache").string(),
      "--op-timeout", "20s",           "--control",   "unix:" + Socket()};
  ASSERT_EQ(perchd_.Start(args, mnt_, work_->path() / "two.log"), "");
  for (int i = 0; i < 500 && !IsMounted(second); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(IsMounted(second));
  const dev_t dev1 = DeviceOf(mnt_), dev2 = DeviceOf(second);
  ASSERT_NE(dev1, dev2);
  const std::string whole = Original("whole/cached.bin");
  int fd = open((second / "cached.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::string got(1 << 20, '\0');
  ASSERT_EQ(pread(fd, got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
  reader_->Start();
  ASSERT_TRUE(reader_->Progress(60)) << reader_->Failure();
  ASSERT_EQ(perchd_.HandOver(next_binary_.string(), args, work_->path() / "two-next.log"), "");
  EXPECT_NE(perchd_.Log().find("took over 2 mount(s)"), std::string::npos) << perchd_.Log();
  ASSERT_TRUE(reader_->Progress(60)) << reader_->Failure();
  got.assign(whole.size(), '\0');
  EXPECT_EQ(pread(fd, got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
  EXPECT_TRUE(got == whole);
  EXPECT_EQ(close(fd), 0);
  EXPECT_EQ(DeviceOf(mnt_), dev1);
  EXPECT_EQ(DeviceOf(second), dev2);
  EXPECT_EQ(reader_->Stop(), 0) << reader_->Failure();
  ExpectNoReadFailed();
  EXPECT_EQ(perchd_.Stop(), 0) << perchd_.Log();
  EXPECT_FALSE(IsMounted(second));
}

TEST_F(HandoffTest, TwentyHandoffsUnderReadLoad) {
  reader_->Start();
  ASSERT_TRUE(reader_->Progress(60)) << reader_->Failure();
  std::vector<size_t> fds;
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(Next(std::to_string(i)), "") << "handoff " << i;
    // Each perchd serves before the next takes over.
    ASSERT_TRUE(reader_->Progress(30)) << "after handoff " << i << ": " << reader_->Failure();
    fds.push_back(OpenDescriptors(perchd_.pid()));
  }
  EXPECT_EQ(reader_->Stop(), 0) << reader_->Failure();
  ExpectNoReadFailed();
  std::string counts;
  for (size_t n : fds) counts += std::to_string(n) + " ";
  // Descriptors flat: no descriptor of an earlier generation carried along
  // (a leak of one per handoff would add 15 from the first five to the last
  // five). Each count varies with the connections and block files open at
  // that moment, by up to 9 since each cold file's digest is asked of a
  // second server (issue 41): compare the least of five, within 6.
  const size_t first = *std::min_element(fds.begin(), fds.begin() + 5);
  const size_t last = *std::min_element(fds.end() - 5, fds.end());
  EXPECT_LE(last, first + 6) << counts;
  std::printf("descriptors after each handoff: %s\n", counts.c_str());
  std::printf("reads: %lu, longest read of the large file: %.3f s\n",
              static_cast<unsigned long>(reader_->shared().reads.load()),
              reader_->shared().longest_read_us.load() / 1e6);
  EXPECT_EQ(perchd_.Stop(), 0) << perchd_.Log();
  EXPECT_FALSE(IsMounted(mnt_));
}

}  // namespace
}  // namespace perch::testing
