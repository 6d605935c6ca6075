//! The HTTP and gRPC front-ends: the HTTP classifier and quota reader, the reqwest
//! middleware (against the simulated API served over HTTP, and against Flask-Limiter
//! itself), the tower layer, and the gRPC classifier against a real tonic server.

#[path = "../support/mod.rs"]
mod support;

#[cfg(feature = "http")]
mod announced;
#[cfg(feature = "reqwest-middleware")]
mod bare_429;
#[cfg(feature = "reqwest-middleware")]
mod express_rate_limit;
#[cfg(feature = "reqwest-middleware")]
mod flask_limiter;
#[cfg(feature = "http")]
mod http;
#[cfg(feature = "http")]
mod http_quota;
#[cfg(feature = "reqwest-middleware")]
mod moving_window;
#[cfg(feature = "reqwest-middleware")]
mod nestjs_throttler;
#[cfg(feature = "reqwest-middleware")]
mod reqwest_middleware;
#[cfg(feature = "reqwest-middleware")]
mod sliding_window_counter;
#[cfg(feature = "reqwest-middleware")]
mod slowapi;
#[cfg(feature = "reqwest-middleware")]
mod stacked_limits;
#[cfg(feature = "tonic")]
mod tonic;
#[cfg(all(feature = "tower", feature = "http"))]
mod tower;
