#pragma once
// The console's HTTP requests (docs/console.md) answered on the --console listener (a MetricsServer with this
// handler: the same connection cap, request limits and deadlines as the metrics listener).
//
// Access: the console is a TCP peer of the control protocol. Reads (/api/status, the page, frames) need no token;
// every control request goes through the daemon's dispatcher, so the access policy decides exactly as for
// --control-tcp: a mutation needs "Authorization: Bearer TOKEN" (the --control-token secret), a wrong token is
// refused whatever it asks (403). The token never travels in a URL or a cookie, so another site cannot make a
// browser send it (no CSRF).
#include <functional>
#include <memory>

#include "daemon/control_server.hpp"
#include "daemon/metrics.hpp"
#include "runtime/thumbnail_tap.hpp"

namespace sluice {

class ConsoleHandler {
 public:
  // The daemon's control dispatcher (Service::dispatch): access policy, then the request's handler.
  using Dispatch = std::function<void(const ControlRequest&, const PeerCredentials&, ControlServer::Reply)>;
  // `thumbnails` may be null (a build without the media library): frames are then 404 with the reason.
  ConsoleHandler(Dispatch dispatch, std::shared_ptr<ThumbnailTap> thumbnails)
      : dispatch_(std::move(dispatch)), thumbnails_(std::move(thumbnails)) {}

  void operator()(const HttpRequestView& request, HttpRespond respond) const;

 private:
  void control(const ControlRequest& request, const HttpRequestView& http, HttpRespond respond) const;
  Dispatch dispatch_;
  std::shared_ptr<ThumbnailTap> thumbnails_;
};

}  // namespace sluice
