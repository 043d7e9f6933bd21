// PerchdEndpoint against a scripted HTTP server on loopback that answers as
// perchd's endpoint would, and breaks where a test asks it to: a body cut
// short, a resumed answer at the wrong byte or with another total, another
// federation's answer, 403/404. (The real endpoint is exercised by
// tests/integration/transfer_via_perchd_test.cc; it does not cut bodies on
// demand.)
#include "transfer/perchd_endpoint.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace perch::transfer {
namespace {

namespace fs = std::filesystem;
using core::StatusCode;

// Answers each connection's one request with what `handler` returns for the
// request's head, then closes the connection.
class ScriptedServer {
 public:
  using Handler = std::function<std::string(const std::string& request)>;
  explicit ScriptedServer(Handler handler) : handler_(std::move(handler)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedServer() {
    stopping_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  ScriptedServer(const ScriptedServer&) = delete;
  ScriptedServer& operator=(const ScriptedServer&) = delete;

  std::string Base() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> Requests() {
    std::lock_guard<std::mutex> l(mu_);
    return requests_;
  }

 private:
  void Serve() {
    while (!stopping_) {
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = read(c, buf, sizeof(buf));
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        requests_.push_back(req);
      }
      std::string out = handler_(req);
      for (size_t done = 0; done < out.size();) {
        ssize_t n = write(c, out.data() + done, out.size() - done);
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
      close(c);
    }
  }

  Handler handler_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> requests_;  // Protected by mu_
};

constexpr char kFederation[] = "pelican://fed.example:8443/";

std::string Object() {
  std::string s(300000, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>((i * 7919) >> 3);
  return s;
}

// The byte a request's "Range: bytes=N-" starts at; 0 without one.
size_t RangeStart(const std::string& req) {
  size_t at = req.find("Range: bytes=");
  return at == std::string::npos ? 0 : std::stoul(req.substr(at + 13));
}

std::string Answer(int status, const std::string& body, const std::string& extra = "",
                   const std::string& federation = kFederation) {
  return "HTTP/1.1 " + std::to_string(status) +
         " X\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nX-Perch-Federation: " + federation + "\r\n" + extra + "Connection: close\r\n\r\n" +
         body;
}

// An answer from byte `from` of `object`: 200 when from is 0, else 206; the
// body stops after `send` bytes (a cut) when `send` is shorter.
std::string Part(const std::string& object, size_t from, size_t send, uint64_t total) {
  std::string body = object.substr(from);
  std::string head = from == 0 ? "HTTP/1.1 200 OK\r\n" : "HTTP/1.1 206 Partial Content\r\n";
  if (from > 0) {
    head += "Content-Range: bytes " + std::to_string(from) + "-" + std::to_string(total - 1) + "/" +
            std::to_string(total) + "\r\n";
  }
  head += "Content-Length: " + std::to_string(body.size()) +
          "\r\nX-Perch-Federation: " + kFederation + "\r\nConnection: close\r\n\r\n";
  return head + body.substr(0, send);
}

class PerchdEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("perch-endpoint-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    mount_.federation = kFederation;
    mount_.discovery = "https://fed.example:8443";
    url_ = *http::ParseFederationUrl("pelican://fed.example:8443/ns/o.bin");
  }
  void TearDown() override { fs::remove_all(dir_); }

  core::Result<FetchReport> Fetch(ScriptedServer& server) {
    PerchdEndpoint endpoint(loop_, server.Base());
    auto file = TempFile::CreateFor((dir_ / "o.bin").string());
    EXPECT_TRUE(file.ok());
    auto r = endpoint.Fetch(url_, mount_, *file);
    if (r.ok()) {
      EXPECT_TRUE(file->Commit().ok());
    }
    return r;
  }
  std::string Written() {
    std::ifstream in(dir_ / "o.bin", std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  fs::path dir_;
  http::CurlLoop loop_{http::CurlLoop::Options{}};
  PerchdMount mount_;
  http::FederationUrl url_;
};

TEST_F(PerchdEndpointTest, ACutBodyIsResumedWhereItStopped) {
  const std::string obj = Object();
  std::atomic<int> n{0};
  ScriptedServer server([&](const std::string& req) {
    size_t from = RangeStart(req);
    // The first two answers are cut: after 100000 bytes, then 50000 more.
    int i = n++;
    size_t send = i == 0 ? 100000 : (i == 1 ? 50000 : obj.size());
    return Part(obj, from, send, obj.size());
  });
  auto r = Fetch(server);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(Written() == obj);
  EXPECT_EQ(r->file_bytes, obj.size());
  EXPECT_EQ(r->network_bytes, obj.size());  // nothing fetched twice
  EXPECT_EQ(r->resumes, 2u);
  EXPECT_EQ(r->via, "perchd");
  auto reqs = server.Requests();
  // Three GETs, then the HEAD that asks for the object's digest (as Pelican's
  // client does after a download; this server states none: nothing to check).
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_EQ(reqs[0].rfind("GET /ns/o.bin HTTP/1.1\r\n", 0), 0u) << reqs[0];
  EXPECT_EQ(reqs[0].find("Range:"), std::string::npos);
  EXPECT_NE(reqs[1].find("Range: bytes=100000-\r\n"), std::string::npos) << reqs[1];
  EXPECT_NE(reqs[2].find("Range: bytes=150000-\r\n"), std::string::npos) << reqs[2];
  EXPECT_EQ(reqs[3].rfind("HEAD /ns/o.bin HTTP/1.1\r\n", 0), 0u) << reqs[3];
  EXPECT_NE(reqs[3].find("Want-Digest:"), std::string::npos) << reqs[3];
  EXPECT_EQ(r->digests.size(), 0u);
  for (const std::string& q : reqs) {
    EXPECT_EQ(q.find("Authorization"), std::string::npos);  // never a token to perchd
  }
}

TEST_F(PerchdEndpointTest, AResumeThatDoesNotFitIsCorrupt) {
  const std::string obj = Object();
  for (int variant = 0; variant < 2; ++variant) {
    std::atomic<int> n{0};
    ScriptedServer server([&](const std::string& req) {
      if (n++ == 0) return Part(obj, 0, 1000, obj.size());
      size_t from = RangeStart(req);
      // Another total (the object changed), or bytes from elsewhere.
      return variant == 0 ? Part(obj + "x", from, obj.size(), obj.size() + 1)
                          : Part(obj, from + 10, obj.size(), obj.size());
    });
    auto r = Fetch(server);
    ASSERT_FALSE(r.ok()) << variant;
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().ToString();
    EXPECT_FALSE(fs::exists(dir_ / "o.bin"));
  }
}

TEST_F(PerchdEndpointTest, ErrorsAndForeignAnswers) {
  struct Case {
    std::string answer;
    StatusCode code;
    std::string message;
  };
  std::vector<Case> cases = {
      {Answer(403, "/ns/o.bin is in a protected namespace"), StatusCode::kPermissionDenied,
       "perchd answered 403 (protected namespace): /ns/o.bin is in a protected namespace"},
      {Answer(404, "no such object"), StatusCode::kNotFound, "perchd answered 404"},
      {Answer(503, ""), StatusCode::kUnavailable, "perchd answered 503"},
      {Answer(200, "abc", "", "osdf:///"), StatusCode::kCorrupt,
       "answered for federation osdf:///, not pelican://fed.example:8443/"},
      {"HTTP/1.1 206 P\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc", StatusCode::kCorrupt,
       "206 without Content-Range"},
  };
  for (const Case& c : cases) {
    ScriptedServer server([&](const std::string&) { return c.answer; });
    auto r = Fetch(server);
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().ToString();
  }
}

TEST_F(PerchdEndpointTest, AnswersThatBringNothingEndTheDownload) {
  const std::string obj = Object();
  ScriptedServer server([&](const std::string& req) {
    return Part(obj, RangeStart(req), 0, obj.size());  // headers, then the connection closes
  });
  auto r = Fetch(server);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_EQ(server.Requests().size(), 3u);  // three attempts without a new byte
}

TEST_F(PerchdEndpointTest, TheMountList) {
  ScriptedServer server([&](const std::string& req) {
    if (req.rfind("GET /.perch/mounts ", 0) != 0) return Answer(404, "");
    return Answer(200, R"({"mounts":[{"federation":"pelican://fed.example:8443/",)"
                       R"("discovery":"https://fed.example:8443","prefix":"/ns",)"
                       R"("mountpoint":"/fed"}]})");
  });
  PerchdEndpoint endpoint(loop_, server.Base());
  auto mounts = endpoint.LoadMounts();
  ASSERT_TRUE(mounts.ok()) << mounts.status().ToString();
  ASSERT_EQ(mounts->size(), 1u);
  EXPECT_EQ(MountServing(*mounts, url_), &(*mounts)[0]);
  PerchdEndpoint nobody_home(loop_, "http://127.0.0.1:1");
  auto none = nobody_home.LoadMounts();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace perch::transfer
