// ReplyPool: the threads that copy large read replies (over
// kInlineReplyBytes, read_ops.cc) into the kernel, so that the thread that
// completes a fetch (the net loop) does not.
//
// Thread-safety: post from any thread; join before the session goes.
#pragma once

#include <boost/asio/thread_pool.hpp>

namespace perch::fuse {

struct ReplyPool {
  boost::asio::thread_pool threads{2};
};

}  // namespace perch::fuse
