#include "tests/devfed/devfed_harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#ifndef PERCH_DEVFED_PATH
#error "PERCH_DEVFED_PATH must name the perch-devfed binary"
#endif

namespace perch::testing {

namespace fs = std::filesystem;

namespace {

// "cache /ns 2: http://127.0.0.1:P pid=N" -> url, pid
void ParseServer(const std::string& rest, std::string* url, pid_t* pid) {
  std::istringstream ss(rest);
  std::string pid_part;
  ss >> *url >> pid_part;
  if (pid_part.rfind("pid=", 0) == 0) *pid = static_cast<pid_t>(std::atoi(pid_part.c_str() + 4));
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

bool DevFed::XrootdAvailable() { return std::system("command -v xrootd >/dev/null 2>&1") == 0; }

DevFed::DevFed(Options options) : options_(std::move(options)) {}

DevFed::~DevFed() { StopServers(); }

std::string DevFed::Start() {
  std::string t = (fs::temp_directory_path() / "perch-devfed-test-XXXXXX").string();
  if (mkdtemp(t.data()) == nullptr) return "mkdtemp failed";
  work_ = t;
  fs::permissions(work_, fs::perms(0755));  // xrootd (another user) works below it
  std::vector<std::string> args = {PERCH_DEVFED_PATH};
  bool any_protected = false;
  for (const Export& e : options_.exports) {
    args.push_back("--export");
    args.push_back(e.ns + "=" + e.dir);
    if (e.protected_) {
      args.push_back("--protected");
      args.push_back(e.ns);
      any_protected = true;
    }
    if (!e.listings) {
      args.push_back("--no-listings");
      args.push_back(e.ns);
    }
  }
  args.push_back("--caches");
  args.push_back(std::to_string(options_.caches));
  if (options_.tls) args.push_back("--tls");
  if (any_protected) {
    args.push_back("--token-out");
    args.push_back(work_ + "/token");
  }
  args.push_back("--work-dir");
  args.push_back(work_);
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
  std::string err_path = work_ + "/devfed.err";
  int out[2];
  if (pipe(out) != 0) return "pipe failed";
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // a test that dies takes its federation along
    dup2(out[1], 1);
    int fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 2);
    close(out[0]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  std::string buf;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  bool ready = false;
  while (!ready && std::chrono::steady_clock::now() < end) {
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    char chunk[4096];
    ssize_t n = read(out[0], chunk, sizeof(chunk));
    if (n <= 0) break;  // devfed exited
    buf.append(chunk, static_cast<size_t>(n));
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (line == "ready") {
        ready = true;
      } else if (line.rfind("federation: ", 0) == 0) {
        federation_ = line.substr(12);
      } else if (line.rfind("director: ", 0) == 0) {
        director_ = line.substr(10);
      } else if (line.rfind("ca: ", 0) == 0) {
        ca_ = line.substr(4);
      } else if (line.rfind("token: ", 0) == 0) {
        token_ = line.substr(7);
      } else if (line.rfind("origin ", 0) == 0) {
        size_t colon = line.find(": ");
        Server s;
        ParseServer(line.substr(colon + 2), &s.url, &s.pid);
        origins_[line.substr(7, colon - 7)] = s;
      } else if (line.rfind("cache ", 0) == 0) {
        size_t colon = line.find(": ");
        std::string head = line.substr(6, colon - 6);  // "/ns 2"
        Server s;
        ParseServer(line.substr(colon + 2), &s.url, &s.pid);
        caches_[head.substr(0, head.rfind(' '))].push_back(s);
      }
    }
  }
  close(out[0]);
  if (!ready) {
    std::string err = Slurp(err_path);
    StopServers();
    return "perch-devfed did not become ready:\n" + err;
  }
  return "";
}

void DevFed::Stop() {
  std::vector<std::string> urls = {federation_, director_};
  for (const auto& [ns, s] : origins_) urls.push_back(s.url);
  for (const auto& [ns, list] : caches_) {
    for (const auto& s : list) urls.push_back(s.url);
  }
  StopServers();
  for (const std::string& url : urls) HoldPort(url);
}

void DevFed::HoldPort(const std::string& url) {
  const size_t colon = url.rfind(':');
  if (url.empty() || colon == std::string::npos) return;
  const int port = std::atoi(url.c_str() + colon + 1);
  if (port <= 0) return;
  // A server just killed lets its port go within milliseconds.
  auto held = std::make_unique<devfed::HeldPort>(port, std::chrono::seconds(2));
  if (held->held()) held_.push_back(std::move(held));
}

void DevFed::StopServers() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    bool gone = false;
    for (int i = 0; i < 300 && !gone; ++i) {
      gone = waitpid(pid_, nullptr, WNOHANG) == pid_;
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!gone) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }
  // Whatever devfed could not stop: its servers by pid.
  for (auto& [ns, s] : origins_) {
    if (s.pid > 0) kill(s.pid, SIGKILL);
  }
  for (auto& [ns, list] : caches_) {
    for (auto& s : list) {
      if (s.pid > 0) kill(s.pid, SIGKILL);
    }
  }
  origins_.clear();
  caches_.clear();
  if (!work_.empty()) {
    std::error_code ec;
    fs::remove_all(work_, ec);
    work_.clear();
  }
}

std::vector<pid_t> DevFed::ServerPids() const {
  std::vector<pid_t> out;
  for (const auto& [ns, s] : origins_) out.push_back(s.pid);
  for (const auto& [ns, list] : caches_) {
    for (const auto& s : list) out.push_back(s.pid);
  }
  return out;
}

std::string DevFed::ErrLog() const { return work_.empty() ? "" : Slurp(work_ + "/devfed.err"); }

std::string DevFed::OriginUrl(const std::string& ns) const {
  auto it = origins_.find(ns);
  return it == origins_.end() ? "" : it->second.url;
}

std::vector<std::string> DevFed::CacheUrls(const std::string& ns) const {
  std::vector<std::string> out;
  auto it = caches_.find(ns);
  if (it != caches_.end()) {
    for (const auto& s : it->second) out.push_back(s.url);
  }
  return out;
}

void DevFed::Signal(const std::string& ns, int i, int sig) {
  if (i < 0) {
    auto it = origins_.find(ns);
    if (it != origins_.end() && it->second.pid > 0) kill(it->second.pid, sig);
    return;
  }
  auto it = caches_.find(ns);
  if (it != caches_.end() && static_cast<size_t>(i) < it->second.size() && it->second[i].pid > 0) {
    kill(it->second[i].pid, sig);
  }
}

void DevFed::KillCache(const std::string& ns, size_t i) {
  auto it = caches_.find(ns);
  if (it != caches_.end() && i < it->second.size() && it->second[i].pid > 0) {
    kill(it->second[i].pid, SIGKILL);
    HoldPort(it->second[i].url);
  }
}

}  // namespace perch::testing
