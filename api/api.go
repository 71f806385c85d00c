// Package api holds rollstore's HTTP API contract: openapi.yaml, an
// OpenAPI 3 description of every route, parameter, header, body and error,
// embedded here so tests and tools read the very file that is checked in.
//
// The service tests validate every request they send and every response
// they get against it (see api/openapitest), so the file cannot drift from
// the server.
package api

import _ "embed"

// OpenAPI is the text of openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
