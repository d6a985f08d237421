package filexfer

import (
	"errors"
	"fmt"
	"io"

	"github.com/gpucloud/gpucloud/agentapi"
)

// Client speaks the protocol's client side over one connection. It is not
// safe for concurrent use: requests take turns. Cancel a call by closing
// the connection.
type Client struct {
	r   *frameReader
	w   *frameWriter
	buf []byte
	// checksum is the algorithm Put, Get and Sum ask the agent for.
	checksum string
}

// SetChecksum sets the algorithm Put, Get and Sum ask the agent for
// (agentapi.ChecksumCRC32C or ChecksumSHA256; "" is DefaultChecksum).
// An agent from before the algorithm was named answers SHA-256 whatever
// is asked: the Digest says which it is.
func (c *Client) SetChecksum(algo string) error {
	if algo == "" {
		algo = DefaultChecksum
	}
	if _, err := newHash(algo); err != nil {
		return err
	}
	c.checksum = algo
	return nil
}

// NewClient returns a client over conn.
func NewClient(conn io.ReadWriter) *Client {
	return &Client{r: newFrameReader(conn), w: newFrameWriter(conn), buf: make([]byte, ChunkSize), checksum: DefaultChecksum}
}

// response reads one response; its FileError comes back as the error.
func (c *Client) response() (*agentapi.FileResponse, error) {
	var resp agentapi.FileResponse
	if err := c.r.header(&resp); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("filexfer: the session ended: %w", io.ErrUnexpectedEOF)
		}
		return nil, err
	}
	if resp.Error != nil {
		return &resp, resp.Error
	}
	return &resp, nil
}

func (c *Client) do(req agentapi.FileRequest) (*agentapi.FileResponse, error) {
	if err := c.w.header(req); err != nil {
		return nil, err
	}
	return c.response()
}

// IsNotFound reports whether err is the agent's not_found.
func IsNotFound(err error) bool {
	var fe *agentapi.FileError
	return errors.As(err, &fe) && fe.Code == agentapi.FileNotFound
}

// Stat describes p. A file that is not there but has a partial upload
// answers not_found with the partial's size in the info.
func (c *Client) Stat(p string) (*agentapi.FileInfo, error) {
	resp, err := c.do(agentapi.FileRequest{Op: agentapi.FileOpStat, Path: p})
	if resp != nil && resp.Info != nil {
		return resp.Info, err
	}
	if err == nil {
		return nil, fmt.Errorf("%w: stat answered without info", ErrFrame)
	}
	return nil, err
}

// List lists the directory p recursively (paths relative to p).
func (c *Client) List(p string) ([]agentapi.FileInfo, error) {
	if err := c.w.header(agentapi.FileRequest{Op: agentapi.FileOpList, Path: p}); err != nil {
		return nil, err
	}
	var all []agentapi.FileInfo
	for {
		resp, err := c.response()
		if err != nil {
			return nil, err
		}
		all = append(all, resp.Entries...)
		if resp.Done {
			return all, nil
		}
	}
}

// Mkdir makes the directory p and its parents.
func (c *Client) Mkdir(p string, mode uint32) error {
	_, err := c.do(agentapi.FileRequest{Op: agentapi.FileOpMkdir, Path: p, Mode: mode})
	return err
}

// Sum is the checksum of the file p.
func (c *Client) Sum(p string) (Digest, error) {
	resp, err := c.do(agentapi.FileRequest{Op: agentapi.FileOpSum, Path: p, Checksum: c.checksum})
	if err != nil {
		return Digest{}, err
	}
	return respDigest(resp), nil
}

// Put writes size bytes to p from offset, the rest of the file read from
// r (which is at offset), through p's partial file, and returns the
// agent's checksum of the whole file.
func (c *Client) Put(p string, r io.Reader, offset, size int64, mode uint32) (Digest, error) {
	if _, err := c.do(agentapi.FileRequest{Op: agentapi.FileOpPut, Path: p, Offset: offset, Size: size, Mode: mode, Checksum: c.checksum}); err != nil {
		return Digest{}, err
	}
	n, rerr, err := c.w.sendData(io.LimitReader(r, size-offset), c.buf)
	if err != nil {
		return Digest{}, err
	}
	// The agent answers a short stream (a local read error) with an error
	// that keeps the partial file.
	resp, err := c.response()
	if rerr != nil {
		return Digest{}, rerr
	}
	if err != nil {
		return Digest{}, err
	}
	if n != size-offset {
		return Digest{}, fmt.Errorf("%s: sent %d of %d bytes: the file shrank while it was read", p, offset+n, size)
	}
	return respDigest(resp), nil
}

// Get reads p from offset into w. info is called with the file's
// description before the data comes; Get returns the agent's checksum of
// the whole file.
func (c *Client) Get(p string, offset int64, w io.Writer, info func(agentapi.FileInfo)) (Digest, error) {
	resp, err := c.do(agentapi.FileRequest{Op: agentapi.FileOpGet, Path: p, Offset: offset, Checksum: c.checksum})
	if err != nil {
		return Digest{}, err
	}
	if resp.Info == nil {
		return Digest{}, fmt.Errorf("%w: get answered without info", ErrFrame)
	}
	if info != nil {
		info(*resp.Info)
	}
	n, werr, err := c.r.copyData(w, resp.Info.Size-offset)
	if err != nil {
		return Digest{}, err
	}
	trailer, err := c.response()
	if werr != nil {
		return Digest{}, werr
	}
	if err != nil {
		return Digest{}, err
	}
	if n != resp.Info.Size-offset {
		return Digest{}, fmt.Errorf("%s: got %d of %d bytes", p, offset+n, resp.Info.Size)
	}
	return respDigest(trailer), nil
}
