#pragma once

// A Beast body that streams one byte range of an open file in 64 KiB reads, so a seek in a
// long recording sends only what was asked for and memory stays flat with file size.

#include <algorithm>
#include <cstdint>
#include <utility>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/file.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>

namespace calleval::edge {

struct FileRangeBody {
  struct value_type {
    boost::beast::file file;
    uint64_t offset = 0;
    uint64_t length = 0;
  };

  static uint64_t size(const value_type& body) { return body.length; }

  class writer {
   public:
    using const_buffers_type = boost::asio::const_buffer;

    template <bool isRequest, class Fields>
    writer(boost::beast::http::header<isRequest, Fields>&, value_type& body) : body_(body) {}

    void init(boost::beast::error_code& ec) {
      body_.file.seek(body_.offset, ec);
      remaining_ = body_.length;
    }

    boost::optional<std::pair<const_buffers_type, bool>> get(boost::beast::error_code& ec) {
      ec = {};
      if (remaining_ == 0) return boost::none;
      const size_t wanted = static_cast<size_t>(std::min<uint64_t>(remaining_, sizeof(buffer_)));
      const size_t got = body_.file.read(buffer_, wanted, ec);
      if (ec) return boost::none;
      if (got == 0) {  // the file shrank under us
        ec = boost::beast::http::error::short_read;
        return boost::none;
      }
      remaining_ -= got;
      return {{const_buffers_type(buffer_, got), remaining_ > 0}};
    }

   private:
    value_type& body_;
    uint64_t remaining_ = 0;
    char buffer_[64 * 1024];
  };
};

}  // namespace calleval::edge
