#include "devfed/wan_proxy.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <deque>
#include <thread>

namespace perch::devfed {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {
constexpr size_t kMaxQueued = 4 << 20;  // per direction of one connection
}

struct WanLink::Impl {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  std::thread thread;
  std::chrono::microseconds delay;
  double bytes_per_us = 0;                      // 0: unlimited
  std::array<Clock::time_point, 2> busy_until;  // per direction: when the line is free again
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  std::mt19937_64 rng;  // fault draws of every connection
  FaultCounters counters;

  // When `n` bytes handed to the line now in direction `dir` arrive.
  Clock::time_point Schedule(int dir, size_t n) {
    auto now = Clock::now();
    auto start = std::max(now, busy_until[dir]);
    auto done = start;
    if (bytes_per_us > 0) {
      done +=
          std::chrono::microseconds(static_cast<int64_t>(static_cast<double>(n) / bytes_per_us));
    }
    busy_until[dir] = done;
    return done + delay;
  }
};

namespace {

struct Session;

// One direction of one connection: read, queue for the line, deliver on time.
struct Pipe : std::enable_shared_from_this<Pipe> {
  Pipe(std::shared_ptr<Session> s, tcp::socket& f, tcp::socket& t, int d, WanLink::Impl* l)
      : owner(std::move(s)), from(f), to(t), dir(d), link(l), timer(l->io) {}

  std::shared_ptr<Session> owner;
  tcp::socket& from;
  tcp::socket& to;
  int dir;
  WanLink::Impl* link;
  asio::steady_timer timer;
  std::array<char, 65536> buf{};
  struct Chunk {
    Clock::time_point due;
    std::string data;
    Fault fault;  // applied once `data` is delivered
  };
  std::deque<Chunk> queue;
  size_t queued = 0;
  bool reading = false, writing = false, eof = false, faulted = false;

  void Read();
  // Queues `data` for the line, then `fault` (none if both are empty).
  void Push(std::string data, Fault fault);
  void Deliver();
  void Close();
  void Apply(Fault fault);
};

struct Session : std::enable_shared_from_this<Session> {
  explicit Session(asio::io_context& io) : client(io), server(io) {}
  tcp::socket client;
  tcp::socket server;
  std::unique_ptr<ResponseFaults> faults;  // null: bytes pass untouched
};

void Pipe::Close() {
  boost::system::error_code ignored;
  from.close(ignored);
  to.close(ignored);
  timer.cancel();
}

// cut: FIN to the client mid-body (a short body); reset: RST; stall: nothing
// more is forwarded, the connection stays open.
void Pipe::Apply(Fault fault) {
  boost::system::error_code ignored;
  if (fault == Fault::kReset) to.set_option(tcp::socket::linger(true, 0), ignored);
  if (fault == Fault::kCut || fault == Fault::kReset) Close();
}

void Pipe::Push(std::string data, Fault fault) {
  if (data.empty() && fault == Fault::kNone) return;
  size_t n = data.size();
  queue.push_back(Chunk{link->Schedule(dir, n), std::move(data), fault});
  queued += n;
}

void Pipe::Read() {
  if (reading || eof || faulted || queued > kMaxQueued) return;
  reading = true;
  from.async_read_some(
      asio::buffer(buf), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
        self->reading = false;
        if (ec) {
          if (ResponseFaults* f = self->owner->faults.get(); f != nullptr && self->dir == 1)
            self->Push(f->OnResponseEnd(), Fault::kNone);  // an incomplete header block
          self->eof = true;
          if (!self->writing) self->Deliver();  // flushes, then passes the end on
          return;
        }
        std::string data;
        Fault fault = Fault::kNone;
        ResponseFaults* f = self->owner->faults.get();
        if (f != nullptr && self->dir == 1) {
          auto out = f->OnResponseBytes(std::string_view(self->buf.data(), n));
          data = std::move(out.bytes);
          fault = out.fault;
        } else {
          data.assign(self->buf.data(), n);
          if (f != nullptr) f->OnRequestBytes(data);
        }
        self->faulted = fault != Fault::kNone;
        self->Push(std::move(data), fault);
        self->Read();
        if (!self->writing) self->Deliver();
      });
}

void Pipe::Deliver() {
  if (queue.empty()) {
    if (eof) {
      boost::system::error_code ignored;
      to.shutdown(tcp::socket::shutdown_send, ignored);
    }
    return;
  }
  writing = true;
  timer.expires_at(queue.front().due);
  timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec) return;
    asio::async_write(self->to, asio::buffer(self->queue.front().data),
                      [self](boost::system::error_code ec, size_t n) {
                        self->writing = false;
                        if (ec) return self->Close();
                        self->queued -= n;
                        Fault fault = self->queue.front().fault;
                        self->queue.pop_front();
                        if (fault != Fault::kNone) return self->Apply(fault);
                        self->Read();  // room again
                        self->Deliver();
                      });
  });
}

void Accept(WanLink::Impl* link, tcp::acceptor* acceptor, int port,
            std::shared_ptr<const ResponseOptions> responses) {
  auto session = std::make_shared<Session>(link->io);
  if (responses->any())
    session->faults = std::make_unique<ResponseFaults>(*responses, &link->rng, &link->counters);
  acceptor->async_accept(
      session->client, [link, acceptor, port, responses, session](boost::system::error_code ec) {
        if (ec) return;  // stopped
        Accept(link, acceptor, port, responses);
        session->server.async_connect(
            tcp::endpoint(asio::ip::address_v4::loopback(), static_cast<uint16_t>(port)),
            [link, session](boost::system::error_code ec) {
              if (ec) {
                boost::system::error_code ignored;
                session->client.close(ignored);
                return;
              }
              session->client.set_option(tcp::no_delay(true));
              session->server.set_option(tcp::no_delay(true));
              std::make_shared<Pipe>(session, session->client, session->server, 0, link)->Read();
              std::make_shared<Pipe>(session, session->server, session->client, 1, link)->Read();
            });
      });
}

}  // namespace

WanLink::WanLink(std::chrono::microseconds one_way_delay, double rate_mbit, uint64_t seed)
    : impl_(std::make_unique<Impl>()) {
  impl_->rng.seed(seed);
  impl_->delay = one_way_delay;
  impl_->bytes_per_us = rate_mbit / 8.0;  // Mbit/s = bits per µs
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
}

WanLink::~WanLink() { Stop(); }

int WanLink::AddProxy(int port, std::string* err, ResponseOptions responses) {
  auto acceptor = std::make_unique<tcp::acceptor>(impl_->io);
  boost::system::error_code ec;
  tcp::endpoint ep(asio::ip::address_v4::loopback(), 0);
  acceptor->open(ep.protocol(), ec);
  if (!ec) acceptor->bind(ep, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    *err = "WAN proxy: " + ec.message();
    return 0;
  }
  int proxy_port = acceptor->local_endpoint().port();
  tcp::acceptor* raw = acceptor.get();
  impl_->acceptors.push_back(std::move(acceptor));
  asio::post(impl_->io, [impl = impl_.get(), raw, port,
                         r = std::make_shared<const ResponseOptions>(std::move(responses))] {
    Accept(impl, raw, port, r);
  });
  return proxy_port;
}

const FaultCounters& WanLink::fault_counters() const { return impl_->counters; }

void WanLink::Stop() {
  if (!impl_->thread.joinable()) return;
  impl_->io.stop();
  impl_->thread.join();
}

}  // namespace perch::devfed
