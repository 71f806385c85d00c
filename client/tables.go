package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// ListTables returns the tables' names, in order.
func (c *Client) ListTables(ctx context.Context) ([]string, error) {
	var out struct {
		Tables []string `json:"tables"`
	}
	_, err := c.doJSON(ctx, http.MethodGet, "/v1/tables", nil, &out, http.StatusOK)
	return out.Tables, err
}

// CreateTable creates a table; ErrConflict (code table_exists) if it
// exists. Names are [A-Za-z0-9_][A-Za-z0-9._-]*, at most 128 bytes.
func (c *Client) CreateTable(ctx context.Context, name string) error {
	_, err := c.doJSON(ctx, http.MethodPut, tablePath(name), nil, nil, http.StatusCreated)
	return err
}

// CreateTableWithPartitions creates an empty table of n hash partitions
// (1 to 1024; CreateTable takes the server's --partitions).
func (c *Client) CreateTableWithPartitions(ctx context.Context, name string, n int) error {
	_, err := c.doJSON(ctx, http.MethodPut, tablePath(name), url.Values{"partitions": {strconv.Itoa(n)}}, nil, http.StatusCreated)
	return err
}

// TableStatus returns a table's latest view: base version, rows, pending
// generations per shard.
func (c *Client) TableStatus(ctx context.Context, name string) (TableStatus, error) {
	var st TableStatus
	_, err := c.doJSON(ctx, http.MethodGet, tablePath(name), nil, &st, http.StatusOK)
	return st, err
}

// DropTable drops a table: writes are refused at once and its data is
// deleted.
func (c *Client) DropTable(ctx context.Context, name string) error {
	_, err := c.doJSON(ctx, http.MethodDelete, tablePath(name), nil, nil, http.StatusNoContent)
	return err
}

// Versions lists the retained base versions, oldest first.
func (c *Client) Versions(ctx context.Context, table string) ([]VersionInfo, error) {
	var out struct {
		Versions []VersionInfo `json:"versions"`
	}
	_, err := c.doJSON(ctx, http.MethodGet, tablePath(table, "versions"), nil, &out, http.StatusOK)
	return out.Versions, err
}

// Merge seals the table's open generation and runs one merge pass.
func (c *Client) Merge(ctx context.Context, table string) (MergeResult, error) {
	var res MergeResult
	_, err := c.doJSON(ctx, http.MethodPost, tablePath(table, "merge"), nil, &res, http.StatusOK)
	return res, err
}

// Health reports whether the process is alive (GET /healthz).
func (c *Client) Health(ctx context.Context) error {
	_, err := c.doJSON(ctx, http.MethodGet, "/healthz", nil, nil, http.StatusOK)
	return err
}

// Ready reports whether the server takes traffic (GET /readyz): nil, or an
// ErrOverloaded *APIError with code not_ready or draining.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.doJSON(ctx, http.MethodGet, "/readyz", nil, nil, http.StatusOK)
	return err
}

// maxMetrics bounds the metrics text read.
const maxMetrics = 32 << 20

// Metrics returns the Prometheus text exposition (GET /metrics).
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	req, err := c.newRequest(ctx, http.MethodGet, "/metrics", nil, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.send(req, http.StatusOK)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxMetrics))
	if err != nil {
		return nil, fmt.Errorf("rollstore client: reading metrics: %w", err)
	}
	return b, nil
}
