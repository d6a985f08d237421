package filexfer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/gpucloud/gpucloud/agentapi"
)

// DefaultChecksum is the algorithm a copy compares files with when its
// Options name none.
const DefaultChecksum = agentapi.ChecksumCRC32C

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// newHash is algo's hash; "" is SHA-256, as the protocol had it before
// the algorithm was named.
func newHash(algo string) (hash.Hash, error) {
	switch algo {
	case agentapi.ChecksumCRC32C:
		return crc32.New(castagnoli), nil
	case agentapi.ChecksumSHA256, "":
		return sha256.New(), nil
	}
	return nil, &agentapi.FileError{Code: agentapi.FileInvalid,
		Message: fmt.Sprintf("unknown checksum %q (known: %s, %s)", algo, agentapi.ChecksumCRC32C, agentapi.ChecksumSHA256)}
}

// CheckChecksum reports whether algo is a checksum this package knows
// ("" is the default).
func CheckChecksum(algo string) error {
	if algo == "" {
		return nil
	}
	_, err := newHash(algo)
	return err
}

// Digest is a file's checksum as the agent or this side computed it.
type Digest struct {
	Algo string // agentapi.ChecksumCRC32C or ChecksumSHA256
	Hex  string
}

func (d Digest) String() string { return d.Algo + " " + d.Hex }

// digestOf is the Digest of h, computed with algo.
func digestOf(algo string, h hash.Hash) Digest {
	if algo == "" {
		algo = agentapi.ChecksumSHA256
	}
	return Digest{Algo: algo, Hex: hex.EncodeToString(h.Sum(nil))}
}

// respDigest is the Digest a response carries.
func respDigest(resp *agentapi.FileResponse) Digest {
	algo := resp.Checksum
	if algo == "" {
		algo = agentapi.ChecksumSHA256
	}
	return Digest{Algo: algo, Hex: resp.Sum}
}

// hashAll is the Digest of everything r holds, computed with algo (an
// agent that answered with another algorithm than the one asked for,
// one from before the algorithm was named, is checked this way).
func hashAll(algo string, r io.Reader) (Digest, error) {
	h, err := newHash(algo)
	if err != nil {
		return Digest{}, err
	}
	if _, err := io.Copy(h, r); err != nil {
		return Digest{}, err
	}
	return digestOf(algo, h), nil
}
