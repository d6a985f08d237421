// Package api holds the wire types of gpucloud's /v1 JSON API: the request
// and response bodies that the handlers (package httpapi) decode and write
// and that the Go client (package client) sends and reads, and the few
// header formats both sides share. It has no handler logic and no HTTP
// client, and imports only the pure domain packages (cloud, catalog, money,
// stack), so that any program may speak the API without the server's
// packages.
//
// Each wire shape is declared here once: the domain services (package
// service) take these requests and answer these bodies, so that a handler
// passes them through instead of copying one type into another.
//
// The agent protocol's types are in package agentapi.
package api

import "strconv"

// ETag is the entity tag of a resource's version, as the ETag header shows
// it and If-Match takes it: the version in double quotes.
func ETag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }
