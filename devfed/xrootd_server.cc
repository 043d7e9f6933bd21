#include "devfed/xrootd_server.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "devfed/held_port.h"

namespace perch::devfed {

namespace fs = std::filesystem;

int RunCommand(const std::vector<std::string>& argv) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      dup2(devnull, 1);
      dup2(devnull, 2);
    }
    execvp(a[0], a.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

namespace {

std::string Tail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string l; std::getline(in, l);) all.push_back(l);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i)
    out += "  " + all[i] + "\n";
  return out;
}

// True once the server answers any HTTP request.
bool Answers(const std::string& url, const std::string& ca_dir) {
  CURL* c = curl_easy_init();
  curl_easy_setopt(c, CURLOPT_URL, (url + "/").c_str());
  curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 1000L);
  if (!ca_dir.empty()) curl_easy_setopt(c, CURLOPT_CAPATH, ca_dir.c_str());
  CURLcode rc = curl_easy_perform(c);
  long code = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(c);
  return rc == CURLE_OK && code > 0;
}

}  // namespace

std::string XrootdServer::Url() const {
  return std::string(tls_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_);
}

std::string XrootdServer::Start(const XrootdConfig& c) {
  struct passwd* pw = getpwnam("xrootd");
  if (pw == nullptr)
    return "no user 'xrootd' (install xrootd-server: apt-get install xrootd-server)";
  fs::path dir = fs::path(c.work_dir) / c.name;
  fs::create_directories(dir / "admin");
  fs::create_directories(dir / "run");
  tls_ = !c.tls_cert.empty();
  log_ = (dir / "xrootd.log").string();
  for (int attempt = 0; attempt < 5; ++attempt) {
    // A port of its own, bound here until xrootd answers on it: no other
    // test's server can take it in between (held_port.h).
    std::optional<HeldPort> held;
    if (c.port > 0) {
      port_ = c.port;
    } else {
      held.emplace();
      port_ = held->port();
    }
    std::ofstream cfg(dir / "xrootd.cfg");
    cfg << "all.export /\n"
        << "oss.localroot " << c.export_root << "\n"
        << "xrd.port " << port_ << "\n"
        << "xrd.protocol http:" << port_ << " libXrdHttp.so\n"
        << "http.listingdeny false\n"
        << "all.adminpath " << (dir / "admin").string() << "\n"
        << "all.pidpath " << (dir / "run").string() << "\n"
        << "xrd.network nodnr\n"
        << "all.sitename perch-devfed\n";
    if (c.origin_port > 0) {
      // A cache relays checksum queries (Want-Digest) to its origin, as
      // Pelican's caches do; XRootD 5.5's proxy cannot relay crc32c.
      cfg << "xrootd.chksum max 4 adler32 md5\n"
          << "ofs.osslib libXrdPss.so\n"
          << "ofs.ckslib * libXrdPss.so\n"
          << "pss.cachelib libXrdPfc.so\n"
          << "pss.origin 127.0.0.1:" << c.origin_port << "\n"
          << "pfc.blocksize 128k\n"
          << "pfc.ram 1g\n"
          << "pfc.diskusage 0.90 0.95\n";
    } else {
      cfg << "xrootd.chksum max 4 adler32 crc32c md5\n";  // Want-Digest answered
    }
    if (tls_) {
      cfg << "xrd.tls " << c.tls_cert << " " << c.tls_key << "\n"
          << "xrd.tlsca certdir " << c.tls_ca_dir << "\n";
    }
    cfg << c.extra;
    cfg.close();
    RunCommand({"chown", "-R", "xrootd", dir.string()});
    if (c.origin_port > 0) RunCommand({"chown", "-R", "xrootd", c.export_root});

    std::string cfg_path = (dir / "xrootd.cfg").string();
    uid_t uid = pw->pw_uid;
    gid_t gid = pw->pw_gid;
    pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) return "fork failed";
    if (pid_ == 0) {
      setpgid(0, 0);
      // Become user xrootd here rather than through xrootd's -R: the kernel
      // clears the parent-death signal whenever a process changes its
      // credentials, so it is set after the change, and then xrootd dies with
      // perch-devfed even when that is SIGKILLed. (It fires when the forking
      // thread exits: servers are started from perch-devfed's main thread.)
      if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0) _exit(126);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);  // perch-devfed died before prctl
      execlp("xrootd", "xrootd", "-c", cfg_path.c_str(), "-l", log_.c_str(), "-n", c.name.c_str(),
             static_cast<char*>(nullptr));
      _exit(127);
    }
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    bool exited = false;
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited = true;
        pid_ = -1;
        break;
      }
      if (Answers(Url(), tls_ ? c.tls_ca_dir : "")) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::string tail = Tail(log_ + (fs::exists(log_) ? "" : ""), 15);
    if (!exited) {
      Stop();
      return "xrootd " + c.name + " did not answer on port " + std::to_string(port_) +
             " within 20 s; log tail:\n" + tail;
    }
    // A port taken before xrootd's bind shows as "Address already in use",
    // and (seen under load) xrootd may exit with an empty log: both are
    // tried again on another port.
    bool retry = c.port == 0 && (tail.find("Address already in use") != std::string::npos ||
                                 tail.find_first_not_of(" \n") == std::string::npos);
    if (!retry || attempt == 4) {
      return "xrootd " + c.name + " exited at start; log " + log_ + " ends:\n" + tail;
    }
    spdlog::warn("xrootd {} exited at start on port {}; trying another port", c.name, port_);
  }
  return "xrootd " + c.name + ": no free port after 5 attempts";
}

bool XrootdServer::Reap(std::string* how) {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
  *how = "pid " + std::to_string(pid_) +
         (WIFSIGNALED(status) ? ", killed by signal " + std::to_string(WTERMSIG(status))
                              : ", exit status " + std::to_string(WEXITSTATUS(status)));
  pid_ = -1;
  return true;
}

void XrootdServer::Signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

void StopAll(const std::vector<XrootdServer*>& servers) {
  for (XrootdServer* s : servers) s->Signal(SIGTERM);
  for (XrootdServer* s : servers) s->Stop();
}

void XrootdServer::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  // xrootd may take seconds to honour SIGTERM; it keeps nothing worth a clean exit here.
  for (int i = 0; i < 20; ++i) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

}  // namespace perch::devfed
