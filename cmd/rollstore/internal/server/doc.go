// Package server is rollstore's HTTP API: tables, rollouts (single streamed
// puts and all-or-nothing batches), point reads of metadata and payloads
// with HTTP ranges, listing, Arrow scans, merges, health and metrics.
//
// A Server wraps one engine.DB. Handler returns the routes for tests and
// embedding; Serve runs them on a listener together with the in-process
// merger and drains gracefully when its context ends.
//
// Every error is answered as JSON, {"error":{"code":"…","message":"…"}},
// with a code from a small stable set chosen in one place (errors.go), so
// clients branch on codes rather than on messages.
//
// Record ids travel in one path segment. Clients must percent-encode them
// (url.PathEscape): an id containing '/' is sent as %2F and arrives intact,
// while a raw '/' would split the segment and match another route or none.
// Ids made only of dots ("." and "..") must be encoded as %2E, since clients
// and the router remove dot segments.
package server
