// HttpServer: the small HTTP(S) server under perch-devfed's director and its
// discovery host. A Boost.Beast server on 127.0.0.1, a thread per connection
// (a test tool: simplicity over scale); every answer comes from a handler.
// Like Go's net/http it adds a Date header, sends a HEAD answer's headers
// only (Content-Length only when the handler produced a body), and closes a
// connection after a request it could not parse.
//
// Thread-safety: the handler runs on many connection threads at once; Stop()
// and the destructor from the owning thread.
#pragma once

#include <boost/beast/http.hpp>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace perch::devfed {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;

struct HttpReply {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // in order; names may repeat
  std::string body;
  bool close = false;  // close the connection after this answer
};

class HttpServer {
 public:
  using Handler = std::function<HttpReply(const HttpRequest&)>;

  // `cert`/`key` empty: plain HTTP. Binds 127.0.0.1:`port` (0 = any free
  // port); throws std::exception when it cannot.
  HttpServer(Handler handler, int port, const std::string& cert, const std::string& key);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // "http(s)://127.0.0.1:PORT".
  std::string Url() const;
  int port() const;
  void Stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace perch::devfed
