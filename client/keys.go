package client

import (
	"context"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/rest"
)

// ImportKey imports an SSH public key; idemKey as for CreateInstance.
func (c *Client) ImportKey(ctx context.Context, req api.ImportKeyRequest, idemKey string) (*cloud.Key, error) {
	var out cloud.Key
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/keys", Body: req, Header: idemHeader(idemKey), Out: &out})
	return rest.NilOnErr(&out, err)
}

// Keys lists SSH public keys: the caller's tenant's, or for an admin one
// tenant's (tenant not empty) or every tenant's.
func (c *Client) Keys(ctx context.Context, tenant string) ([]*cloud.Key, error) {
	var out api.KeyList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/keys" + rest.Query("tenant", tenant), Out: &out})
	return out.Keys, err
}

// GetKey reads an SSH public key.
func (c *Client) GetKey(ctx context.Context, id string) (*cloud.Key, error) {
	var out cloud.Key
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("keys", id), Out: &out})
	return rest.NilOnErr(&out, err)
}

// DeleteKey deletes an SSH public key.
func (c *Client) DeleteKey(ctx context.Context, id string) error {
	_, _, err := c.r.Do(ctx, rest.Call{Method: "DELETE", Path: rest.PathOf("keys", id)})
	return err
}
